//! The ModelGateway gRPC service: who may do what (`auth`), the model list and its info, and calls
//! of every API routed to their upstream (`forward` does the forwarding; `openai` and
//! `messages` prepare each API's call), with a spend log entry per call.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::StreamExt;
use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sandgate_proto::models::v1::model_gateway_server::ModelGateway;
use sandgate_proto::models::v1::{
    AddModelRequest, AddModelResponse, Api, CallRequest, ChatCompletionRequest,
    ChatCompletionResponse, GatewayParams, GetModelInfoRequest, GetModelInfoResponse,
    GetModelRequest, GetModelResponse, ListModelsRequest, ListModelsResponse, ListSpendLogsRequest,
    ListSpendLogsResponse, ManageKeysRequest, ManageKeysResponse, Model, ModelInfo,
    SpendLogEntry as ProtoSpendLogEntry,
};
use sandgate_proto::models::{CallStream, ChatCompletionStream};
use sandgate_store::models::SpendLogRetention;
use sandgate_store::{KeySpend, SpendLogEntry, Store, StoredModel};
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tonic::{Request, Response, Status};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::auth::{Charge, KeyCache, check_budget};
use crate::budget::Prices;
use crate::config::{ConfigFile, GatewayConfig, ModelEntry};
use crate::egress::{AllowedHosts, GuardedResolver, HOP_HEADER, looped};
use crate::forward::{AnswerEdit, Finished, Prepared};
use crate::keys::{Caller, model_refused};
use crate::registry::{OPENAI_MODELS, REGISTRY_CREATED};
use crate::retry::RetryPolicy;
use crate::rewrite::ChatRequest;
use crate::routing::{Kind, RouteError, Upstream, WILDCARD, route};
use crate::{messages, openai};

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
    /// Hosts models added at runtime may reach whatever their addresses (see `egress`).
    pub allowed_upstream_hosts: Vec<String>,
    /// The limits on an upstream's answer.
    pub limits: AnswerLimits,
    /// How much of the spend log is kept.
    pub spend_log: SpendLogRetention,
}

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
    pub(crate) config: ConfigFile,
    /// sha256 of the master key: compared in constant time, whatever the lengths.
    pub(crate) master_key: Option<[u8; 32]>,
    pub(crate) store: Store,
    /// Pooled: connections to an upstream are reused across calls.
    pub(crate) client: reqwest::Client,
    /// The client of models added at runtime: its resolver keeps them outside.
    pub(crate) guarded_client: reqwest::Client,
    pub(crate) allowed_hosts: AllowedHosts,
    /// This gateway's id in the hop header of the calls it sends (see `egress`).
    pub(crate) hop_id: String,
    pub(crate) limits: AnswerLimits,
    spend_log_retention: SpendLogRetention,
    /// How long an upstream may stay silent, unless its entry says.
    pub(crate) read_timeout: Duration,
    /// Retries, unless an entry says.
    pub(crate) retry: RetryPolicy,
    /// Spend log entries waiting to be written.
    spend_queue: Mutex<SpendQueue>,
    /// Held while the spend log queue is written out.
    spend_writer: tokio::sync::Mutex<()>,
    /// The store's generation of added models (see `ModelStore::model_changes`).
    pub(crate) model_changes: watch::Receiver<Option<u64>>,
    /// The store's generation of virtual keys and their spend (`KeyStore::key_changes`).
    pub(crate) key_changes: watch::Receiver<Option<u64>>,
    /// What the last calls of each virtual key read, until that generation moves.
    pub(crate) keys: KeyCache,
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
    /// What the virtual keys' calls add to their spend, written with the entries.
    key_spend: Vec<KeySpend>,
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

/// The spend of many calls as one item per key, window and session: under load a batch
/// holds hundreds of calls of a few keys, and the store then writes a few counters, not
/// hundreds.
fn summed(spend: Vec<KeySpend>) -> Vec<KeySpend> {
    let mut sums: std::collections::HashMap<(String, u64, Option<String>), f64> =
        std::collections::HashMap::with_capacity(spend.len());
    for item in spend {
        *sums
            .entry((item.token, item.window, item.session))
            .or_default() += item.amount;
    }
    sums.into_iter()
        .map(|((token, window, session), amount)| KeySpend {
            token,
            window,
            amount,
            session,
        })
        .collect()
}

/// An added model as an entry: its prices were checked when it was added.
fn added_entry(model: StoredModel) -> ModelEntry {
    let prices = Prices::from_model_info(model.model_info.as_ref()).unwrap_or_default();
    let params = crate::config::CallParams {
        takes_reasoning: crate::config::takes_reasoning(model.model_info.as_ref()),
        ..crate::config::CallParams::default()
    };
    ModelEntry {
        params,
        model_name: model.model_name,
        model: model.model,
        api_base: model.api_base,
        api_key: model.api_key,
        model_info: model.model_info,
        prices,
        added: true,
        ..ModelEntry::default()
    }
}

pub(crate) fn error(code: ErrorCode, message: impl Into<String>) -> Status {
    ErrorDetail::new(code, message).into_status()
}

pub(crate) fn now_ms() -> i64 {
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
        let builder = || {
            reqwest::Client::builder()
                .connect_timeout(options.connect_timeout)
                .read_timeout(options.read_timeout)
                .redirect(reqwest::redirect::Policy::none())
        };
        let client = builder()
            .build()
            .map_err(|err| format!("cannot build the HTTP client: {err}"))?;
        let allowed_hosts = AllowedHosts::new(options.allowed_upstream_hosts);
        let guarded_client = builder()
            .dns_resolver(Arc::new(GuardedResolver {
                allowed: allowed_hosts.clone(),
            }))
            .build()
            .map_err(|err| format!("cannot build the HTTP client: {err}"))?;
        Ok(Self {
            guarded_client,
            allowed_hosts,
            hop_id: hex::encode(rand::random::<[u8; 8]>()),
            limits: options.limits,
            spend_log_retention: options.spend_log,
            config: options.config,
            master_key: options
                .master_key
                .filter(|key| !key.is_empty())
                .map(|key| Sha256::digest(key.as_bytes()).into()),
            model_changes: store.models.model_changes(),
            key_changes: store.keys.key_changes(),
            keys: KeyCache::default(),
            store,
            client,
            read_timeout: options.read_timeout,
            retry: RetryPolicy {
                retries: options.retries,
                statuses: true,
            },
            spend_queue: Mutex::default(),
            spend_writer: tokio::sync::Mutex::default(),
            kept: Mutex::default(),
        })
    }

    /// The entry added under `name`, if one is: one lookup.
    async fn added_entry(
        &self,
        config: &GatewayConfig,
        name: &str,
    ) -> Result<Option<ModelEntry>, Status> {
        let added = self
            .store
            .models
            .added_model(&config.scope, name)
            .await
            .map_err(ErrorDetail::from)?;
        Ok(added.map(added_entry))
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
        entries.extend(added.into_iter().map(added_entry));
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

    /// The model list as `caller` sees it: only the models a virtual key may call.
    async fn models(&self, caller: &Caller) -> Result<Vec<Model>, Status> {
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
            .filter(|id| caller.may_call(id))
            .map(|id| Model {
                id: id.to_owned(),
                created: REGISTRY_CREATED,
                owned_by: "openai".to_owned(),
            })
            .collect())
    }

    /// Queues `entry` for the spend log; `true` when it is the first to wait for a delayed
    /// write (and `schedule` asks for one), so that its caller schedules it.
    fn enqueue_spend(
        &self,
        entry: SpendLogEntry,
        charge: Option<KeySpend>,
        schedule: bool,
    ) -> bool {
        let Ok(mut pending) = self.spend_queue.lock() else {
            return false;
        };
        // A key's spend is queued whatever the log's length: it is what its budget holds to.
        pending.key_spend.extend(charge);
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
    pub(crate) async fn log_spend(&self, (entry, charge): Finished) {
        self.enqueue_spend(entry, charge, false);
        self.write_spend_queue(false).await;
    }

    /// Writes what is queued, in batches, until the queue is empty. One write at a time:
    /// a caller that waited finds its entry written, or writes it. `delayed`: the
    /// scheduled write, which is over once it finds the queue empty.
    async fn write_spend_queue(&self, delayed: bool) {
        let _writing = self.spend_writer.lock().await;
        loop {
            let (batch, key_spend) = match self.spend_queue.lock() {
                Ok(mut pending) if !pending.entries.is_empty() || !pending.key_spend.is_empty() => {
                    (
                        std::mem::take(&mut pending.entries),
                        std::mem::take(&mut pending.key_spend),
                    )
                }
                Ok(mut pending) => {
                    pending.scheduled &= !delayed;
                    return;
                }
                Err(_) => return,
            };
            let calls = key_spend.len();
            let key_spend = summed(key_spend);
            if !key_spend.is_empty()
                && let Err(err) = self.store.keys.add_key_spend(&key_spend).await
            {
                tracing::warn!(error = %err, calls, "virtual keys' spend lost");
            }
            if !batch.is_empty()
                && let Err(err) = self
                    .store
                    .spend_log
                    .append_spend_logs(&batch, self.spend_log_retention)
                    .await
            {
                tracing::warn!(error = %err, entries = batch.len(), "spend log entries lost");
            }
        }
    }
}

impl ModelGatewayService {
    /// Queues `entry` to be written within [`SPEND_LOG_DELAY`], with the entries of the calls
    /// that end meanwhile: one store round trip for many calls, and none on a call's path.
    pub(crate) fn log_spend_soon(&self, (entry, charge): Finished) {
        if self.enqueue_spend(entry, charge, true) {
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

#[tonic::async_trait]
impl ModelGateway for ModelGatewayService {
    async fn list_models(
        &self,
        request: Request<ListModelsRequest>,
    ) -> Result<Response<ListModelsResponse>, Status> {
        let caller = self.authenticate(request.metadata()).await?;
        Ok(Response::new(ListModelsResponse {
            models: self.models(&caller).await?,
        }))
    }

    async fn get_model(
        &self,
        request: Request<GetModelRequest>,
    ) -> Result<Response<GetModelResponse>, Status> {
        let caller = self.authenticate(request.metadata()).await?;
        let id = &request.get_ref().id;
        let model = self
            .models(&caller)
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
        self.authenticate(request.metadata())
            .await?
            .master_only("add models")
            .map_err(ErrorDetail::into_status)?;
        let stored = self.addition(request.into_inner())?;
        let config = self.config.current();
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

    type CallStream = CallStream;

    async fn call(&self, request: Request<CallRequest>) -> Result<Response<CallStream>, Status> {
        let (metadata, _, message) = request.into_parts();
        let mut seen = crate::access::Seen {
            started: Some(std::time::Instant::now()),
            bytes_in: message.body.len(),
            ..crate::access::Seen::default()
        };
        let (config, call, upstream, charge) =
            match self.route_call(&metadata, message, &mut seen).await {
                Ok(routed) => routed,
                Err(status) => {
                    self.refused(&metadata, seen, &status).await;
                    return Err(status);
                }
            };
        // The upstream call's span: the parent the upstream sees in `traceparent`. It
        // lasts until the answer is relayed whole.
        let span = tracing::info_span!(
            "upstream",
            otel.name = span_name(call.api),
            otel.kind = "client",
        );
        span.set_attribute("sandgate.model_entry", upstream.entry.clone());
        self.forward(metadata.into_headers(), &config, call, upstream, charge)
            .instrument(span)
            .await
    }

    type ChatCompletionStream = ChatCompletionStream;

    async fn chat_completion(
        &self,
        request: Request<ChatCompletionRequest>,
    ) -> Result<Response<ChatCompletionStream>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let call = CallRequest {
            api: Api::ChatCompletions.into(),
            body: message.body,
        };
        let answer = self
            .call(Request::from_parts(metadata, extensions, call))
            .await?
            .into_inner();
        Ok(Response::new(Box::pin(answer.map(|message| {
            message.map(|message| ChatCompletionResponse {
                status: message.status,
                content_type: message.content_type,
                chunk: message.chunk,
            })
        }))))
    }

    async fn get_model_info(
        &self,
        request: Request<GetModelInfoRequest>,
    ) -> Result<Response<GetModelInfoResponse>, Status> {
        let caller = self.authenticate(request.metadata()).await?;
        let wanted = &request.get_ref().model_name;
        let entries = self.entries(&self.config.current()).await?;
        let models = entries
            .iter()
            .filter(|entry| wanted.is_empty() || entry.model_name == *wanted)
            .filter(|entry| caller.may_call(&entry.model_name))
            .map(|entry| ModelInfo {
                model_name: entry.model_name.clone(),
                model: entry.model.clone(),
                api_base: entry.api_base.clone(),
                model_info_json: entry
                    .model_info
                    .as_ref()
                    .and_then(|info| serde_json::to_vec(info).ok())
                    .map(Bytes::from)
                    .unwrap_or_default(),
            })
            .collect();
        Ok(Response::new(GetModelInfoResponse { models }))
    }

    async fn list_spend_logs(
        &self,
        request: Request<ListSpendLogsRequest>,
    ) -> Result<Response<ListSpendLogsResponse>, Status> {
        self.authenticate(request.metadata())
            .await?
            .master_only("list the spend log across keys (a key's own spend is at /key/info)")
            .map_err(ErrorDetail::into_status)?;
        let limit = match request.get_ref().limit {
            0 => DEFAULT_SPEND_LOG_LIMIT,
            limit => limit as usize,
        };
        let entries = self
            .store
            .spend_log
            .spend_logs(limit.min(sandgate_store::models::SPEND_LOG_RETENTION))
            .await
            .map_err(ErrorDetail::from)?;
        Ok(Response::new(ListSpendLogsResponse {
            entries: entries.into_iter().map(proto_entry).collect(),
        }))
    }

    async fn manage_keys(
        &self,
        request: Request<ManageKeysRequest>,
    ) -> Result<Response<ManageKeysResponse>, Status> {
        let caller = self.authenticate(request.metadata()).await?;
        let body = crate::manage::manage(self, &caller, request.into_inner())
            .await
            .map_err(ErrorDetail::into_status)?;
        Ok(Response::new(ManageKeysResponse { body }))
    }
}

/// The upstream span's name for a call of `api`.
fn span_name(api: Api) -> &'static str {
    match api {
        // Refused before a span is made.
        Api::ChatCompletions | Api::Unspecified => "POST chat completion",
        Api::Responses => "POST responses",
        Api::Messages => "POST messages",
        Api::MessagesCountTokens => "POST messages count_tokens",
        Api::Embeddings => "POST embeddings",
        Api::Completions => "POST completions",
    }
}

impl ModelGatewayService {
    /// Who may call, what is asked, and where it goes: everything decided before the
    /// upstream is called.
    async fn route_call(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        message: CallRequest,
        seen: &mut crate::access::Seen,
    ) -> Result<(Arc<GatewayConfig>, Prepared, Upstream, Option<Charge>), Status> {
        // Before anything else: a call that came back is refused whatever key it holds.
        if looped(metadata, &self.hop_id) {
            return Err(error(
                ErrorCode::BadGateway,
                format!(
                    "the call came back to the gateway that sent it ({HOP_HEADER}): a model entry points at the gateway itself"
                ),
            ));
        }
        let caller = self.authenticate(metadata).await?;
        seen.authenticated = true;
        seen.key = caller
            .key()
            .map(|key| (key.token.clone(), key.key_alias.clone()));
        let api = Api::try_from(message.api)
            .ok()
            .filter(|api| *api != Api::Unspecified)
            .ok_or_else(|| {
                error(
                    ErrorCode::BadRequest,
                    format!("`api` {} is not an API of this gateway", message.api),
                )
            })?;
        let body = message.body;
        seen.api = Some(api);
        let request = ChatRequest::parse(&body).map_err(|err| error(ErrorCode::BadRequest, err))?;
        seen.asked = Some(request.model.clone());
        if !caller.may_call(&request.model) {
            return Err(model_refused(&request.model).into_status());
        }
        let (config, entries, kept) = self.kept_entries().await?;
        let routed = match route(entries.iter(), &request.model) {
            // Perhaps a model added a moment ago, by a replica whose notification has not
            // arrived yet: never refused on the strength of what was kept. That one name
            // is looked up, not every added entry read again.
            Err(_) if kept => match self.added_entry(&config, &request.model).await? {
                Some(added) => route(
                    std::iter::once(&added).chain(entries.iter()),
                    &request.model,
                ),
                None => route(entries.iter(), &request.model),
            },
            routed => routed,
        };
        let upstream = routed.map_err(|err| match err {
            RouteError::UnknownModel(_) => error(ErrorCode::NotFound, err.to_string()),
            RouteError::BareNameOnWildcard(_) => error(ErrorCode::BadRequest, err.to_string()),
        })?;
        seen.entry = Some((
            crate::forward::metric_label(&upstream),
            upstream.model.clone(),
        ));
        // After routing, so that a refusal over budget is labelled with its entry.
        let charge = match &caller {
            Caller::Virtual {
                key,
                counters,
                session,
            } => Some(check_budget(key, counters, session.as_deref())?),
            Caller::Master => None,
        };
        let anthropic = matches!(api, Api::Messages | Api::MessagesCountTokens);
        let call = if anthropic && upstream.kind == Kind::OpenAi && !upstream.params.native_messages
        {
            // An OpenAI-compatible upstream has no Messages API: a chat completion in its
            // place.
            let count_tokens = api == Api::MessagesCountTokens;
            let translated = messages::chat_request_for(
                &body,
                &upstream.model,
                count_tokens,
                upstream.params.takes_reasoning,
            )
            .map_err(|err| error(ErrorCode::BadRequest, err))?;
            Prepared {
                api,
                path: openai::path(Api::ChatCompletions),
                body: vec![Bytes::from(translated.body)],
                asked: request.model.clone(),
                user: translated.user,
                answer: if count_tokens {
                    AnswerEdit::CountTokens
                } else {
                    AnswerEdit::Message
                },
            }
        } else if api == Api::Responses
            && upstream.kind == Kind::OpenAi
            && upstream.params.responses_via_chat
        {
            // An upstream that serves chat completions only: the Responses API bridged.
            let translated = crate::responses::chat_request(
                &body,
                &upstream.model,
                upstream.params.takes_reasoning,
            )
            .map_err(|err| error(ErrorCode::BadRequest, err))?;
            Prepared {
                api,
                path: openai::path(Api::ChatCompletions),
                body: vec![Bytes::from(translated.body)],
                asked: request.model.clone(),
                user: translated.user,
                answer: AnswerEdit::Response,
            }
        } else {
            let mut call = openai::prepare(api, &body, &request, &upstream.model);
            if anthropic {
                call.user = messages::user(&body);
            }
            call
        };
        Ok((config, call, upstream, charge))
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
        call_type: entry.call_type.unwrap_or_default(),
        spend: entry.spend,
        api_key_hash: entry.api_key.unwrap_or_default(),
        key_alias: entry.key_alias.unwrap_or_default(),
        metadata_json: entry
            .metadata
            .map(|metadata| serde_json::to_vec(&metadata).unwrap_or_default().into())
            .unwrap_or_default(),
    }
}
