//! The Sandboxes gRPC service: the lifecycle API the platform's app server calls, with the
//! runtime API key (`x-api-key`).

use std::collections::HashMap;
use std::sync::Arc;

use sandgate_proto::error::ErrorDetail;
use sandgate_proto::sandboxes::v1::sandboxes_server::Sandboxes as SandboxesApi;
use sandgate_proto::sandboxes::v1::{
    self as pb, BatchGetSessionsRequest, BatchGetSessionsResponse, GetSessionRequest,
    GetSessionResponse, ListPoolsRequest, ListPoolsResponse, ListSandboxesRequest,
    ListSandboxesResponse, PauseRequest, PauseResponse, ResumeRequest, ResumeResponse,
    StartRequest, StartResponse, StopRequest, StopResponse,
};
use tonic::{Request, Response, Status};

use super::spec::pool_spec;
use super::{SandboxError, SandboxView, Sandboxes, pool_status};
use crate::admin::configs;
use crate::ambient::random_hex;
use crate::auth::{Authenticator, Operator};
use crate::validation;
use sandgate_conversation::ValidationError;
use sandgate_store::{AuditEntry, Launch, SandboxSpec, SandboxState, StoredWarmConfig, Timeline};

/// Session ids and runtime ids longer than this are refused unread.
const MAX_ID_LEN: usize = 128;
/// Ids asked for in one batch, at most.
const MAX_BATCH: usize = 1000;
/// The `resource_factor`s a start may ask for: the agent server does not run on less than
/// half a sandbox's resources (500m CPU, 1Gi of memory), and no node has 16 times more to
/// give one sandbox. The app server asks for 1, 2, 4 or 8.
const MIN_RESOURCE_FACTOR: f64 = 0.5;
const MAX_RESOURCE_FACTOR: f64 = 16.0;

pub struct SandboxesService {
    sandboxes: Arc<Sandboxes>,
    auth: Arc<Authenticator>,
}

impl SandboxesService {
    pub fn new(sandboxes: Arc<Sandboxes>, auth: Arc<Authenticator>) -> Self {
        Self { sandboxes, auth }
    }

    /// A sandbox as answered; `full`: with its session key and environment's values.
    fn proto(&self, view: SandboxView, full: bool) -> pb::Sandbox {
        let record = view.record;
        let mut spec = record.spec;
        if !full {
            spec.environment.clear();
        }
        pb::Sandbox {
            runtime_id: record.runtime_id,
            session_id: record.session_id.unwrap_or_default(),
            url: view.url,
            status: status(record.state).into(),
            status_detail: record.status_detail.unwrap_or_default(),
            spec: Some(pb::SandboxSpec {
                image: spec.image,
                command: spec.command,
                working_dir: spec.working_dir,
                environment: spec.environment.into_iter().collect(),
                run_as_user: spec.run_as_user,
                run_as_group: spec.run_as_group,
                fs_group: spec.fs_group,
                fuse_s3_mount: spec.fuse_s3_mount,
                resource_factor: spec.resource_factor,
            }),
            pool: record.pool.unwrap_or_default(),
            created_at_ms: record.created_at_ms,
            restart_count: record.restarts.count,
            restart_reasons: record.restarts.reasons,
            timeline: record.timeline.map(timeline),
            session_api_key: if full {
                view.session_api_key
            } else {
                String::new()
            },
        }
    }

    /// A runtime API key may drive every sandbox: it gets the current session key,
    /// derived anew, never read from the store. The admin (the console, in a browser) gets
    /// neither that key nor the start's environment: what it reads is shown on a page.
    fn answer(&self, record: sandgate_store::StoredSandbox, operator: Operator) -> pb::Sandbox {
        self.proto(
            self.sandboxes.view(record),
            operator == Operator::RuntimeKey,
        )
    }

    /// An admin's pause or stop, in the audit log (a runtime API key's are the
    /// platform's own calls, not an operator's).
    async fn audit<T>(&self, operator: Operator, action: &str, request: &Request<T>, id: &str) {
        if operator != Operator::Admin {
            return;
        }
        let entry = AuditEntry {
            at_ms: self.sandboxes.now_ms(),
            actor: "admin".to_owned(),
            source: sandgate_proto::client_address(request).map(|address| address.to_string()),
            action: action.to_owned(),
            target: id.to_owned(),
            ..AuditEntry::default()
        };
        sandgate_store::audit::record(self.sandboxes.audit_store(), entry).await;
    }
}

pub(crate) fn status(state: SandboxState) -> pb::SandboxStatus {
    match state {
        SandboxState::Starting => pb::SandboxStatus::Starting,
        SandboxState::Running => pb::SandboxStatus::Running,
        SandboxState::Paused => pb::SandboxStatus::Paused,
        SandboxState::Stopped => pb::SandboxStatus::Stopped,
        SandboxState::Error => pb::SandboxStatus::Error,
    }
}

pub(crate) fn timeline(timeline: Timeline) -> pb::StartTimeline {
    pb::StartTimeline {
        launch: match timeline.launch {
            Launch::Warm => pb::Launch::Warm,
            Launch::Cold => pb::Launch::Cold,
        }
        .into(),
        cold_reason: timeline.cold_reason.unwrap_or_default(),
        started_at_ms: timeline.started_at_ms,
        running_at_ms: timeline.running_at_ms,
        alive_at_ms: timeline.alive_at_ms,
        first_webhook_at_ms: timeline.first_webhook_at_ms,
        first_llm_call_at_ms: timeline.first_llm_call_at_ms,
    }
}

fn failed(err: SandboxError) -> Status {
    ErrorDetail::from(err).into()
}

/// An id given by the caller: 1 to 128 letters, digits, `-` and `_`.
fn is_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_'))
}

/// The start's spec, checked field by field with the rules of a warm configuration.
fn start_spec(request: StartRequest) -> Result<(SandboxSpec, String), Status> {
    let spec = request.spec.unwrap_or_default();
    let environment = spec.environment.into_iter().collect();
    let as_config = StoredWarmConfig {
        image: spec.image,
        working_dir: spec.working_dir,
        command: spec.command,
        environment,
        count: None,
        run_as_user: spec.run_as_user,
        run_as_group: spec.run_as_group,
        fs_group: spec.fs_group,
        fuse_s3_mount: spec.fuse_s3_mount,
    };
    let mut errors = configs::check_start(&as_config);
    if let Some(factor) = spec.resource_factor
        && !(MIN_RESOURCE_FACTOR..=MAX_RESOURCE_FACTOR).contains(&factor)
    {
        // Echoed as sent: the proto's double loses whether it was `8` or `8.0`, and a
        // whole number was most likely sent as one.
        let input = if factor.fract() == 0.0 && factor.abs() < 9.0e15 {
            serde_json::Value::from(factor as i64)
        } else {
            serde_json::Value::from(factor)
        };
        errors.push(ValidationError {
            input,
            ..configs::error(
                &["resource_factor"],
                "value_error",
                "Value error, resource_factor must be between 0.5 and 16 (1 is a sandbox's \
                 usual 1 CPU and 2Gi of memory requested; the app server asks for 1, 2, 4 or 8)",
            )
        });
    }
    if !request.session_id.is_empty() && !is_id(&request.session_id) {
        errors.push(configs::error(
            &["session_id"],
            "string_pattern_mismatch",
            "A session id has 1 to 128 letters, digits, '-' and '_'",
        ));
    }
    if !errors.is_empty() {
        return Err(validation::failure(errors).into());
    }
    let session_id = if request.session_id.is_empty() {
        random_hex(16)
    } else {
        request.session_id
    };
    Ok((
        SandboxSpec {
            image: as_config.image,
            command: as_config.command,
            working_dir: as_config.working_dir,
            environment: as_config.environment,
            run_as_user: as_config.run_as_user,
            run_as_group: as_config.run_as_group,
            fs_group: as_config.fs_group,
            fuse_s3_mount: as_config.fuse_s3_mount,
            resource_factor: spec.resource_factor,
        },
        session_id,
    ))
}

fn runtime_id(runtime_id: String) -> Result<String, Status> {
    if is_id(&runtime_id) {
        Ok(runtime_id)
    } else {
        Err(validation::failure(vec![configs::error(
            &["runtime_id"],
            "string_pattern_mismatch",
            "A runtime id has 1 to 128 letters, digits, '-' and '_'",
        )])
        .into())
    }
}

#[tonic::async_trait]
impl SandboxesApi for SandboxesService {
    async fn start(
        &self,
        request: Request<StartRequest>,
    ) -> Result<Response<StartResponse>, Status> {
        let operator = self.auth.runtime_api_key(request.metadata())?;
        let (spec, session_id) = start_spec(request.into_inner())?;
        let (record, claimed) = self
            .sandboxes
            .start(spec, session_id)
            .await
            .map_err(failed)?;
        tracing::info!(
            runtime_id = %record.runtime_id,
            image = %record.spec.image,
            claimed,
            "sandbox started"
        );
        Ok(Response::new(StartResponse {
            sandbox: Some(self.answer(record, operator)),
            claimed,
        }))
    }

    async fn get_session(
        &self,
        request: Request<GetSessionRequest>,
    ) -> Result<Response<GetSessionResponse>, Status> {
        let operator = self.auth.runtime_api_key(request.metadata())?;
        let session_id = request.into_inner().session_id;
        let found = if is_id(&session_id) {
            self.sandboxes.session(&session_id).await.map_err(failed)?
        } else {
            None
        };
        let record = found.ok_or_else(|| {
            Status::from(ErrorDetail::new(
                sandgate_proto::error::ErrorCode::NotFound,
                format!("Session {session_id} not found"),
            ))
        })?;
        Ok(Response::new(GetSessionResponse {
            sandbox: Some(self.answer(record, operator)),
        }))
    }

    async fn batch_get_sessions(
        &self,
        request: Request<BatchGetSessionsRequest>,
    ) -> Result<Response<BatchGetSessionsResponse>, Status> {
        let operator = self.auth.runtime_api_key(request.metadata())?;
        let ids = request.into_inner().session_ids;
        if ids.len() > MAX_BATCH {
            return Err(validation::failure(vec![configs::error(
                &["query", "ids"],
                "too_long",
                "At most 1000 ids in one batch",
            )])
            .into());
        }
        let mut sessions = Vec::with_capacity(ids.len());
        for id in ids {
            let found = if is_id(&id) {
                self.sandboxes.session(&id).await.map_err(failed)?
            } else {
                None
            };
            sessions.push(pb::SessionSlot {
                sandbox: found.map(|record| self.answer(record, operator)),
            });
        }
        Ok(Response::new(BatchGetSessionsResponse { sessions }))
    }

    async fn list_sandboxes(
        &self,
        request: Request<ListSandboxesRequest>,
    ) -> Result<Response<ListSandboxesResponse>, Status> {
        let operator = self.auth.runtime_api_key(request.metadata())?;
        let records = self.sandboxes.list().await.map_err(failed)?;
        Ok(Response::new(ListSandboxesResponse {
            sandboxes: records
                .into_iter()
                .map(|record| self.answer(record, operator))
                .collect(),
        }))
    }

    async fn pause(
        &self,
        request: Request<PauseRequest>,
    ) -> Result<Response<PauseResponse>, Status> {
        let operator = self.auth.runtime_api_key(request.metadata())?;
        let id = runtime_id(request.get_ref().runtime_id.clone())?;
        let record = self.sandboxes.pause(&id).await.map_err(failed)?;
        self.audit(operator, "sandbox.pause", &request, &id).await;
        tracing::info!(runtime_id = %id, "sandbox paused");
        Ok(Response::new(PauseResponse {
            sandbox: Some(self.answer(record, operator)),
        }))
    }

    async fn resume(
        &self,
        request: Request<ResumeRequest>,
    ) -> Result<Response<ResumeResponse>, Status> {
        let operator = self.auth.runtime_api_key(request.metadata())?;
        let id = runtime_id(request.into_inner().runtime_id)?;
        let record = self.sandboxes.resume(&id).await.map_err(failed)?;
        tracing::info!(runtime_id = %id, image = %record.spec.image, "sandbox resumed");
        Ok(Response::new(ResumeResponse {
            sandbox: Some(self.answer(record, operator)),
        }))
    }

    async fn stop(&self, request: Request<StopRequest>) -> Result<Response<StopResponse>, Status> {
        let operator = self.auth.runtime_api_key(request.metadata())?;
        let id = runtime_id(request.get_ref().runtime_id.clone())?;
        let record = self.sandboxes.stop(&id).await.map_err(failed)?;
        self.audit(operator, "sandbox.stop", &request, &id).await;
        tracing::info!(runtime_id = %id, "sandbox stopped");
        Ok(Response::new(StopResponse {
            sandbox: Some(self.answer(record, operator)),
        }))
    }

    async fn list_pools(
        &self,
        request: Request<ListPoolsRequest>,
    ) -> Result<Response<ListPoolsResponse>, Status> {
        self.auth.runtime_api_key(request.metadata())?;
        let (configs, _) = self
            .sandboxes
            .configs
            .effective()
            .await
            .map_err(|err| Status::from(ErrorDetail::from(err)))?;
        let records = self.sandboxes.pooled().await.map_err(failed)?;
        let records = self
            .sandboxes
            .refresh(records, None)
            .await
            .map_err(failed)?;
        // Only sandboxes on their pool's current spec count: the others await their cull.
        let specs: HashMap<&str, SandboxSpec> = configs
            .iter()
            .map(|config| (config.name.as_str(), pool_spec(config)))
            .collect();
        let current: Vec<_> = records
            .into_iter()
            .filter(|record| {
                record
                    .pool
                    .as_deref()
                    .and_then(|pool| specs.get(pool))
                    .is_some_and(|spec| *spec == record.spec)
            })
            .collect();
        let pool_limit = self.sandboxes.configs.limits().max_per_pool;
        let now = self.sandboxes.now_ms();
        let pools = configs
            .into_iter()
            .map(|config| {
                // As the reconciler counts it for its gauges: a configuration the platform
                // refuses shows its missing sandboxes as failed, with the reason.
                let spec = pool_spec(&config);
                let refused = self.sandboxes.admit(&spec).err();
                let members: Vec<_> = current
                    .iter()
                    .filter(|record| record.pool.as_deref() == Some(config.name.as_str()))
                    .cloned()
                    .collect();
                let target = config.count.min(pool_limit).max(0);
                let counts = pool_status(&config.name, &members, target, refused.as_ref(), now);
                let cold = self.sandboxes.cold_starts(Some(&config.name));
                pb::PoolStatus {
                    cold_starts: cold.by_reason.into_iter().collect(),
                    last_cold_start: cold.last,
                    image: config.config.image,
                    name: config.name,
                    target: config.count,
                    ready: counts.ready,
                    starting: counts.starting,
                    failed: counts.failed,
                    failures: counts.failures,
                    state: counts.state.to_owned(),
                }
            })
            .collect();
        let unmatched = self.sandboxes.cold_starts(None);
        Ok(Response::new(ListPoolsResponse {
            pools,
            cold_starts_without_pool: unmatched.by_reason.values().sum(),
            last_cold_start_without_pool: unmatched.last,
        }))
    }
}
