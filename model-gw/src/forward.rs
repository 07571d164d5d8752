//! The forwarding core every API shares: one prepared call goes to its routed upstream
//! with the header policy, the trace context and the upstream's key, is retried as the
//! entry's policy allows, and its answer is relayed (edited as the API needs: `model`
//! renamed, a usage chunk the client did not ask for kept from it, or a chat completion
//! translated to a message) with the upstream's headers worth passing on; one spend log
//! entry records it.

use std::time::Instant;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use http::HeaderMap;
use sandgate_proto::error::ErrorCode;
use sandgate_proto::models::CallStream;
use sandgate_proto::models::v1::{Api, CallResponse, Header};
use sandgate_store::{KeySpend, SpendLogEntry};
use tonic::{Response, Status};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::auth::Charge;
use crate::budget::Prices;
use crate::config::GatewayConfig;
use crate::egress::{HOP_HEADER, hop_value};
use crate::headers::{
    SESSION_ID, SPEND_LOGS_METADATA, SPEND_LOGS_METADATA_LIMIT, anthropic_api_headers,
    outbound_headers, passed_answer_headers, without_empty_values,
};
use crate::messages;
use crate::messages::stream::StreamTranslator;
use crate::openai;
use crate::responses::stream::ResponsesTranslator;
use crate::retry::{RetryPolicy, transient};
use crate::rewrite::{self, SseRenamer, Usage, rename_model};
use crate::routing::{Kind, Upstream};
use crate::service::{ModelGatewayService, error, now_ms};

/// The largest piece of a whole body one message carries.
const MESSAGE_CHUNK: usize = 1024 * 1024;

/// One client call, ready to go upstream.
pub struct Prepared {
    pub api: Api,
    /// The path on the upstream: `/chat/completions`, `/responses`, …
    pub path: &'static str,
    /// The body, in pieces sent one after the other (the client's own bytes and the
    /// gateway's edits): a retry sends them again without a copy.
    pub body: Vec<Bytes>,
    /// The model the client asked for: answers name it.
    pub asked: String,
    pub user: Option<String>,
    pub answer: AnswerEdit,
}

/// What the gateway does to an answer on its way to the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerEdit {
    /// `model` renamed; with `hide_usage`, a stream's usage-only chunk (which the gateway
    /// asked for, the client did not) is recorded and kept from the client.
    Rename { hide_usage: bool },
    /// A chat completion translated to an Anthropic message.
    Message,
    /// A one-token chat completion's usage as a `count_tokens` answer.
    CountTokens,
    /// A chat completion bridged back to a Responses API answer.
    Response,
}

/// What the spend log learns from a request before it is forwarded: one entry per
/// client request, however many attempts it took.
pub struct CallRecord {
    entry: SpendLogEntry,
    /// The routing entry's name: the calls' metrics label.
    model_entry: String,
    started: Instant,
    /// For the access log line: the API, what the upstream answered, the bytes each way.
    api: Api,
    upstream_status: Option<u16>,
    bytes_in: usize,
    bytes_out: u64,
    /// What the call costs per token.
    prices: Prices,
    /// The virtual key the call is charged to.
    charge: Option<Charge>,
}

/// A finished call: its spend log entry, and what it adds to its key's spend.
pub(crate) type Finished = (SpendLogEntry, Option<KeySpend>);

impl CallRecord {
    /// The call's spend log entry, once `status` is answered, and its key's charge; its
    /// metrics are recorded.
    fn finish(mut self, status: u16, usage: Option<Usage>) -> Finished {
        let elapsed = self.started.elapsed();
        crate::metrics::finished(&self.model_entry, status, elapsed, usage);
        crate::access::log(&crate::access::AccessLine {
            api: self.api,
            asked: &self.entry.model,
            entry: &self.model_entry,
            upstream_status: self.upstream_status,
            status,
            latency: elapsed,
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
            session_id: self.entry.session_id.as_deref(),
            key_alias: self.entry.key_alias.as_deref(),
            reason: None,
        });
        Span::current().set_attribute("http.response.status_code", i64::from(status));
        self.entry.status = status;
        self.entry.latency_ms = elapsed.as_millis() as u64;
        if let Some(usage) = usage {
            self.entry.prompt_tokens = usage.prompt_tokens;
            self.entry.completion_tokens = usage.completion_tokens;
            self.entry.total_tokens = usage.total_tokens;
            self.entry.spend = self.prices.cost(&usage);
        }
        let charge = match (&self.charge, self.entry.spend) {
            (Some(charge), Some(spend)) if spend > 0.0 => Some(charge.spend(spend)),
            _ => None,
        };
        (self.entry, charge)
    }
}

/// The longest `user` or session id a spend log entry keeps: a client's value of any
/// length is cut there (at a character boundary).
const MAX_KEPT_TEXT: usize = 256;

pub(crate) fn bounded(text: &str) -> String {
    match text.char_indices().nth(MAX_KEPT_TEXT) {
        Some((end, _)) => text[..end].to_owned(),
        None => text.to_owned(),
    }
}

/// The metrics label of a call's entry: the configuration's entries by name, every model
/// added at runtime under one label, so that additions make no new series.
pub(crate) fn metric_label(upstream: &Upstream) -> String {
    if upstream.guarded {
        "(added)".to_owned()
    } else {
        upstream.entry.clone()
    }
}

/// The reason the guarded resolver gave for refusing an upstream, if that is why the
/// connection failed.
fn egress_refusal(err: &reqwest::Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(cause) = source {
        let text = cause.to_string();
        if text.contains("added models may not reach") || text.contains("names this machine") {
            return Some(format!("cannot connect to the upstream: {text}"));
        }
        source = cause.source();
    }
    None
}

/// The first of `names` the client sent, as text.
pub(crate) fn first_header<'a>(headers: &'a HeaderMap, names: &[&str]) -> Option<&'a str> {
    names
        .iter()
        .find_map(|name| headers.get(*name))
        .and_then(|value| value.to_str().ok())
}

/// The spend log metadata header, when it holds JSON of at most
/// [`SPEND_LOGS_METADATA_LIMIT`] bytes; anything else is logged and ignored.
pub(crate) fn spend_metadata(headers: &HeaderMap) -> Option<serde_json::Value> {
    let (name, raw) = SPEND_LOGS_METADATA
        .iter()
        .find_map(|name| Some((*name, headers.get(*name)?)))?;
    if raw.len() > SPEND_LOGS_METADATA_LIMIT {
        tracing::warn!(
            bytes = raw.len(),
            limit = SPEND_LOGS_METADATA_LIMIT,
            "{name} is larger than the limit; ignored"
        );
        return None;
    }
    match serde_json::from_slice(raw.as_bytes()) {
        Ok(value) => Some(value),
        Err(err) => {
            tracing::warn!(error = %err, "{name} is not JSON; ignored");
            None
        }
    }
}

fn upstream_failure(err: &reqwest::Error) -> (ErrorCode, u16, &'static str) {
    if err.is_timeout() {
        (
            ErrorCode::GatewayTimeout,
            504,
            "the upstream did not answer in time",
        )
    } else if err.is_connect() {
        (ErrorCode::BadGateway, 502, "cannot connect to the upstream")
    } else {
        (ErrorCode::BadGateway, 502, "the upstream's answer failed")
    }
}

/// The pieces of a body as one request body, its length known.
struct Pieces {
    pieces: std::collections::VecDeque<Bytes>,
    remaining: u64,
}

impl http_body::Body for Pieces {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let next = self.pieces.pop_front();
        if let Some(piece) = &next {
            self.remaining -= piece.len() as u64;
        }
        std::task::Poll::Ready(next.map(|piece| Ok(http_body::Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.pieces.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining)
    }
}

fn request_body(pieces: &[Bytes]) -> reqwest::Body {
    match pieces {
        [one] => reqwest::Body::from(one.clone()),
        _ => reqwest::Body::wrap(Pieces {
            remaining: pieces.iter().map(|piece| piece.len() as u64).sum(),
            pieces: pieces
                .iter()
                .filter(|piece| !piece.is_empty())
                .cloned()
                .collect(),
        }),
    }
}

impl ModelGatewayService {
    /// Calls the upstream, in the current (upstream) span, retrying what the retry policy
    /// allows, and relays the answer of the last attempt. Every retry happens before the
    /// first byte of an answer is relayed: the client sees one answer, never two.
    pub(crate) async fn forward(
        &self,
        headers: HeaderMap,
        config: &GatewayConfig,
        call: Prepared,
        upstream: Upstream,
        charge: Option<Charge>,
    ) -> Result<Response<CallStream>, Status> {
        let mut record = CallRecord {
            entry: SpendLogEntry {
                request_id: uuid::Uuid::new_v4().to_string(),
                started_at_ms: now_ms(),
                model: call.asked.clone(),
                upstream_model: upstream.model.clone(),
                user: call.user.as_deref().map(bounded),
                session_id: first_header(&headers, &SESSION_ID).map(bounded),
                metadata: spend_metadata(&headers),
                call_type: Some(api_name(call.api).to_owned()),
                api_key: charge.as_ref().map(|charge| charge.token.clone()),
                key_alias: charge.as_ref().and_then(|charge| charge.key_alias.clone()),
                ..SpendLogEntry::default()
            },
            model_entry: metric_label(&upstream),
            started: Instant::now(),
            api: call.api,
            upstream_status: None,
            bytes_in: call.body.iter().map(Bytes::len).sum(),
            bytes_out: 0,
            prices: upstream.prices,
            charge,
        };
        let deadline = tokio::time::Instant::now() + self.limits.call_deadline;
        let read_timeout = upstream.params.timeout.unwrap_or(self.read_timeout);
        let policy = RetryPolicy {
            retries: upstream.params.num_retries.unwrap_or(self.retry.retries),
            // A gateway of the same kind retried its own upstream already: its 429s and
            // 5xx are final unless the entry asks for retries itself.
            statuses: upstream.kind != Kind::GatewayProxy || upstream.params.num_retries.is_some(),
        };
        let Some(url) = upstream.url(call.path) else {
            // The checks at load and at `/model/new` keep such entries out.
            return Err(error(
                ErrorCode::BadGateway,
                "the model entry's api_base cannot be sent upstream",
            ));
        };
        // An address in the URL itself never reaches the guarded resolver: judged here,
        // at every call, by the rules in force.
        if upstream.guarded
            && let Some(refusal) = url
                .host_str()
                .and_then(|host| self.allowed_hosts.refusal(host))
        {
            tracing::warn!(model_entry = %upstream.entry, "an added model's upstream is not allowed: {refusal}");
            self.log_spend(record.finish(403, None)).await;
            return Err(error(
                ErrorCode::Forbidden,
                format!("the model's api_base is not allowed: {refusal}"),
            ));
        }
        let client = if upstream.guarded {
            &self.guarded_client
        } else {
            &self.client
        };
        let mut attempt = 0;
        let response = loop {
            // Built again for each attempt, rather than built once and copied for each.
            let Some(outbound) = self
                .outbound(&headers, config, &upstream, &call, (client, url.clone()))
                .body(request_body(&call.body))
                .build()
                .ok()
            else {
                // A header cannot be sent (the checks at load and at `/model/new` keep
                // such keys out): the upstream cannot be reached.
                return Err(error(
                    ErrorCode::BadGateway,
                    "the model entry's api_key cannot be sent upstream",
                ));
            };
            let answer_by = deadline.min(tokio::time::Instant::now() + read_timeout);
            let Ok(sent) = tokio::time::timeout_at(answer_by, client.execute(outbound)).await
            else {
                // Never retried: a second wait as long would double the client's.
                tracing::warn!(model = %upstream.model, attempts = attempt + 1, "upstream did not answer in time");
                self.log_spend(record.finish(504, None)).await;
                return Err(error(
                    ErrorCode::GatewayTimeout,
                    "the upstream did not answer in time",
                ));
            };
            let retry = transient(&sent, policy.statuses).and_then(|(reason, retry_after)| {
                Some((reason, policy.pause(attempt, retry_after)?))
            });
            let Some((reason, pause)) = retry else {
                match sent {
                    Ok(response) => break response,
                    Err(err) => {
                        let (code, status, message) = upstream_failure(&err);
                        // Without the URL: a base URL may carry credentials in its query.
                        let refusal = egress_refusal(&err);
                        tracing::warn!(model = %upstream.model, attempts = attempt + 1, error = %err.without_url(), "upstream call failed");
                        self.log_spend(record.finish(status, None)).await;
                        return Err(error(code, refusal.unwrap_or_else(|| message.to_owned())));
                    }
                }
            };
            attempt += 1;
            match sent {
                Err(err) => {
                    tracing::warn!(model = %upstream.model, attempt, error = %err.without_url(), ?pause, "upstream call failed; retrying");
                }
                // The failed answer's body is not read: its connection is closed.
                Ok(response) => {
                    tracing::warn!(model = %upstream.model, attempt, status = response.status().as_u16(), ?pause, "upstream answered a transient failure; retrying");
                }
            }
            crate::metrics::retried(&metric_label(&upstream), reason.label());
            tokio::time::sleep(pause).await;
        };
        Span::current().set_attribute("sandgate.upstream_attempts", i64::from(attempt) + 1);
        let status = response.status().as_u16();
        record.upstream_status = Some(status);
        let content_type = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("application/json")
            .to_owned();
        let streamed = sandgate_proto::models::is_event_stream(&content_type) && status < 300;
        let mut answer_headers = passed_answer_headers(response.headers());
        answer_headers.push(Header {
            name: "x-request-id".to_owned(),
            value: record.entry.request_id.clone(),
        });
        if streamed {
            for (name, value) in [("cache-control", "no-cache"), ("x-accel-buffering", "no")] {
                answer_headers.push(Header {
                    name: name.to_owned(),
                    value: value.to_owned(),
                });
            }
        }
        let mut first = CallResponse {
            status: u32::from(status),
            content_type: if call.answer != (AnswerEdit::Rename { hide_usage: false }) && !streamed
            {
                "application/json".to_owned()
            } else {
                content_type
            },
            chunk: Bytes::new(),
            headers: answer_headers,
        };
        if !streamed {
            // A whole answer is read here and answered at once: no relay task, no channel.
            let (messages, entry, failure) = whole_answer(
                response,
                first,
                &call,
                record,
                self.limits.max_answer_bytes,
                deadline,
            )
            .await;
            if let Some(failure) = failure {
                // Logged first, so that a client that has its (failed) answer finds it.
                self.log_spend(entry).await;
                return Err(failure);
            }
            // The client does not wait for the spend log.
            self.log_spend_soon(entry);
            return Ok(Response::new(Box::pin(futures::stream::iter(
                messages.into_iter().map(Ok),
            ))));
        }
        // Relayed as the client reads it, in the client's task: no relay task, no channel,
        // no wake-up of another thread between an upstream chunk and the client.
        let mut relay = Relay {
            gateway: self.clone(),
            status,
            response,
            deadline,
            editor: StreamEditor::new(&call, self.limits.max_event_bytes),
            record: Some(record),
            span: Span::current(),
        };
        // The first events leave with the answer's head, in one write and one read for
        // the client, as LiteLLM answers a stream once its first chunk is in. A stream
        // that fails before any event still begins (its head, then the error).
        let failed = match relay.next().await {
            Some(Ok(events)) => {
                first.chunk = events.chunk;
                None
            }
            // The error, or the end of a stream that had no events.
            other => other,
        };
        let head = futures::stream::iter(std::iter::once(Ok(first)).chain(failed));
        let rest = futures::stream::unfold(relay, |mut relay| async move {
            let next = relay.next().await?;
            Some((next, relay))
        });
        Ok(Response::new(Box::pin(head.chain(rest))))
    }

    /// A call's request, without its body: the header policy, the upstream's key and
    /// the trace context (each attempt is in the same upstream span).
    fn outbound(
        &self,
        headers: &HeaderMap,
        config: &GatewayConfig,
        upstream: &Upstream,
        call: &Prepared,
        (client, url): (&reqwest::Client, reqwest::Url),
    ) -> reqwest::RequestBuilder {
        let mut outbound = client
            .post(url)
            .header(http::header::CONTENT_TYPE, "application/json");
        let mut forwarded = outbound_headers(headers, config);
        // This gateway's hop, after those the call came with: a call that comes back is
        // refused (see `egress`).
        forwarded.remove(HOP_HEADER);
        if let Some(hops) = hop_value(headers, &self.hop_id) {
            forwarded.insert(HOP_HEADER, hops);
        }
        if upstream.kind == Kind::GatewayProxy {
            // A gateway like this one reads LiteLLM's names: a client's spec-named session
            // id and spend metadata reach it under those too.
            for names in [SESSION_ID, SPEND_LOGS_METADATA] {
                let [spec, litellm] = names;
                if !forwarded.contains_key(litellm)
                    && let Some(value) = forwarded.get(spec).cloned()
                {
                    forwarded.insert(litellm, value);
                }
            }
        }
        if call.path.starts_with("/messages") {
            anthropic_api_headers(headers, &mut forwarded);
        }
        sandgate_proto::trace::inject_headers(&Span::current(), &mut forwarded);
        without_empty_values(&mut forwarded);
        outbound = outbound.headers(forwarded);
        if !upstream.api_key.is_empty() {
            outbound = outbound.bearer_auth(&upstream.api_key);
            if call.path.starts_with("/messages") {
                // Anthropic's own API takes the key as `x-api-key`; gateways take either.
                outbound = outbound.header("x-api-key", &upstream.api_key);
            }
        }
        outbound
    }
}

/// The spend log's name of an API (LiteLLM's `call_type`).
pub(crate) fn api_name(api: Api) -> &'static str {
    match api {
        // Refused before a call is prepared.
        Api::ChatCompletions | Api::Unspecified => "completion",
        Api::Responses => "responses",
        Api::Messages => "anthropic_messages",
        Api::MessagesCountTokens => "count_tokens",
        Api::Embeddings => "embedding",
        Api::Completions => "text_completion",
    }
}

/// A body that is not streamed: read whole, edited on success, answered in messages of at
/// most [`MESSAGE_CHUNK`] bytes (no body is too large for one gRPC message).
async fn whole_answer(
    response: reqwest::Response,
    mut first: CallResponse,
    call: &Prepared,
    mut record: CallRecord,
    max_bytes: usize,
    deadline: tokio::time::Instant,
) -> (Vec<CallResponse>, Finished, Option<Status>) {
    let status = response.status();
    let body = match tokio::time::timeout_at(deadline, whole_body(response, max_bytes)).await {
        Ok(body) => body,
        Err(_) => Err(BodyFailure::Deadline),
    };
    match body {
        Ok(body) => {
            let (status, mut rest, usage) = edit_whole(call, status.as_u16(), body);
            first.status = u32::from(status);
            if !(200..300).contains(&status) {
                // A failed answer is an error object in the API's shape, whatever the
                // upstream's was.
                "application/json".clone_into(&mut first.content_type);
            }
            record.bytes_out = rest.len() as u64;
            first.chunk = rest.split_to(rest.len().min(MESSAGE_CHUNK));
            let mut messages = vec![first];
            while !rest.is_empty() {
                messages.push(CallResponse {
                    chunk: rest.split_to(rest.len().min(MESSAGE_CHUNK)),
                    ..CallResponse::default()
                });
            }
            (messages, record.finish(status, usage), None)
        }
        Err(failure) => {
            let (code, status, message) = failure.describe();
            (
                Vec::new(),
                record.finish(status, None),
                Some(error(code, message)),
            )
        }
    }
}

/// Why a whole answer's body was not read.
enum BodyFailure {
    Upstream(reqwest::Error),
    /// Larger than the limit (its announced length, or what arrived).
    TooLarge(usize),
    /// The call's deadline passed.
    Deadline,
}

impl BodyFailure {
    fn describe(self) -> (ErrorCode, u16, String) {
        match self {
            Self::Upstream(err) => {
                let (code, status, message) = upstream_failure(&err);
                tracing::warn!(error = %err.without_url(), "upstream body failed");
                (code, status, message.to_owned())
            }
            Self::TooLarge(limit) => {
                tracing::warn!(limit, "an upstream answer is larger than the limit; cut");
                (
                    ErrorCode::BadGateway,
                    502,
                    format!(
                        "the upstream's answer is larger than {limit} bytes (--gateway-max-answer-bytes)"
                    ),
                )
            }
            Self::Deadline => deadline_passed(),
        }
    }
}

fn deadline_passed() -> (ErrorCode, u16, String) {
    tracing::warn!("an upstream call passed its deadline; ended");
    (
        ErrorCode::GatewayTimeout,
        504,
        "the upstream's answer took longer than the call's deadline (--gateway-call-deadline)"
            .to_owned(),
    )
}

/// A whole answer as the client gets it (its status, its body), and the usage it reports.
fn edit_whole(call: &Prepared, status: u16, body: Bytes) -> (u16, Bytes, Option<Usage>) {
    let success = (200..300).contains(&status);
    match call.answer {
        AnswerEdit::Rename { .. } if success => {
            let (renamed, usage) = rename_model(&body, &call.asked);
            match renamed {
                std::borrow::Cow::Borrowed(_) => (status, body, usage),
                std::borrow::Cow::Owned(renamed) => (status, Bytes::from(renamed), usage),
            }
        }
        AnswerEdit::Rename { .. } => (status, openai::error(status, body), None),
        AnswerEdit::Message | AnswerEdit::CountTokens if success => {
            // The answer is rewritten whole below: only its usage is read here.
            let usage = rewrite::usage(&body);
            let translated = if call.answer == AnswerEdit::Message {
                messages::message(&body, &call.asked)
            } else {
                messages::token_count(&body)
            };
            match translated {
                Some(translated) => (status, Bytes::from(translated), usage),
                // A success that is not a chat completion: the upstream's fault, said so.
                None => (
                    502,
                    Bytes::from(messages::error(
                        502,
                        b"the upstream's answer is not a chat completion",
                    )),
                    usage,
                ),
            }
        }
        AnswerEdit::Message | AnswerEdit::CountTokens => {
            (status, Bytes::from(messages::error(status, &body)), None)
        }
        AnswerEdit::Response if success => {
            let usage = rewrite::usage(&body);
            match crate::responses::response(&body, &call.asked) {
                Some(translated) => (status, Bytes::from(translated), usage),
                None => (
                    502,
                    openai::error(
                        502,
                        Bytes::from_static(b"the upstream's answer is not a chat completion"),
                    ),
                    usage,
                ),
            }
        }
        AnswerEdit::Response => (status, openai::error(status, body), None),
    }
}

/// An answer's whole body, of at most `max_bytes`. One with a length is whole once that
/// many bytes are in: its end-of-stream would come only after the task hyper-util spawns
/// to put the connection back in the pool has run (a wake-up of another thread, on the
/// call's path).
async fn whole_body(
    mut response: reqwest::Response,
    max_bytes: usize,
) -> Result<Bytes, BodyFailure> {
    let length = response.content_length();
    if length.is_some_and(|length| length > max_bytes as u64) {
        return Err(BodyFailure::TooLarge(max_bytes));
    }
    let mut next = async || response.chunk().await.map_err(BodyFailure::Upstream);
    let Some(first) = next().await? else {
        return Ok(Bytes::new());
    };
    let whole = |body: &[u8]| length.is_some_and(|length| body.len() as u64 >= length);
    if whole(&first) {
        return Ok(first);
    }
    // Reserved from what arrived, not from the announced length: an upstream's header
    // does not size an allocation.
    let mut body = BytesMut::from(first);
    while !whole(&body) {
        match next().await? {
            Some(chunk) if body.len() + chunk.len() > max_bytes => {
                return Err(BodyFailure::TooLarge(max_bytes));
            }
            Some(chunk) => body.extend_from_slice(&chunk),
            None => break,
        }
    }
    if body.len() > max_bytes {
        return Err(BodyFailure::TooLarge(max_bytes));
    }
    Ok(body.freeze())
}

/// How a streamed answer is edited, event by event.
enum StreamEditor {
    Rename(SseRenamer),
    Message(StreamTranslator),
    Response(ResponsesTranslator),
}

impl StreamEditor {
    fn new(call: &Prepared, max_line: usize) -> Self {
        match call.answer {
            AnswerEdit::Rename { hide_usage } => Self::Rename(
                SseRenamer::new(&call.asked)
                    .hiding_usage(hide_usage)
                    .with_line_limit(max_line),
            ),
            AnswerEdit::Message | AnswerEdit::CountTokens => {
                Self::Message(StreamTranslator::new(&call.asked).with_line_limit(max_line))
            }
            AnswerEdit::Response => {
                Self::Response(ResponsesTranslator::new(&call.asked).with_line_limit(max_line))
            }
        }
    }

    fn overflowed(&self) -> bool {
        match self {
            Self::Rename(renamer) => renamer.overflowed(),
            Self::Message(translator) => translator.overflowed(),
            Self::Response(translator) => translator.overflowed(),
        }
    }

    fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        match self {
            Self::Rename(renamer) => renamer.push(chunk),
            Self::Message(translator) => translator.push(chunk),
            Self::Response(translator) => translator.push(chunk),
        }
    }

    fn finish(&mut self) -> Vec<u8> {
        match self {
            Self::Rename(renamer) => renamer.finish(),
            Self::Message(translator) => translator.finish(),
            Self::Response(translator) => translator.finish(),
        }
    }

    fn usage(&self) -> Option<Usage> {
        match self {
            Self::Rename(renamer) => renamer.usage,
            Self::Message(translator) => translator.usage,
            Self::Response(translator) => translator.usage,
        }
    }

    /// Whether the answer's last event has been passed on.
    fn ended(&self) -> bool {
        match self {
            Self::Rename(renamer) => renamer.ended,
            Self::Message(translator) => translator.ended(),
            Self::Response(translator) => translator.ended(),
        }
    }
}

/// A streamed answer's events (the first leave with its head): passed on as they arrive, each
/// edited. Its spend log entry is written when the answer ends, fails, or is dropped
/// unfinished (the client went away: 499, and the upstream call ends with it).
struct Relay {
    gateway: ModelGatewayService,
    /// The upstream's status.
    status: u16,
    response: reqwest::Response,
    /// When the call must be over, its stream included.
    deadline: tokio::time::Instant,
    editor: StreamEditor,
    /// `None` once the entry is written.
    record: Option<CallRecord>,
    /// The upstream call's span: it lasts until the answer is relayed whole.
    span: Span,
}

impl Relay {
    /// The next message for the client; `None` at the end.
    async fn next(&mut self) -> Option<Result<CallResponse, Status>> {
        loop {
            self.record.as_ref()?;
            let Ok(chunk) = tokio::time::timeout_at(self.deadline, self.response.chunk()).await
            else {
                let (code, failed, message) = deadline_passed();
                let entry = self.finish(failed, || {})?;
                self.gateway.log_spend(entry).await;
                return Some(Err(error(code, message)));
            };
            match chunk {
                Ok(Some(chunk)) => {
                    let out = self.editor.push(&chunk);
                    if self.editor.overflowed() {
                        let entry = self.finish(502, || {
                            tracing::warn!(
                                "an upstream stream's line is longer than the limit; ended"
                            );
                        })?;
                        self.gateway.log_spend(entry).await;
                        return Some(Err(error(
                            ErrorCode::BadGateway,
                            "an event of the upstream's stream is longer than the limit (--gateway-max-event-bytes)",
                        )));
                    }
                    if !out.is_empty() {
                        if let Some(record) = &mut self.record {
                            record.bytes_out += out.len() as u64;
                        }
                        return Some(Ok(message(out)));
                    }
                }
                Err(err) => {
                    let (code, failed, message) = upstream_failure(&err);
                    let entry = self.finish(failed, || {
                        tracing::warn!(error = %err.without_url(), "upstream stream failed");
                    })?;
                    // Logged first, so that a client that has its (failed) answer finds
                    // the entry.
                    self.gateway.log_spend(entry).await;
                    return Some(Err(error(code, message)));
                }
                Ok(None) => {
                    let rest = self.editor.finish();
                    if let Some(record) = &mut self.record {
                        record.bytes_out += rest.len() as u64;
                    }
                    let entry = self.finish(self.status, || {})?;
                    self.gateway.log_spend_soon(entry);
                    return (!rest.is_empty()).then(|| Ok(message(rest)));
                }
            }
        }
    }

    /// The spend log entry, once: the relay is over, its `status` known (`also` runs in the
    /// upstream span too).
    fn finish(&mut self, status: u16, also: impl FnOnce()) -> Option<Finished> {
        let record = self.record.take()?;
        let _entered = self.span.enter();
        also();
        Some(record.finish(status, self.editor.usage()))
    }
}

impl Drop for Relay {
    /// The client left. Once its answer's last event was relayed (Codex closes the
    /// connection at `response.completed`, before the upstream's stream has ended) the
    /// call is complete and logged with the upstream's status; before, it is 499.
    fn drop(&mut self) {
        let status = if self.editor.ended() {
            self.status
        } else {
            499
        };
        if let Some(entry) = self.finish(status, || {}) {
            self.gateway.log_spend_soon(entry);
        }
    }
}

fn message(chunk: Vec<u8>) -> CallResponse {
    CallResponse {
        chunk: chunk.into(),
        ..CallResponse::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(answer: AnswerEdit) -> Prepared {
        Prepared {
            api: Api::Messages,
            path: "/chat/completions",
            body: Vec::new(),
            asked: "claude".to_owned(),
            user: None,
            answer,
        }
    }

    #[test]
    fn a_translated_answer_keeps_its_status_unless_it_cannot_be_translated() {
        let chat = br#"{"id":"c","choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3}}"#;
        let (status, body, usage) =
            edit_whole(&call(AnswerEdit::Message), 200, Bytes::from_static(chat));
        assert_eq!(status, 200);
        assert!(
            body.starts_with(br#"{"id":"msg_c","type":"message""#),
            "{body:?}"
        );
        assert_eq!(usage.and_then(|usage| usage.total_tokens), Some(3));

        let (status, body, _) = edit_whole(
            &call(AnswerEdit::Message),
            200,
            Bytes::from_static(b"<html>"),
        );
        assert_eq!(status, 502);
        assert!(body.starts_with(br#"{"type":"error""#), "{body:?}");

        let (status, body, _) = edit_whole(
            &call(AnswerEdit::CountTokens),
            429,
            Bytes::from_static(br#"{"error":{"message":"slow down"}}"#),
        );
        assert_eq!(status, 429);
        assert_eq!(
            &body[..],
            br#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#
        );
    }
}
