//! The ModelGateway gRPC service: master-key auth, the model list, and chat completions
//! forwarded to the routed upstream with the header policy, renamed `model` and a spend
//! log entry per call.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use http::HeaderMap;
use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sandgate_proto::models::ChatCompletionStream as ChatStream;
use sandgate_proto::models::v1::model_gateway_server::ModelGateway;
use sandgate_proto::models::v1::{
    AddModelRequest, AddModelResponse, ChatCompletionRequest, ChatCompletionResponse,
    GatewayParams, GetModelRequest, GetModelResponse, ListModelsRequest, ListModelsResponse,
    ListSpendLogsRequest, ListSpendLogsResponse, Model, SpendLogEntry as ProtoSpendLogEntry,
};
use sandgate_runtime_api::store::{SpendLogEntry, Store, StoredModel};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::{Instrument, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::config::{ConfigFile, GatewayConfig, ModelEntry, check_api_base, check_model};
use crate::headers::{
    SESSION_ID, SPEND_LOGS_METADATA, SPEND_LOGS_METADATA_LIMIT, outbound_headers,
};
use crate::registry::{OPENAI_MODELS, REGISTRY_CREATED};
use crate::retry::{RetryPolicy, transient};
use crate::rewrite::{ChatRequest, SseRenamer, Usage, rename_model};
use crate::routing::{RouteError, Upstream, WILDCARD, route};

/// How the gateway runs.
pub struct GatewayOptions {
    pub config: ConfigFile,
    /// `PROXY_MASTER_KEY`; without it every call is refused.
    pub master_key: Option<String>,
    /// How long connecting to an upstream may take (then 502).
    pub connect_timeout: Duration,
    /// How long an upstream may stay silent, before its headers or between two chunks
    /// (then 504).
    pub read_timeout: Duration,
    /// How many times a call that failed before its answer began is tried again (429,
    /// 500, 502, 503, a refused or reset connection); 0: never.
    pub retries: u32,
}

/// The service; clones share one gateway.
#[derive(Clone)]
pub struct ModelGatewayService(Arc<Gateway>);

impl std::ops::Deref for ModelGatewayService {
    type Target = Gateway;
    fn deref(&self) -> &Gateway {
        &self.0
    }
}

pub struct Gateway {
    config: ConfigFile,
    /// sha256 of the master key: compared in constant time, whatever the lengths.
    master_key: Option<[u8; 32]>,
    store: Store,
    /// Pooled: connections to an upstream are reused across calls.
    client: reqwest::Client,
    read_timeout: Duration,
    retry: RetryPolicy,
    /// Spend log entries waiting to be written.
    spend_queue: Mutex<SpendQueue>,
    /// Held while the spend log queue is written out.
    spend_writer: tokio::sync::Mutex<()>,
    /// The store's generation of added models (see `ModelStore::model_changes`).
    model_changes: watch::Receiver<Option<u64>>,
    /// The entries a chat completion routes over, kept between calls: reading the added
    /// models from the store for each call would put a store round trip before every
    /// upstream call.
    kept: Mutex<Option<KeptEntries>>,
}

/// Model entries kept for routing, and what they were read under.
struct KeptEntries {
    /// The configuration's scope of added models.
    scope: String,
    /// The store's generation of added models before they were read.
    generation: u64,
    read_at: Instant,
    entries: Arc<[ModelEntry]>,
}

/// How long kept entries serve at most, whatever the generation says: a bound on their
/// age should the store's notifications stop without it noticing.
const KEEP_ENTRIES_AT_MOST: Duration = Duration::from_secs(30);

#[derive(Default)]
struct SpendQueue {
    entries: Vec<SpendLogEntry>,
    /// A delayed write is scheduled: entries queued for one need not schedule another.
    scheduled: bool,
}

/// How long a spend log entry waits for others to share its write, at most.
const SPEND_LOG_DELAY: Duration = Duration::from_millis(10);

/// Spend log entries queued behind a slow store at most; past it new ones are dropped
/// (and said so in the log) rather than growing memory.
const MAX_QUEUED_SPEND_ENTRIES: usize = 10_000;

/// Spend log entries listed when the caller names no limit.
const DEFAULT_SPEND_LOG_LIMIT: usize = 100;
/// The largest piece of a whole body one message carries.
const MESSAGE_CHUNK: usize = 1024 * 1024;
/// Messages of a streamed answer buffered ahead of a slow reader.
const STREAM_BUFFER: usize = 16;

fn error(code: ErrorCode, message: impl Into<String>) -> Status {
    ErrorDetail::new(code, message).into_status()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

impl ModelGatewayService {
    pub fn new(store: Store, options: GatewayOptions) -> Result<Self, String> {
        Gateway::new(store, options).map(|gateway| Self(Arc::new(gateway)))
    }
}

impl Gateway {
    fn new(store: Store, options: GatewayOptions) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            .read_timeout(options.read_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|err| format!("cannot build the HTTP client: {err}"))?;
        Ok(Self {
            config: options.config,
            master_key: options
                .master_key
                .filter(|key| !key.is_empty())
                .map(|key| Sha256::digest(key.as_bytes()).into()),
            model_changes: store.models.model_changes(),
            store,
            client,
            read_timeout: options.read_timeout,
            retry: RetryPolicy {
                retries: options.retries,
            },
            spend_queue: Mutex::default(),
            spend_writer: tokio::sync::Mutex::default(),
            kept: Mutex::default(),
        })
    }

    fn authenticate(&self, metadata: &tonic::metadata::MetadataMap) -> Result<(), Status> {
        let Some(expected) = &self.master_key else {
            return Err(error(
                ErrorCode::Unauthenticated,
                "Authentication Error: the gateway has no master key configured",
            ));
        };
        let valid = presented_keys(metadata).any(|key| {
            let digest: [u8; 32] = Sha256::digest(key.as_bytes()).into();
            bool::from(digest.ct_eq(expected))
        });
        if valid {
            Ok(())
        } else {
            Err(error(
                ErrorCode::Unauthenticated,
                "Authentication Error: invalid or missing master key (Authorization: Bearer <key>, or x-api-key, api-key, x-litellm-api-key)",
            ))
        }
    }

    /// Every model entry of `config`, read now: configured, then added.
    async fn entries(&self, config: &GatewayConfig) -> Result<Arc<[ModelEntry]>, Status> {
        let added = self
            .store
            .models
            .added_models(&config.scope)
            .await
            .map_err(ErrorDetail::from)?;
        let mut entries = config.models.clone();
        entries.extend(added.into_iter().map(|model| ModelEntry {
            model_name: model.model_name,
            model: model.model,
            api_base: model.api_base,
            api_key: model.api_key,
        }));
        Ok(entries.into())
    }

    /// The configuration in effect and its model entries, as kept from an earlier call
    /// when no model was added since (`true`: kept), else read now (and kept).
    async fn kept_entries(&self) -> Result<(Arc<GatewayConfig>, Arc<[ModelEntry]>, bool), Status> {
        let config = self.config.current();
        // Read before the store is: an addition meanwhile makes what is read stale.
        let generation = *self.model_changes.borrow();
        let kept = self.kept.lock().ok().and_then(|kept| {
            kept.as_ref()
                .filter(|kept| {
                    Some(kept.generation) == generation
                        && kept.scope == config.scope
                        && kept.read_at.elapsed() < KEEP_ENTRIES_AT_MOST
                })
                .map(|kept| kept.entries.clone())
        });
        if let Some(entries) = kept {
            return Ok((config, entries, true));
        }
        let read_at = Instant::now();
        let entries = self.entries(&config).await?;
        if let (Some(generation), Ok(mut kept)) = (generation, self.kept.lock()) {
            *kept = Some(KeptEntries {
                scope: config.scope.clone(),
                generation,
                read_at,
                entries: entries.clone(),
            });
        }
        Ok((config, entries, false))
    }

    async fn models(&self) -> Result<Vec<Model>, Status> {
        let entries = self.entries(&self.config.current()).await?;
        let mut ids: Vec<&str> = Vec::with_capacity(entries.len() + OPENAI_MODELS.len());
        for entry in entries.iter() {
            if !ids.contains(&entry.model_name.as_str()) {
                ids.push(&entry.model_name);
            }
        }
        if entries.iter().any(|entry| entry.model_name == WILDCARD) {
            ids.extend(
                OPENAI_MODELS
                    .iter()
                    .filter(|id| !ids.contains(id))
                    .collect::<Vec<_>>(),
            );
        }
        Ok(ids
            .into_iter()
            .map(|id| Model {
                id: id.to_owned(),
                created: REGISTRY_CREATED,
                owned_by: "openai".to_owned(),
            })
            .collect())
    }

    /// Queues `entry` for the spend log; `true` when it is the first to wait for a delayed
    /// write (and `schedule` asks for one), so that its caller schedules it.
    fn enqueue_spend(&self, entry: SpendLogEntry, schedule: bool) -> bool {
        let Ok(mut pending) = self.spend_queue.lock() else {
            return false;
        };
        if pending.entries.len() >= MAX_QUEUED_SPEND_ENTRIES {
            tracing::warn!(request_id = %entry.request_id, "spend log queue full; entry dropped");
            return false;
        }
        pending.entries.push(entry);
        let first = schedule && !pending.scheduled;
        pending.scheduled |= schedule;
        first
    }

    /// Writes `entry` now, with whatever else waits: for a failed answer, whose entry is in
    /// the log by the time the client has the answer.
    async fn log_spend(&self, entry: SpendLogEntry) {
        self.enqueue_spend(entry, false);
        self.write_spend_queue(false).await;
    }

    /// Writes what is queued, in batches, until the queue is empty. One write at a time:
    /// a caller that waited finds its entry written, or writes it. `delayed`: the
    /// scheduled write, which is over once it finds the queue empty.
    async fn write_spend_queue(&self, delayed: bool) {
        let _writing = self.spend_writer.lock().await;
        loop {
            let batch = match self.spend_queue.lock() {
                Ok(mut pending) if !pending.entries.is_empty() => {
                    std::mem::take(&mut pending.entries)
                }
                Ok(mut pending) => {
                    pending.scheduled &= !delayed;
                    return;
                }
                Err(_) => return,
            };
            if let Err(err) = self.store.spend_log.append_spend_logs(&batch).await {
                tracing::warn!(error = %err, entries = batch.len(), "spend log entries lost");
            }
        }
    }
}

impl ModelGatewayService {
    /// Queues `entry` to be written within [`SPEND_LOG_DELAY`], with the entries of the calls
    /// that end meanwhile: one store round trip for many calls, and none on a call's path.
    fn log_spend_soon(&self, entry: SpendLogEntry) {
        if self.enqueue_spend(entry, true) {
            // Weak: a stopped gateway (which flushed its queue) is not kept alive, nor its
            // store open, by a write that has nothing left to do.
            let gateway = Arc::downgrade(&self.0);
            tokio::spawn(async move {
                tokio::time::sleep(SPEND_LOG_DELAY).await;
                if let Some(gateway) = gateway.upgrade() {
                    gateway.write_spend_queue(true).await;
                }
            });
        }
    }

    /// Writes the spend log entries still queued: called once the server has stopped, so
    /// that a stop loses none.
    pub async fn flush_spend_log(&self) {
        self.write_spend_queue(false).await;
    }
}

/// What the spend log learns from a request before it is forwarded: one entry per
/// client request, however many attempts it took.
struct CallRecord {
    entry: SpendLogEntry,
    /// The routing entry's name: the calls' metrics label.
    model_entry: String,
    started: Instant,
}

impl CallRecord {
    /// The call's spend log entry, once `status` is answered; its metrics are recorded.
    fn finish(mut self, status: u16, usage: Option<Usage>) -> SpendLogEntry {
        let elapsed = self.started.elapsed();
        crate::metrics::finished(&self.model_entry, status, elapsed, usage);
        Span::current().set_attribute("http.response.status_code", i64::from(status));
        self.entry.status = status;
        self.entry.latency_ms = elapsed.as_millis() as u64;
        if let Some(usage) = usage {
            self.entry.prompt_tokens = usage.prompt_tokens;
            self.entry.completion_tokens = usage.completion_tokens;
            self.entry.total_tokens = usage.total_tokens;
        }
        self.entry
    }
}

/// Every master key a caller presents, where LiteLLM's proxy takes one: `Authorization:
/// Bearer` (OpenAI SDKs), `x-api-key` (the Anthropic SDK, Claude Code), `api-key` (Azure
/// OpenAI clients), `x-litellm-api-key` (LiteLLM's own, with or without `Bearer `).
fn presented_keys(metadata: &tonic::metadata::MetadataMap) -> impl Iterator<Item = &str> {
    let text = |name: &str| metadata.get(name).and_then(|value| value.to_str().ok());
    let bearer = text("authorization").and_then(sandgate_proto::bearer_token);
    let litellm = text("x-litellm-api-key")
        .map(|value| sandgate_proto::bearer_token(value).unwrap_or(value.trim()));
    let raw = ["x-api-key", "api-key"]
        .into_iter()
        .filter_map(move |name| text(name).map(str::trim));
    bearer.into_iter().chain(litellm).chain(raw)
}

/// The first of `names` the client sent, as text.
fn first_header<'a>(headers: &'a HeaderMap, names: &[&str]) -> Option<&'a str> {
    names
        .iter()
        .find_map(|name| headers.get(*name))
        .and_then(|value| value.to_str().ok())
}

/// The spend log metadata header, when it holds JSON of at most
/// [`SPEND_LOGS_METADATA_LIMIT`] bytes; anything else is logged and ignored.
fn spend_metadata(headers: &HeaderMap) -> Option<serde_json::Value> {
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

#[tonic::async_trait]
impl ModelGateway for ModelGatewayService {
    async fn list_models(
        &self,
        request: Request<ListModelsRequest>,
    ) -> Result<Response<ListModelsResponse>, Status> {
        self.authenticate(request.metadata())?;
        Ok(Response::new(ListModelsResponse {
            models: self.models().await?,
        }))
    }

    async fn get_model(
        &self,
        request: Request<GetModelRequest>,
    ) -> Result<Response<GetModelResponse>, Status> {
        self.authenticate(request.metadata())?;
        let id = &request.get_ref().id;
        let model = self
            .models()
            .await?
            .into_iter()
            .find(|model| model.id == *id)
            .ok_or_else(|| {
                error(
                    ErrorCode::NotFound,
                    format!("model {id:?} is not in the model list"),
                )
            })?;
        Ok(Response::new(GetModelResponse { model: Some(model) }))
    }

    async fn add_model(
        &self,
        request: Request<AddModelRequest>,
    ) -> Result<Response<AddModelResponse>, Status> {
        self.authenticate(request.metadata())?;
        let AddModelRequest {
            model_name,
            gateway_params,
        } = request.into_inner();
        let params = gateway_params
            .ok_or_else(|| error(ErrorCode::BadRequest, "`gateway_params` is required"))?;
        if model_name.is_empty() {
            return Err(error(ErrorCode::BadRequest, "`model_name` is required"));
        }
        check_model(&params.model).map_err(|err| error(ErrorCode::BadRequest, err))?;
        check_api_base(&params.api_base).map_err(|err| error(ErrorCode::BadRequest, err))?;
        let config = self.config.current();
        let stored = StoredModel {
            model_name,
            model: params.model,
            api_base: params.api_base,
            api_key: params.api_key,
            added_at_ms: now_ms(),
        };
        self.store
            .models
            .add_model(&config.scope, &stored)
            .await
            .map_err(ErrorDetail::from)?;
        tracing::info!(model_name = %stored.model_name, model = %stored.model, "model added");
        Ok(Response::new(AddModelResponse {
            model_name: stored.model_name,
            gateway_params: Some(GatewayParams {
                model: stored.model,
                api_base: stored.api_base,
                api_key: String::new(),
            }),
            added_at_ms: stored.added_at_ms,
        }))
    }

    type ChatCompletionStream = ChatStream;

    async fn chat_completion(
        &self,
        request: Request<ChatCompletionRequest>,
    ) -> Result<Response<Self::ChatCompletionStream>, Status> {
        let (metadata, _, message) = request.into_parts();
        let body = message.body;
        let (config, chat, upstream) = match self.route_chat(&metadata, &body).await {
            Ok(routed) => routed,
            Err(status) => {
                let code = ErrorDetail::from_status(&status).code();
                crate::metrics::refused(code.http_status().as_u16());
                return Err(status);
            }
        };
        // The upstream call's span: the parent the upstream sees in `traceparent`. It
        // lasts until the answer is relayed whole.
        let span = tracing::info_span!(
            "upstream",
            otel.name = "POST chat completion",
            otel.kind = "client",
        );
        span.set_attribute("sandgate.model_entry", upstream.entry.clone());
        self.forward_chat(metadata.into_headers(), &config, chat, upstream)
            .instrument(span)
            .await
    }

    async fn list_spend_logs(
        &self,
        request: Request<ListSpendLogsRequest>,
    ) -> Result<Response<ListSpendLogsResponse>, Status> {
        self.authenticate(request.metadata())?;
        let limit = match request.get_ref().limit {
            0 => DEFAULT_SPEND_LOG_LIMIT,
            limit => limit as usize,
        };
        let entries = self
            .store
            .spend_log
            .spend_logs(limit.min(sandgate_runtime_api::store::models::SPEND_LOG_RETENTION))
            .await
            .map_err(ErrorDetail::from)?;
        Ok(Response::new(ListSpendLogsResponse {
            entries: entries.into_iter().map(proto_entry).collect(),
        }))
    }
}

impl ModelGatewayService {
    /// Who may call, what is asked, and where it goes: everything decided before the
    /// upstream is called.
    async fn route_chat<'a>(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        body: &'a [u8],
    ) -> Result<(Arc<GatewayConfig>, ChatRequest<'a>, Upstream), Status> {
        self.authenticate(metadata)?;
        let chat = ChatRequest::parse(body).map_err(|err| error(ErrorCode::BadRequest, err))?;
        let (config, entries, kept) = self.kept_entries().await?;
        let routed = match route(entries.iter(), &chat.model) {
            // Perhaps a model added a moment ago, by a replica whose notification has not
            // arrived yet: never refused on the strength of what was kept.
            Err(_) if kept => route(self.entries(&config).await?.iter(), &chat.model),
            routed => routed,
        };
        let upstream = routed.map_err(|err| match err {
            RouteError::UnknownModel(_) => error(ErrorCode::NotFound, err.to_string()),
            RouteError::BareNameOnWildcard(_) => error(ErrorCode::BadRequest, err.to_string()),
        })?;
        Ok((config, chat, upstream))
    }

    /// Calls the upstream, in the current (upstream) span, retrying what the retry policy
    /// allows, and relays the answer of the last attempt. Every retry happens before the
    /// first byte of an answer is relayed: the client sees one answer, never two.
    async fn forward_chat(
        &self,
        headers: HeaderMap,
        config: &GatewayConfig,
        chat: ChatRequest<'_>,
        upstream: Upstream,
    ) -> Result<Response<ChatStream>, Status> {
        let record = CallRecord {
            entry: SpendLogEntry {
                request_id: uuid::Uuid::new_v4().to_string(),
                started_at_ms: now_ms(),
                model: chat.model.clone(),
                upstream_model: upstream.model.clone(),
                user: chat.user.clone(),
                session_id: first_header(&headers, &SESSION_ID).map(str::to_owned),
                metadata: spend_metadata(&headers),
                ..SpendLogEntry::default()
            },
            model_entry: upstream.entry.clone(),
            started: Instant::now(),
        };
        // Encoded once: a retry sends the same bytes again without copying them.
        let body = Bytes::from(chat.upstream_body(&upstream.model));
        let mut attempt = 0;
        let response = loop {
            let outbound = self
                .outbound(&headers, config, &upstream)
                .body(body.clone());
            let Ok(sent) = tokio::time::timeout(self.read_timeout, outbound.send()).await else {
                // Never retried: a second wait as long would double the client's.
                tracing::warn!(model = %upstream.model, attempts = attempt + 1, "upstream did not answer in time");
                self.log_spend(record.finish(504, None)).await;
                return Err(error(
                    ErrorCode::GatewayTimeout,
                    "the upstream did not answer in time",
                ));
            };
            let retry = transient(&sent).and_then(|(reason, retry_after)| {
                Some((reason, self.retry.pause(attempt, retry_after)?))
            });
            let Some((reason, pause)) = retry else {
                match sent {
                    Ok(response) => break response,
                    Err(err) => {
                        let (code, status, message) = upstream_failure(&err);
                        // Without the URL: a base URL may carry credentials in its query.
                        tracing::warn!(model = %upstream.model, attempts = attempt + 1, error = %err.without_url(), "upstream call failed");
                        self.log_spend(record.finish(status, None)).await;
                        return Err(error(code, message));
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
            crate::metrics::retried(&upstream.entry, reason.label());
            tokio::time::sleep(pause).await;
        };
        Span::current().set_attribute("sandgate.upstream_attempts", i64::from(attempt) + 1);
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("application/json")
            .to_owned();
        let first = ChatCompletionResponse {
            status: u32::from(status),
            content_type: content_type.clone(),
            chunk: Bytes::new(),
        };
        if !(sandgate_proto::models::is_event_stream(&content_type) && status < 300) {
            // A whole answer is read here and answered at once: no relay task, no channel.
            let (messages, entry, failure) =
                whole_answer(response, first, &chat.model, record).await;
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
        let (sender, receiver) = mpsc::channel(STREAM_BUFFER);
        let asked = chat.model.clone();
        let gateway = self.clone();
        let relay = async move {
            let (entry, failure) = relay_stream(response, first, &asked, &sender, record).await;
            match failure {
                // A failure ends the answer at once: logged first, so that a client that
                // has its (failed) answer finds the entry.
                Some(failure) => {
                    gateway.log_spend(entry).await;
                    drop(sender.send(Err(failure)).await);
                }
                None => gateway.log_spend_soon(entry),
            }
        };
        tokio::spawn(relay.instrument(Span::current()));
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }

    /// One attempt's request, without its body: the header policy, the upstream's key and
    /// the trace context (each attempt is in the same upstream span).
    fn outbound(
        &self,
        headers: &HeaderMap,
        config: &GatewayConfig,
        upstream: &Upstream,
    ) -> reqwest::RequestBuilder {
        let mut outbound = self
            .client
            .post(&upstream.url)
            .header(http::header::CONTENT_TYPE, "application/json");
        for (name, value) in &outbound_headers(headers, config) {
            outbound = outbound.header(name, value);
        }
        if !upstream.api_key.is_empty() {
            outbound = outbound.bearer_auth(&upstream.api_key);
        }
        let mut trace_context = HeaderMap::new();
        sandgate_proto::trace::inject_headers(&Span::current(), &mut trace_context);
        outbound.headers(trace_context)
    }
}

type Sender = mpsc::Sender<Result<ChatCompletionResponse, Status>>;

/// How a relay ended: the call's spend log entry, and the failure that ends the answer,
/// when it failed (sent once the entry is logged).
type Relayed = (SpendLogEntry, Option<Status>);

/// A body that is not streamed: read whole, `model` renamed on success, answered in
/// messages of at most [`MESSAGE_CHUNK`] bytes (no body is too large for one gRPC message).
async fn whole_answer(
    response: reqwest::Response,
    mut first: ChatCompletionResponse,
    asked: &str,
    record: CallRecord,
) -> (Vec<ChatCompletionResponse>, SpendLogEntry, Option<Status>) {
    let status = response.status();
    match whole_body(response).await {
        Ok(body) => {
            let (mut rest, usage) = if status.is_success() {
                let (renamed, usage) = rename_model(&body, asked);
                (Bytes::from(renamed.into_owned()), usage)
            } else {
                (body, None)
            };
            first.chunk = rest.split_to(rest.len().min(MESSAGE_CHUNK));
            let mut messages = vec![first];
            while !rest.is_empty() {
                messages.push(ChatCompletionResponse {
                    chunk: rest.split_to(rest.len().min(MESSAGE_CHUNK)),
                    ..ChatCompletionResponse::default()
                });
            }
            (messages, record.finish(status.as_u16(), usage), None)
        }
        Err(err) => {
            let (code, status, message) = upstream_failure(&err);
            tracing::warn!(error = %err.without_url(), "upstream body failed");
            (
                Vec::new(),
                record.finish(status, None),
                Some(error(code, message)),
            )
        }
    }
}

/// An answer's whole body. One with a length is whole once that many bytes are in: its
/// end-of-stream would come only after the task hyper-util spawns to put the connection
/// back in the pool has run (a wake-up of another thread, on the call's path).
async fn whole_body(mut response: reqwest::Response) -> Result<Bytes, reqwest::Error> {
    let Some(length) = response.content_length() else {
        return response.bytes().await;
    };
    let Some(first) = response.chunk().await? else {
        return Ok(Bytes::new());
    };
    if first.len() as u64 >= length {
        return Ok(first);
    }
    // Reserved from what arrived, not from the announced length: an upstream's header
    // does not size an allocation.
    let mut body = BytesMut::from(first);
    while (body.len() as u64) < length {
        match response.chunk().await? {
            Some(chunk) => body.extend_from_slice(&chunk),
            None => break,
        }
    }
    Ok(body.freeze())
}

/// Server-sent events: passed on as they arrive, each event's `model` renamed.
async fn relay_stream(
    response: reqwest::Response,
    first: ChatCompletionResponse,
    asked: &str,
    sender: &Sender,
    record: CallRecord,
) -> Relayed {
    let status = response.status().as_u16();
    let mut renamer = SseRenamer::new(asked);
    if sender.send(Ok(first)).await.is_err() {
        return (record.finish(status, None), None);
    }
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        match chunk {
            Ok(chunk) => {
                let out = renamer.push(&chunk);
                if !out.is_empty() && sender.send(Ok(message(out))).await.is_err() {
                    // The client went away; the upstream call ends with it.
                    return (record.finish(499, renamer.usage), None);
                }
            }
            Err(err) => {
                let (code, failed, message) = upstream_failure(&err);
                tracing::warn!(error = %err.without_url(), "upstream stream failed");
                let failure = error(code, message);
                return (record.finish(failed, renamer.usage), Some(failure));
            }
        }
    }
    let rest = renamer.finish();
    if !rest.is_empty() {
        drop(sender.send(Ok(message(rest))).await);
    }
    (record.finish(status, renamer.usage), None)
}

fn message(chunk: Vec<u8>) -> ChatCompletionResponse {
    ChatCompletionResponse {
        status: 0,
        content_type: String::new(),
        chunk: chunk.into(),
    }
}

fn proto_entry(entry: SpendLogEntry) -> ProtoSpendLogEntry {
    ProtoSpendLogEntry {
        request_id: entry.request_id,
        started_at_ms: entry.started_at_ms,
        model: entry.model,
        upstream_model: entry.upstream_model,
        prompt_tokens: entry.prompt_tokens,
        completion_tokens: entry.completion_tokens,
        total_tokens: entry.total_tokens,
        latency_ms: entry.latency_ms,
        status: u32::from(entry.status),
        user: entry.user,
        session_id: entry.session_id,
        metadata_json: entry
            .metadata
            .map(|metadata| serde_json::to_vec(&metadata).unwrap_or_default().into())
            .unwrap_or_default(),
    }
}
