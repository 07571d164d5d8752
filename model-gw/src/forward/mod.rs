//! The forwarding core every API shares, [`Forwarder`]: one prepared call goes to its
//! routed upstream with the header policy, the trace context and the upstream's key, is
//! retried as the entry's policy allows, and its answer is relayed (edited as the API
//! needs: `model` renamed, a usage chunk the client did not ask for kept from it, or a
//! chat completion translated to a message) with the upstream's headers worth passing on;
//! one spend log entry records it. It knows the call, its route and its caller's charge,
//! nothing of the service that authenticated and routed it.

mod body;
mod clients;
mod connect;
mod edit;
mod failure;
mod record;
mod relay;
mod whole;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue};
use sandgate_proto::error::ErrorCode;
use sandgate_proto::models::CallStream;
use sandgate_proto::models::v1::{CallResponse, Header};
use sandgate_proto::trace::set_current_attributes;
use sandgate_store::{Activity, SpendLogEntry};
use tonic::Status;
use tracing::Span;

use self::body::Pieces;
pub(crate) use self::clients::Answer;
use self::clients::Clients;
use self::edit::StreamEditor;
pub(crate) use self::failure::UpstreamError;
use self::record::CallRecord;
use self::relay::{Live, Relay};
use self::whole::whole_answer;
use crate::admit::Charge;
use crate::call::{AnswerEdit, Prepared, api_name};
use crate::config::GatewayConfig;
use crate::egress::{AllowedHosts, HOP_HEADER, hop_value};
use crate::headers::{
    SESSION_ID, SPEND_LOGS_METADATA, anthropic_api_headers, first_header, outbound_headers,
    passed_answer_headers, without_empty_values,
};
use crate::metrics::metric_label;
use crate::retry::{RetryPolicy, transient};
use crate::routing::{Kind, Upstream};
use crate::spend::{SpendLog, bounded, spend_metadata};
use crate::support::{error, now_ms};

/// What one upstream answer may take.
#[derive(Clone, Copy, Debug)]
pub struct AnswerLimits {
    /// The largest whole (not streamed) answer read: past it the call ends with a 502.
    pub max_answer_bytes: usize,
    /// The longest line of a streamed answer: past it the stream ends with an error event.
    pub max_event_bytes: usize,
    /// How long one call may take in all, its stream included (then 504).
    pub call_deadline: Duration,
}

impl Default for AnswerLimits {
    fn default() -> Self {
        Self {
            max_answer_bytes: 32 * 1024 * 1024,
            max_event_bytes: 8 * 1024 * 1024,
            call_deadline: Duration::from_secs(1800),
        }
    }
}

/// How the core reaches upstreams.
pub(crate) struct ForwarderOptions {
    /// How long connecting to an upstream may take (then 502).
    pub connect_timeout: Duration,
    /// How long an upstream may stay silent, unless its entry says.
    pub read_timeout: Duration,
    /// Retries, unless an entry says.
    pub retries: u32,
    /// Hosts models added at runtime may reach whatever their addresses (see `egress`).
    pub allowed_upstream_hosts: Vec<String>,
    pub limits: AnswerLimits,
    /// Marks the sandbox behind a call's session active while the call lasts.
    pub activity: Arc<Activity>,
}

/// The forwarding core: the upstream clients, the limits and retries, and the spend log
/// every call's entry goes to.
pub(crate) struct Forwarder {
    /// Pooled, a pool per thread: connections to an upstream are reused across calls.
    clients: Clients,
    allowed_hosts: AllowedHosts,
    /// This gateway's id in the hop header of the calls it sends (see `egress`).
    hop_id: String,
    limits: AnswerLimits,
    /// How long an upstream may stay silent, unless its entry says.
    read_timeout: Duration,
    /// Retries, unless an entry says.
    retry: RetryPolicy,
    spend: Arc<SpendLog>,
    activity: Arc<Activity>,
    /// The series a call's metrics count in.
    series: Arc<crate::metrics::CallSeries>,
}

impl Forwarder {
    pub(crate) fn new(options: ForwarderOptions, spend: Arc<SpendLog>) -> Result<Self, String> {
        let allowed_hosts = AllowedHosts::new(options.allowed_upstream_hosts);
        let clients = Clients::new(
            options.connect_timeout,
            options.read_timeout,
            allowed_hosts.clone(),
        )?;
        Ok(Self {
            clients,
            allowed_hosts,
            hop_id: hex::encode(rand::random::<[u8; 8]>()),
            limits: options.limits,
            read_timeout: options.read_timeout,
            retry: RetryPolicy {
                retries: options.retries,
                statuses: true,
            },
            activity: options.activity,
            spend,
            series: Arc::default(),
        })
    }

    /// The hosts models added at runtime may reach whatever their addresses.
    pub(crate) fn allowed_hosts(&self) -> &AllowedHosts {
        &self.allowed_hosts
    }

    /// This gateway's id in the hop header: a call that carries it came back.
    pub(crate) fn hop_id(&self) -> &str {
        &self.hop_id
    }
}

impl Forwarder {
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
    ) -> Result<CallStream, Status> {
        let session_id = first_header(&headers, &SESSION_ID).map(bounded);
        // A call in progress, however long it streams, is its sandbox's activity; the
        // first of its start is on its timeline.
        if let Some(session) = &session_id {
            self.activity.llm_call(session);
        }
        let active = session_id
            .clone()
            .and_then(|session| self.activity.hold(session));
        let mut record = CallRecord {
            active,
            entry: SpendLogEntry {
                request_id: uuid::Uuid::new_v4().to_string(),
                started_at_ms: now_ms(),
                model: call.asked.clone(),
                upstream_model: upstream.model.clone(),
                user: call.user.as_deref().map(bounded),
                session_id,
                metadata: spend_metadata(&headers),
                call_type: Some(api_name(call.api).to_owned()),
                api_key: charge.as_ref().map(|charge| charge.token.clone()),
                key_alias: charge.as_ref().and_then(|charge| charge.key_alias.clone()),
                key_user_id: charge.as_ref().and_then(|charge| charge.user_id.clone()),
                team_id: charge.as_ref().and_then(|charge| charge.team_id.clone()),
                ..SpendLogEntry::default()
            },
            model_entry: metric_label(&upstream),
            series: self.series.clone(),
            started: Instant::now(),
            api: call.api,
            upstream_status: None,
            bytes_in: call.body.iter().map(Bytes::len).sum(),
            bytes_out: 0,
            bytes_read: 0,
            max_output: call.max_output,
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
        let Some(uri) = upstream.uri(call.path) else {
            // The checks at load and at `/model/new` keep such entries out.
            return Err(error(
                ErrorCode::BadGateway,
                "the model entry's api_base cannot be sent upstream",
            ));
        };
        // An address in the URL itself never reaches the guarded resolver: judged here,
        // at every call, by the rules in force.
        if upstream.guarded
            && let Some(refusal) = upstream
                .base
                .as_ref()
                .and_then(|base| base.host())
                .and_then(|host| self.allowed_hosts.refusal(host))
        {
            tracing::warn!(model_entry = %upstream.entry, "an added model's upstream is not allowed: {refusal}");
            self.spend.log_now(record.finish(403, None)).await;
            return Err(error(
                ErrorCode::Forbidden,
                format!("the model's api_base is not allowed: {refusal}"),
            ));
        }
        let client = self.clients.get(upstream.guarded);
        let mut attempt = 0;
        let response = loop {
            // Built again for each attempt, rather than built once and copied for each.
            let Some(outbound) = self.outbound(&headers, config, &upstream, &call, uri.clone())
            else {
                // A header cannot be sent (the checks at load and at `/model/new` keep
                // such keys out): the upstream cannot be reached.
                return Err(error(
                    ErrorCode::BadGateway,
                    "the model entry's api_key cannot be sent upstream",
                ));
            };
            let answer_by = deadline.min(tokio::time::Instant::now() + read_timeout);
            let Ok(sent) = tokio::time::timeout_at(answer_by, client.send(outbound)).await else {
                // Never retried: a second wait as long would double the client's.
                tracing::warn!(model = %upstream.model, attempts = attempt + 1, "upstream did not answer in time");
                self.spend.log_now(record.finish(504, None)).await;
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
                        let (code, status, message) = err.describe();
                        let refusal = err.egress_refusal();
                        tracing::warn!(model = %upstream.model, attempts = attempt + 1, error = %err, "upstream call failed");
                        self.spend.log_now(record.finish(status, None)).await;
                        return Err(error(code, refusal.unwrap_or_else(|| message.to_owned())));
                    }
                }
            };
            attempt += 1;
            match sent {
                Err(err) => {
                    tracing::warn!(model = %upstream.model, attempt, error = %err, ?pause, "upstream call failed; retrying");
                }
                // The failed answer's body is not read: its connection is closed.
                Ok(response) => {
                    tracing::warn!(model = %upstream.model, attempt, status = response.status().as_u16(), ?pause, "upstream answered a transient failure; retrying");
                }
            }
            crate::metrics::retried(&metric_label(&upstream), reason.label());
            tokio::time::sleep(pause).await;
        };
        set_current_attributes(|| {
            [(
                "sandgate.upstream_attempts",
                (i64::from(attempt) + 1).into(),
            )]
        });
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
                self.spend.log_now(entry).await;
                return Err(failure);
            }
            // The client does not wait for the spend log, nor for a held call's
            // settlement, which starts now (see `settling`).
            self.spend.log_answered(entry);
            return Ok(Box::pin(futures::stream::iter(
                messages.into_iter().map(Ok),
            )));
        }
        // Relayed as the client reads it, in the client's task: no relay task, no channel,
        // no wake-up of another thread between an upstream chunk and the client.
        let mut relay = Relay {
            spend: self.spend.clone(),
            status,
            deadline,
            live: Some(Live {
                response,
                editor: StreamEditor::new(&call, self.limits.max_event_bytes),
                record,
                stashed: None,
            }),
            span: Span::current(),
        };
        // The first events leave with the answer's head, in one write and one read for
        // the client, as LiteLLM answers a stream once its first chunk is in. A stream
        // that fails before any event still begins (its head, then the error).
        let failed = match relay.first().await {
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
        Ok(Box::pin(head.chain(rest)))
    }

    /// A call's request: the header policy, the upstream's key and the trace context
    /// (each attempt is in the same upstream span); `None` when the key cannot be sent in
    /// a header.
    fn outbound(
        &self,
        headers: &HeaderMap,
        config: &GatewayConfig,
        upstream: &Upstream,
        call: &Prepared,
        uri: http::Uri,
    ) -> Option<http::Request<Pieces>> {
        let mut forwarded = outbound_headers(headers, config);
        // This gateway's hop, after those the call came with: a call that comes back is
        // refused (see `egress`).
        forwarded.remove(&HOP_HEADER);
        if let Some(hops) = hop_value(headers, &self.hop_id) {
            forwarded.insert(&HOP_HEADER, hops);
        }
        if upstream.kind == Kind::GatewayProxy {
            // A gateway like this one reads LiteLLM's names: a client's spec-named session
            // id and spend metadata reach it under those too.
            for [spec, litellm] in [&SESSION_ID, &SPEND_LOGS_METADATA] {
                if !forwarded.contains_key(litellm)
                    && let Some(value) = forwarded.get(spec).cloned()
                {
                    forwarded.insert(litellm.clone(), value);
                }
            }
        }
        if call.path.starts_with("/messages") {
            anthropic_api_headers(headers, &mut forwarded);
        }
        sandgate_proto::trace::inject_current(&mut forwarded);
        without_empty_values(&mut forwarded);
        forwarded.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        forwarded
            .entry(ACCEPT)
            .or_insert(HeaderValue::from_static("*/*"));
        if !upstream.api_key.is_empty() {
            let secret = |text: &str| {
                let mut value = HeaderValue::from_str(text).ok()?;
                value.set_sensitive(true);
                Some(value)
            };
            forwarded.insert(
                AUTHORIZATION,
                secret(&format!("Bearer {}", upstream.api_key))?,
            );
            if call.path.starts_with("/messages") {
                // Anthropic's own API takes the key as `x-api-key`; gateways take either.
                forwarded.insert("x-api-key", secret(&upstream.api_key)?);
            }
        }
        let mut request = http::Request::new(Pieces::new(&call.body));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = uri;
        *request.headers_mut() = forwarded;
        Some(request)
    }
}
