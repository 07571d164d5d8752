//! The sandbox lifecycle API (design.md) → the Sandboxes service: start (claim or cold
//! start), sessions, list, pause, resume, stop, and the warm pools' status.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, RawQuery, State};
use bytes::Bytes;
use http::HeaderMap;
use sandgate_proto::sandboxes::v1::{
    self as pb, BatchGetSessionsRequest, GetSessionRequest, ListPoolsRequest, ListSandboxesRequest,
    PauseRequest, ResumeRequest, StartRequest, StopRequest,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::{ApiError, after_caller};
use crate::state::AppState;
use crate::{body, metadata};

/// `POST /start`'s body. Fields the clients send that Sandgate has no use for are ignored.
#[derive(Deserialize)]
struct StartBody {
    image: String,
    /// A list of arguments; one string, a command line (the SDK's `APIRemoteWorkspace`
    /// sends one), split into arguments as a POSIX shell splits words, without running a
    /// shell; or null (the app server's `RemoteSandboxService` may send it), the image's
    /// own entrypoint. A warm claim compares the arguments.
    #[serde(default)]
    command: Option<Command>,
    working_dir: String,
    #[serde(default)]
    environment: BTreeMap<String, String>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    resource_factor: Option<f64>,
    #[serde(default, deserialize_with = "sandgate_proto::json::optional_integer")]
    run_as_user: Option<i64>,
    #[serde(default, deserialize_with = "sandgate_proto::json::optional_integer")]
    run_as_group: Option<i64>,
    #[serde(default, deserialize_with = "sandgate_proto::json::optional_integer")]
    fs_group: Option<i64>,
    #[serde(default)]
    fuse_s3_mount: Option<bool>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Command {
    Arguments(Vec<String>),
    Line(String),
}

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

/// `POST /pause|/resume|/stop`'s body.
#[derive(Deserialize)]
struct RuntimeBody {
    runtime_id: String,
}

fn status_name(status: pb::SandboxStatus) -> &'static str {
    match status {
        pb::SandboxStatus::Starting | pb::SandboxStatus::Unspecified => "starting",
        pb::SandboxStatus::Running => "running",
        pb::SandboxStatus::Paused => "paused",
        pb::SandboxStatus::Stopped => "stopped",
        pb::SandboxStatus::Error => "error",
    }
}

fn optional(text: String) -> Value {
    if text.is_empty() {
        Value::Null
    } else {
        Value::String(text)
    }
}

/// The legacy runtime API's `pod_status` for a status (design.md), which older clients
/// (the SDK's `APIRemoteWorkspace`) poll: `ready` is up, `pending` starting, `not found`
/// no pod (paused or stopped), `failed` an error. `status` stays the source of truth.
fn pod_status(status: pb::SandboxStatus) -> &'static str {
    match status {
        pb::SandboxStatus::Starting | pb::SandboxStatus::Unspecified => "pending",
        pb::SandboxStatus::Running => "ready",
        pb::SandboxStatus::Paused | pb::SandboxStatus::Stopped => "not found",
        pb::SandboxStatus::Error => "failed",
    }
}

/// A sandbox as the REST contract shows it.
fn runtime(sandbox: pb::Sandbox) -> Value {
    let status = status_name(sandbox.status());
    let pod_status = pod_status(sandbox.status());
    let spec = sandbox.spec.unwrap_or_default();
    json!({
        "runtime_id": sandbox.runtime_id,
        "session_id": sandbox.session_id,
        "url": sandbox.url,
        "session_api_key": optional(sandbox.session_api_key),
        "status": status,
        "pod_status": pod_status,
        // The legacy fields beside pod_status: the platform's restarts of the sandbox's
        // workload since it last started (Kubernetes: its containers' restart counts).
        "restart_count": sandbox.restart_count,
        "restart_reasons": sandbox.restart_reasons,
        "status_detail": optional(sandbox.status_detail),
        "image": spec.image,
        "pool": optional(sandbox.pool),
        "created_at_ms": sandbox.created_at_ms,
    })
}

pub async fn start(
    State(state): State<AppState>,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
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
    let mut answer = runtime(response.sandbox.unwrap_or_default());
    answer["warm"] = Value::Bool(response.claimed);
    Ok(Json(answer))
}

pub async fn session(
    State(state): State<AppState>,
    Path(session_id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let response = state
        .sandboxes
        .clone()
        .get_session(metadata::request(
            &headers,
            GetSessionRequest { session_id },
        ))
        .await?
        .into_inner();
    Ok(Json(runtime(response.sandbox.unwrap_or_default())))
}

/// `GET /sessions/batch?ids=a&ids=b` (or `ids=a,b`): a list, `null` for unknown ids.
pub async fn batch(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
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
    Ok(Json(Value::Array(
        response
            .sessions
            .into_iter()
            .map(|slot| slot.sandbox.map_or(Value::Null, runtime))
            .collect(),
    )))
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
pub async fn list(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
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
    let runtimes: Vec<Value> = response
        .sandboxes
        .into_iter()
        .filter(|sandbox| {
            show_all
                || matches!(
                    sandbox.status(),
                    pb::SandboxStatus::Starting | pb::SandboxStatus::Running
                )
        })
        .map(runtime)
        .collect();
    Ok(Json(
        json!({ "total": runtimes.len(), "runtimes": runtimes }),
    ))
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
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
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
                .pause(metadata::request(&headers, PauseRequest { runtime_id }))
                .await?
                .into_inner()
                .sandbox
        }
        Transition::Resume => {
            client
                .resume(metadata::request(&headers, ResumeRequest { runtime_id }))
                .await?
                .into_inner()
                .sandbox
        }
        Transition::Stop => {
            client
                .stop(metadata::request(&headers, StopRequest { runtime_id }))
                .await?
                .into_inner()
                .sandbox
        }
    };
    Ok(Json(runtime(sandbox.unwrap_or_default())))
}

pub async fn pause(
    State(state): State<AppState>,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    transition(Transition::Pause, state, headers, payload).await
}

pub async fn resume(
    State(state): State<AppState>,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    transition(Transition::Resume, state, headers, payload).await
}

pub async fn stop(
    State(state): State<AppState>,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    transition(Transition::Stop, state, headers, payload).await
}

/// `GET /api/warm-runtime-pools`: each pool's target and counts.
pub async fn pools(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let response = state
        .sandboxes
        .clone()
        .list_pools(metadata::request(&headers, ListPoolsRequest {}))
        .await?
        .into_inner();
    let pools: Vec<Value> = response
        .pools
        .into_iter()
        .map(|pool| {
            json!({
                "name": pool.name,
                "image": pool.image,
                "target": pool.target,
                "ready": pool.ready,
                "starting": pool.starting,
                "failed": pool.failed,
                "failures": pool.failures,
                "state": pool.state,
            })
        })
        .collect();
    Ok(Json(json!({ "pools": pools })))
}
