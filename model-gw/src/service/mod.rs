//! The ModelGateway gRPC service: who may do what (`auth`), the model list and its info,
//! key management, and calls of every API: authenticated, routed to their upstream and
//! prepared by their API (`prepare`), then handed to the forwarding core (`forward`), with
//! a spend log entry per call, refused ones included.

mod entries;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sandgate_proto::models::v1::model_gateway_server::ModelGateway;
use sandgate_proto::models::v1::{
    AddModelRequest, AddModelResponse, Api, CallRequest, ChatCompletionRequest,
    ChatCompletionResponse, GatewayParams, GetModelInfoRequest, GetModelInfoResponse,
    GetModelRequest, GetModelResponse, ListModelsRequest, ListModelsResponse, ListSpendLogsRequest,
    ListSpendLogsResponse, ManageKeysRequest, ManageKeysResponse, ManageOrgsRequest,
    ManageOrgsResponse, Model, ModelInfo, SpendLogEntry as ProtoSpendLogEntry,
};
use sandgate_proto::models::{CallStream, ChatCompletionStream};
use sandgate_proto::trace::set_attributes;
use sandgate_store::models::SpendLogRetention;
use sandgate_store::{SpendLogEntry, Store};
use tonic::{Request, Response, Status};
use tracing::Instrument;

use self::entries::{Entries, model_list};
use crate::access::refused;
use crate::added::{addition, check_room};
use crate::admit::{CallScopes, Charge, admit, largest_cost};
use crate::auth::{Authenticator, check_budget};
use crate::call::Prepared;
use crate::config::{ConfigFile, GatewayConfig};
use crate::egress::{HOP_HEADER, looped};
use crate::forward::{AnswerLimits, Forwarder, ForwarderOptions};
use crate::keys::{Caller, model_refused};
use crate::loops::{Held, InFlight};
use crate::metrics::metric_label;
use crate::org_budget::OrgRecords;
use crate::prepare::{prepared, read};
use crate::routing::{RouteError, Upstream, route};
use crate::session::Sessions;
use crate::spend::SpendLog;
use crate::support::error;

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
    /// `RUNTIME_IDLE_SECONDS`: a call carrying a sandbox's session marks it active, so
    /// that idle pause leaves it running; zero, idle pause is off and nothing is marked.
    pub idle_after: Duration,
    /// `GATEWAY_MAX_ADDED_MODELS`: models `/model/new` may add, at most.
    pub max_added_models: usize,
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
    store: Store,
    auth: Authenticator,
    /// The team and user records keys' calls read, kept until one changes.
    org_records: OrgRecords,
    entries: Entries,
    /// The forwarding core: every call that passed routing goes upstream through it.
    forwarder: Forwarder,
    /// Whose session a call names (see `session`).
    sessions: Sessions,
    spend: Arc<SpendLog>,
    max_added_models: usize,
    /// Calls in flight, per entry and per prompt (see `loops`).
    in_flight: Arc<InFlight>,
    /// The longest a call may last (`--gateway-call-deadline`): what bounds a hold's lease.
    call_deadline: Duration,
}

/// Spend log entries listed when the caller names no limit.
pub const DEFAULT_SPEND_LOG_LIMIT: usize = 100;

impl ModelGatewayService {
    pub fn new(store: Store, options: GatewayOptions) -> Result<Self, String> {
        let spend = Arc::new(SpendLog::new(store.clone(), options.spend_log));
        let call_deadline = options.limits.call_deadline;
        let forwarder = Forwarder::new(
            ForwarderOptions {
                connect_timeout: options.connect_timeout,
                read_timeout: options.read_timeout,
                retries: options.retries,
                allowed_upstream_hosts: options.allowed_upstream_hosts,
                limits: options.limits,
                activity: sandgate_store::Activity::new(&store, options.idle_after),
            },
            spend.clone(),
        )?;
        Ok(Self(Arc::new(Gateway {
            config: options.config,
            auth: Authenticator::new(store.clone(), options.master_key),
            org_records: OrgRecords::new(store.clone()),
            entries: Entries::new(store.clone()),
            sessions: Sessions::new(store.clone()),
            store,
            forwarder,
            spend,
            max_added_models: options.max_added_models,
            in_flight: Arc::default(),
            call_deadline,
        })))
    }

    /// Writes the spend log entries still queued: called once the server has stopped, so
    /// that a stop loses none.
    pub async fn flush_spend_log(&self) {
        self.spend.flush().await;
    }
}

impl Gateway {
    /// The model list as `caller` sees it: only the models a virtual key may call.
    async fn models(&self, caller: &Caller) -> Result<Vec<Model>, Status> {
        let entries = self.entries.read(&self.config.current()).await?;
        Ok(model_list(&entries, caller))
    }
}

#[tonic::async_trait]
impl ModelGateway for ModelGatewayService {
    async fn list_models(
        &self,
        request: Request<ListModelsRequest>,
    ) -> Result<Response<ListModelsResponse>, Status> {
        let caller = self.auth.authenticate(request.metadata()).await?;
        Ok(Response::new(ListModelsResponse {
            models: self.models(&caller).await?,
        }))
    }

    async fn get_model(
        &self,
        request: Request<GetModelRequest>,
    ) -> Result<Response<GetModelResponse>, Status> {
        let caller = self.auth.authenticate(request.metadata()).await?;
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
        let caller = self.auth.authenticate(request.metadata()).await?;
        caller
            .master_only("add models")
            .map_err(ErrorDetail::into_status)?;
        let source = sandgate_proto::client_address(&request);
        let stored = addition(
            request.into_inner(),
            self.forwarder.allowed_hosts(),
            &self.config.current(),
        )?;
        let config = self.config.current();
        check_room(
            &self.store,
            &config.scope,
            &stored.model_name,
            self.max_added_models,
        )
        .await?;
        self.store
            .models
            .add_model(&config.scope, &stored)
            .await
            .map_err(ErrorDetail::from)?;
        tracing::info!(model_name = %stored.model_name, model = %stored.model, "model added");
        crate::audit::record(
            &self.store,
            crate::audit::model_added(&caller, source, &stored),
        )
        .await;
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
        let remote = request.remote_addr();
        let (mut metadata, _, message) = request.into_parts();
        let mut seen = crate::access::Seen {
            started: Some(std::time::Instant::now()),
            bytes_in: message.body.len(),
            ..crate::access::Seen::default()
        };
        let (config, call, upstream, charge, held) = match self
            .route_call((&mut metadata, remote), message, &mut seen)
            .await
        {
            Ok(routed) => routed,
            Err(status) => {
                refused(&self.spend, &metadata, seen, &status);
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
        set_attributes(&span, || {
            [("sandgate.model_entry", upstream.entry.clone().into())]
        });
        self.forwarder
            .forward(metadata.into_headers(), &config, call, upstream, charge)
            .instrument(span)
            .await
            .map(|stream| Response::new(crate::loops::holding(stream, held)))
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
        let caller = self.auth.authenticate(request.metadata()).await?;
        let wanted = &request.get_ref().model_name;
        let entries = self.entries.read(&self.config.current()).await?;
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
        self.auth
            .authenticate(request.metadata())
            .await?
            .master_only("list the spend log across keys (a key's own spend is at /key/info)")
            .map_err(ErrorDetail::into_status)?;
        let limit = match request.get_ref().limit {
            0 => DEFAULT_SPEND_LOG_LIMIT,
            limit => limit as usize,
        }
        .min(sandgate_store::models::SPEND_LOG_RETENTION);
        let filter =
            crate::orgs::ListFilter::of(request.get_ref()).map_err(ErrorDetail::into_status)?;
        // A filter reads the whole log kept (bounded by its retention), newest first.
        let read = if filter.any() {
            sandgate_store::models::SPEND_LOG_RETENTION
        } else {
            limit
        };
        let entries = self
            .store
            .spend_log
            .spend_logs(read)
            .await
            .map_err(ErrorDetail::from)?;
        Ok(Response::new(ListSpendLogsResponse {
            entries: entries
                .into_iter()
                .filter(|entry| crate::orgs::listed(&filter, entry))
                .take(limit)
                .map(proto_entry)
                .collect(),
        }))
    }

    async fn manage_keys(
        &self,
        request: Request<ManageKeysRequest>,
    ) -> Result<Response<ManageKeysResponse>, Status> {
        let caller = self.auth.authenticate(request.metadata()).await?;
        self.settled().await;
        let source = sandgate_proto::client_address(&request);
        let request = request.into_inner();
        let audited = crate::audit::key_action(request.operation())
            .map(|action| (action, request.body.clone()));
        // Only the master may generate: anyone else learns nothing of the master key here.
        if matches!(caller, crate::keys::Caller::Master)
            && crate::manage::chosen_key(&request).is_some_and(|key| self.auth.is_master(&key))
        {
            return Err(crate::manage::key_exists().into_status());
        }
        let body = crate::manage::manage(&self.store, &caller, request)
            .await
            .map_err(ErrorDetail::into_status)?;
        if let Some((action, asked)) = audited {
            // A change: the shares of budgets granted before it are given back.
            self.spend.give_back_shares();
            let entry = crate::audit::entry(&caller, source, action, &asked, &body);
            crate::audit::record(&self.store, entry).await;
        }
        Ok(Response::new(ManageKeysResponse { body }))
    }

    async fn manage_orgs(
        &self,
        request: Request<ManageOrgsRequest>,
    ) -> Result<Response<ManageOrgsResponse>, Status> {
        let caller = self.auth.authenticate(request.metadata()).await?;
        self.settled().await;
        let source = sandgate_proto::client_address(&request);
        let request = request.into_inner();
        let audited = crate::audit::org_action(request.operation())
            .map(|action| (action, request.body.clone()));
        let body = crate::orgs::manage(&self.store, &caller, request)
            .await
            .map_err(ErrorDetail::into_status)?;
        if let Some((action, asked)) = audited {
            // A change: the shares of budgets granted before it are given back.
            self.spend.give_back_shares();
            let entry = crate::audit::entry(&caller, source, action, &asked, &body);
            crate::audit::record(&self.store, entry).await;
        }
        Ok(Response::new(ManageOrgsResponse { body }))
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
    /// Waits (at most [`crate::settling::CATCH_UP_AT_MOST`]) for the settlements of the
    /// calls this replica has answered: a management call reads spend (`/key/info`,
    /// `/user/info`, `/team/info`) and sets it (`/user/update` with `spend`), and must see
    /// its replica's answered calls counted, and not have a spend it sets moved by an
    /// earlier call's settlement landing after it.
    async fn settled(&self) {
        self.spend
            .settling()
            .caught_up(crate::settling::CATCH_UP_AT_MOST)
            .await;
        // Those of calls admitted against shares go with the spend log's batch.
        self.spend.write_settles_now().await;
    }

    /// Who may call, what is asked, and where it goes: everything decided before the
    /// upstream is called.
    async fn route_call(
        &self,
        (metadata, remote): (
            &mut tonic::metadata::MetadataMap,
            Option<std::net::SocketAddr>,
        ),
        message: CallRequest,
        seen: &mut crate::access::Seen,
    ) -> Result<(Arc<GatewayConfig>, Prepared, Upstream, Option<Charge>, Held), Status> {
        // Before anything else: a call that came back is refused whatever key it holds.
        if looped(metadata, self.forwarder.hop_id()) {
            return Err(error(
                ErrorCode::BadGateway,
                format!(
                    "the call came back to the gateway that sent it ({HOP_HEADER}): a model entry points at the gateway itself"
                ),
            ));
        }
        // Before the key is read: a sandbox's call has its sandbox's session, which the
        // key's per-session spend is read for.
        let sandbox = self.sessions.origin(metadata, remote).await?;
        let metadata = &*metadata;
        let caller = self.auth.authenticate(metadata).await?;
        seen.authenticated = true;
        seen.key = caller
            .key()
            .map(|key| (key.token.clone(), key.key_alias.clone()));
        self.sessions
            .check(metadata, sandbox.as_deref(), &caller)
            .await
            .inspect_err(|_| seen.session_refused = true)?;
        let api = Api::try_from(message.api)
            .ok()
            .filter(|api| *api != Api::Unspecified)
            .ok_or_else(|| {
                error(
                    ErrorCode::BadRequest,
                    format!("`api` {} is not an API of this gateway", message.api),
                )
            })?;
        seen.api = Some(api);
        let parsed = read(message.body).await?;
        let request = parsed.borrow_dependent();
        seen.asked = Some(request.model.clone());
        if !caller.may_call(&request.model) {
            return Err(model_refused(&request.model).into_status());
        }
        let (config, entries, kept) = self.entries.kept(&self.config).await?;
        let routed = match route(entries.iter(), &request.model) {
            // Perhaps a model added a moment ago, by a replica whose notification has not
            // arrived yet: never refused on the strength of what was kept. That one name
            // is looked up, not every added entry read again.
            Err(_) if kept => match self.entries.added(&config, &request.model).await? {
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
        seen.entry = Some((metric_label(&upstream), upstream.model.clone()));
        let (parsed, upstream, call) = prepared(api, parsed, upstream).await?;
        let (body, request) = (parsed.borrow_owner(), parsed.borrow_dependent());
        let who = caller.key().map_or("master", |key| key.token.as_str());
        let held = self.in_flight.enter(request, &upstream, who)?;
        // Last, once nothing else can refuse the call: an admitted call holds part of its
        // budgets until it settles. After routing, so that a refusal over budget is
        // labelled with its entry.
        let charge = match &caller {
            Caller::Virtual {
                key,
                counters,
                session,
            } => {
                check_budget(key, counters, session.as_deref())?;
                let orgs = crate::org_budget::org_scopes(&self.org_records, key).await?;
                let scopes = CallScopes::of_key(key, session.as_deref(), crate::support::now_ms())
                    .with(orgs);
                let bytes = call
                    .body
                    .iter()
                    .map(Bytes::len)
                    .sum::<usize>()
                    .max(body.len());
                let amount = largest_cost(api, request, bytes, &upstream.prices);
                Some(
                    admit(
                        &self.store,
                        &self.spend,
                        key,
                        scopes,
                        amount,
                        self.call_deadline,
                    )
                    .await?,
                )
            }
            Caller::Master => None,
        };
        Ok((config, call, upstream, charge, held))
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
        key_user_id: entry.key_user_id.unwrap_or_default(),
        team_id: entry.team_id.unwrap_or_default(),
        metadata_json: entry
            .metadata
            .map(|metadata| serde_json::to_vec(&metadata).unwrap_or_default().into())
            .unwrap_or_default(),
    }
}
