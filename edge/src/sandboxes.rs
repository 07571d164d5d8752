//! The sandbox lifecycle API (design.md) → the Sandboxes service: start (claim or cold
//! start), sessions, list, pause, resume, stop, and the warm pools' status.

use axum::Json;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, RawQuery, State};
use bytes::Bytes;
use http::HeaderMap;
use sandgate_proto::sandboxes::v1::{
    self as pb, BatchGetSessionsRequest, GetSessionRequest, ListPoolsRequest, ListSandboxesRequest,
    PauseRequest, ResumeRequest, StartRequest, StopRequest,
};
use serde_json::Value;

use crate::client::ClientAddress;
use crate::error::{ApiError, DetailBody, ValidationBody, after_caller};
use crate::params::ShowAll;
use crate::runtimes::{
    ColdStartsWithoutPool, Command, PoolList, Runtime, RuntimeBody, RuntimeList, StartBody,
    WarmPool,
};
use crate::state::AppState;
use crate::{body, metadata};

impl Command {
    /// The arguments, or a 422 at `command` for a line a shell could not split (an
    /// unclosed quote, a trailing backslash).
    fn arguments(command: Option<Self>) -> Result<Vec<String>, ApiError> {
        match command {
            None => Ok(Vec::new()),
            Some(Self::Arguments(arguments)) => Ok(arguments),
            Some(Self::Line(line)) => shlex::split(&line).ok_or_else(|| {
                ApiError::invalid(
                    "value_error",
                    ["body", "command"],
                    "Value error, the command line has an unclosed quote or ends in a backslash",
                    Value::String(line),
                )
            }),
        }
    }
}

#[utoipa::path(
    post,
    path = "/start",
    operation_id = "start_sandbox",
    tag = "Sandboxes",
    summary = "Claim a warm sandbox whose spec matches exactly (less OH_WEBHOOKS_0_BASE_URL and OH_ALLOW_CORS_ORIGINS_0), else cold-start one; a session that already has a live sandbox gets it",
    security(("RuntimeAPIKey" = [])),
    request_body(content = StartBody),
    responses(
        (status = 200, description = "The sandbox, with its session key; `warm` says whether it was claimed", body = Runtime),
        (status = 401, description = "`provide a valid API key`", body = DetailBody),
        (status = 422, description = "A field is wrong", body = ValidationBody),
        (status = 413, description = "Body larger than the configured limit", body = DetailBody),
        (status = 502, description = "The sandbox platform failed", body = DetailBody),
        (status = 503, description = "The store is unavailable; retry later", body = DetailBody),
    ),
)]
pub async fn start(
    State(state): State<AppState>,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<Runtime>, ApiError> {
    let payload = body::buffered(payload, state.body_limit)?;
    let body: StartBody = match body::decode(&payload) {
        Ok(body) => body,
        Err(error) => {
            let probe = metadata::request(&headers, StartRequest::default());
            return Err(after_caller(error, state.sandboxes.clone().start(probe)).await);
        }
    };
    let command = match Command::arguments(body.command) {
        Ok(command) => command,
        Err(error) => {
            let probe = metadata::request(&headers, StartRequest::default());
            return Err(after_caller(error, state.sandboxes.clone().start(probe)).await);
        }
    };
    let request = StartRequest {
        spec: Some(pb::SandboxSpec {
            image: body.image,
            command,
            working_dir: body.working_dir,
            environment: body.environment.into_iter().collect(),
            run_as_user: body.run_as_user,
            run_as_group: body.run_as_group,
            fs_group: body.fs_group,
            fuse_s3_mount: body.fuse_s3_mount,
            resource_factor: body.resource_factor,
        }),
        session_id: body.session_id.unwrap_or_default(),
    };
    let response = state
        .sandboxes
        .clone()
        .start(metadata::request(&headers, request))
        .await?
        .into_inner();
    let mut answer = Runtime::from(response.sandbox.unwrap_or_default());
    answer.warm = Some(response.claimed);
    Ok(Json(answer))
}

#[utoipa::path(
    get,
    path = "/sessions/{session_id}",
    operation_id = "get_session",
    tag = "Sandboxes",
    summary = "The sandbox running a session",
    security(("RuntimeAPIKey" = [])),
    params(("session_id" = String, Path)),
    responses(
        (status = 200, description = "The sandbox", body = Runtime),
        (status = 401, description = "`provide a valid API key`", body = DetailBody),
        (status = 404, description = "`Session <id> not found`", body = DetailBody),
    ),
)]
pub async fn session(
    State(state): State<AppState>,
    Path(session_id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Runtime>, ApiError> {
    let response = state
        .sandboxes
        .clone()
        .get_session(metadata::request(
            &headers,
            GetSessionRequest { session_id },
        ))
        .await?
        .into_inner();
    Ok(Json(response.sandbox.unwrap_or_default().into()))
}

/// `GET /sessions/batch?ids=a&ids=b` (or `ids=a,b`): a list, `null` for unknown ids.
#[utoipa::path(
    get,
    path = "/sessions/batch",
    operation_id = "batch_get_sessions",
    tag = "Sandboxes",
    summary = "Several sessions' sandboxes, in order; null for an unknown id",
    security(("RuntimeAPIKey" = [])),
    params(("ids" = Vec<String>, Query, description = "Repeated (`ids=a&ids=b`) or comma-separated; at most 1000")),
    responses(
        (status = 200, description = "One slot per id", body = Vec<Option<Runtime>>),
        (status = 401, description = "`provide a valid API key`", body = DetailBody),
        (status = 422, description = "A field is wrong", body = ValidationBody),
    ),
)]
pub async fn batch(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Vec<Option<Runtime>>>, ApiError> {
    let session_ids: Vec<String> = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .filter(|(name, _)| name == "ids")
        .flat_map(|(_, value)| {
            value
                .split(',')
                .map(str::trim)
                .filter(|id| !id.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    let response = state
        .sandboxes
        .clone()
        .batch_get_sessions(metadata::request(
            &headers,
            BatchGetSessionsRequest { session_ids },
        ))
        .await?
        .into_inner();
    Ok(Json(
        response
            .sessions
            .into_iter()
            .map(|slot| slot.sandbox.map(Runtime::from))
            .collect(),
    ))
}

/// `?show_all=` as FastAPI reads a boolean; absent: false.
fn show_all(query: Option<&str>) -> Result<bool, ApiError> {
    let mut show_all = false;
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        if name == "show_all" {
            show_all = match value.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" | "t" | "y" => true,
                "false" | "0" | "no" | "off" | "f" | "n" => false,
                _ => {
                    return Err(ApiError::invalid(
                        "bool_parsing",
                        ["query", "show_all"],
                        "Input should be a valid boolean, unable to interpret input",
                        Value::String(value.into_owned()),
                    ));
                }
            };
        }
    }
    Ok(show_all)
}

/// `GET /list`: the caller's sandboxes that are starting or running, which the app
/// server's client counts as running when it enforces its sandbox limit; with
/// `?show_all=true`, paused, stopped and failed ones too.
#[utoipa::path(
    get,
    path = "/list",
    operation_id = "list_sandboxes",
    tag = "Sandboxes",
    summary = "The caller's starting and running sandboxes, newest first; with show_all, paused, stopped (for an hour) and failed ones too",
    security(("RuntimeAPIKey" = [])),
    params(ShowAll),
    responses(
        (status = 200, description = "The sandboxes", body = RuntimeList),
        (status = 401, description = "`provide a valid API key`", body = DetailBody),
        (status = 422, description = "show_all is not a boolean", body = ValidationBody),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<RuntimeList>, ApiError> {
    let show_all = match show_all(query.as_deref()) {
        Ok(show_all) => show_all,
        Err(error) => {
            let probe = metadata::request(&headers, ListSandboxesRequest {});
            return Err(after_caller(error, state.sandboxes.clone().list_sandboxes(probe)).await);
        }
    };
    let response = state
        .sandboxes
        .clone()
        .list_sandboxes(metadata::request(&headers, ListSandboxesRequest {}))
        .await?
        .into_inner();
    let runtimes: Vec<Runtime> = response
        .sandboxes
        .into_iter()
        .filter(|sandbox| {
            show_all
                || matches!(
                    sandbox.status(),
                    pb::SandboxStatus::Starting | pb::SandboxStatus::Running
                )
        })
        .map(Runtime::from)
        .collect();
    Ok(Json(RuntimeList {
        total: runtimes.len(),
        runtimes,
    }))
}

/// What `/pause`, `/resume` and `/stop` do to the sandbox their body names.
#[derive(Clone, Copy)]
enum Transition {
    Pause,
    Resume,
    Stop,
}

/// One of the three transitions of the sandbox a body's `runtime_id` names. A body that
/// does not decode is answered after the caller is judged, by a `/pause` of no sandbox.
async fn transition(
    transition: Transition,
    state: AppState,
    headers: HeaderMap,
    address: ClientAddress,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<Runtime>, ApiError> {
    let payload = body::buffered(payload, state.body_limit)?;
    let runtime_id = match body::decode::<RuntimeBody>(&payload) {
        Ok(body) => body.runtime_id,
        Err(error) => {
            let probe = metadata::request(&headers, PauseRequest::default());
            return Err(after_caller(error, state.sandboxes.clone().pause(probe)).await);
        }
    };
    let mut client = state.sandboxes.clone();
    let sandbox = match transition {
        Transition::Pause => {
            client
                .pause(metadata::request_for(
                    &headers,
                    address,
                    PauseRequest { runtime_id },
                ))
                .await?
                .into_inner()
                .sandbox
        }
        Transition::Resume => {
            client
                .resume(metadata::request_for(
                    &headers,
                    address,
                    ResumeRequest { runtime_id },
                ))
                .await?
                .into_inner()
                .sandbox
        }
        Transition::Stop => {
            client
                .stop(metadata::request_for(
                    &headers,
                    address,
                    StopRequest { runtime_id },
                ))
                .await?
                .into_inner()
                .sandbox
        }
    };
    Ok(Json(sandbox.unwrap_or_default().into()))
}

/// The answers a change of one sandbox's state may give besides its own: no valid key,
/// no such sandbox, a wrong field, the platform failing.
#[derive(utoipa::IntoResponses)]
#[expect(dead_code, reason = "describes the answers, for the document")]
enum TransitionErrors {
    /// `provide a valid API key`
    #[response(status = 401)]
    Unauthorized(DetailBody),
    /// `Runtime <id> not found`
    #[response(status = 404)]
    NotFound(DetailBody),
    /// A field is wrong
    #[response(status = 422)]
    Invalid(ValidationBody),
    /// The sandbox platform failed
    #[response(status = 502)]
    PlatformFailed(DetailBody),
    /// Body larger than the configured limit
    #[response(status = 413)]
    TooLarge(DetailBody),
}

#[utoipa::path(
    post,
    path = "/pause",
    operation_id = "pause_sandbox",
    tag = "Sandboxes",
    summary = "Stop the sandbox's workload and keep its storage",
    security(("RuntimeAPIKey" = [])),
    request_body(content = RuntimeBody),
    responses(
        (status = 200, description = "The sandbox", body = Runtime),
        TransitionErrors,
        (status = 409, description = "The sandbox is stopped", body = DetailBody),
    ),
)]
pub async fn pause(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<Runtime>, ApiError> {
    transition(Transition::Pause, state, headers, address, payload).await
}

#[utoipa::path(
    post,
    path = "/resume",
    operation_id = "resume_sandbox",
    tag = "Sandboxes",
    summary = "Start a paused (or failed) sandbox again, on its original image, with a new session key",
    security(("RuntimeAPIKey" = [])),
    request_body(content = RuntimeBody),
    responses(
        (status = 200, description = "The sandbox", body = Runtime),
        TransitionErrors,
        (status = 409, description = "The sandbox is not paused or in error", body = DetailBody),
    ),
)]
pub async fn resume(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<Runtime>, ApiError> {
    transition(Transition::Resume, state, headers, address, payload).await
}

#[utoipa::path(
    post,
    path = "/stop",
    operation_id = "stop_sandbox",
    tag = "Sandboxes",
    summary = "Delete the sandbox's workload and storage; its session key stops working",
    security(("RuntimeAPIKey" = [])),
    request_body(content = RuntimeBody),
    responses(
        (status = 200, description = "The sandbox", body = Runtime),
        TransitionErrors,
    ),
)]
pub async fn stop(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<Runtime>, ApiError> {
    transition(Transition::Stop, state, headers, address, payload).await
}

/// `GET /api/warm-runtime-pools`: each pool's target and counts.
#[utoipa::path(
    get,
    path = "/api/warm-runtime-pools",
    operation_id = "list_warm_pools",
    tag = "Sandboxes",
    summary = "Each warm pool: its target size and its ready, starting and failed sandboxes",
    security(("RuntimeAPIKey" = [])),
    responses(
        (status = 200, description = "One entry per configuration in effect, by name", body = PoolList),
        (status = 401, description = "`provide a valid API key`", body = DetailBody),
    ),
)]
pub async fn pools(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<PoolList>, ApiError> {
    let response = state
        .sandboxes
        .clone()
        .list_pools(metadata::request(&headers, ListPoolsRequest {}))
        .await?
        .into_inner();
    Ok(Json(PoolList {
        pools: response.pools.into_iter().map(WarmPool::from).collect(),
        cold_starts_without_pool: ColdStartsWithoutPool {
            count: response.cold_starts_without_pool,
            last: response.last_cold_start_without_pool,
        },
    }))
}
