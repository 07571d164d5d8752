//! The sandbox lifecycle API's requests and answers as the REST contract shows them
//! (design.md): typed structs whose schemas the document shows. A field added to a
//! sandbox or a pool is added here, and the document follows.

use std::collections::BTreeMap;

use sandgate_proto::sandboxes::v1 as pb;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Type};

/// `POST /start`'s body. Fields the clients send that Sandgate has no use for are ignored.
#[derive(Deserialize, ToSchema)]
#[schema(as = StartRequest)]
pub(crate) struct StartBody {
    /// Full image reference, without whitespace
    #[schema(
        min_length = 1,
        pattern = "^[^\\t\\n\\u000b\\u000c\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]+$"
    )]
    pub(crate) image: String,
    /// A list of arguments; one string, a command line (the SDK's `APIRemoteWorkspace`
    /// sends one), split into arguments as a POSIX shell splits words, without running a
    /// shell; or null (the app server's `RemoteSandboxService` may send it), the image's
    /// own entrypoint. A warm claim compares the arguments.
    #[serde(default)]
    #[schema(schema_with = command)]
    pub(crate) command: Option<Command>,
    /// An absolute path
    #[schema(pattern = "^/")]
    pub(crate) working_dir: String,
    #[serde(default)]
    #[schema(schema_with = environment)]
    pub(crate) environment: BTreeMap<String, String>,
    /// Absent, null or empty: a random one
    #[serde(default)]
    #[schema(pattern = "^([A-Za-z0-9_-]{1,128})?$")]
    pub(crate) session_id: Option<String>,
    /// 1: 1 CPU and 2Gi of memory requested (twice that as limits); from 0.5 to 16
    #[serde(default)]
    #[schema(minimum = 0.5, maximum = 16)]
    pub(crate) resource_factor: Option<f64>,
    #[serde(default, deserialize_with = "sandgate_proto::json::optional_integer")]
    #[schema(schema_with = id_number)]
    pub(crate) run_as_user: Option<i64>,
    #[serde(default, deserialize_with = "sandgate_proto::json::optional_integer")]
    #[schema(schema_with = id_number)]
    pub(crate) run_as_group: Option<i64>,
    #[serde(default, deserialize_with = "sandgate_proto::json::optional_integer")]
    #[schema(schema_with = id_number)]
    pub(crate) fs_group: Option<i64>,
    #[serde(default)]
    pub(crate) fuse_s3_mount: Option<bool>,
}

/// `POST /start`'s `command`.
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum Command {
    Arguments(Vec<String>),
    Line(String),
}

/// The arguments; or one command line, which must split (quotes closed, no trailing
/// backslash); or null.
fn command() -> OneOfBuilder {
    OneOfBuilder::new()
        .description(Some(
            "The arguments; or one command line, split into arguments as a POSIX shell splits \
             words (no shell runs it); or null, the image's own entrypoint. A warm claim \
             compares the arguments.",
        ))
        .item(ArrayBuilder::new().items(ObjectBuilder::new().schema_type(Type::String)))
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(
                    r#"^([^'"\\]|\\[\s\S]|'[^']*'|"([^"\\]|\\[\s\S])*")*$"#,
                ))
                .description(Some(
                    "One command line: quotes closed, no trailing backslash",
                )),
        )
        .item(ObjectBuilder::new().schema_type(Type::Null))
}

/// Environment variables: names as a shell takes them, string values.
pub(crate) fn environment() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .additional_properties(Some(ObjectBuilder::new().schema_type(Type::String)))
        .property_names(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some("^[A-Za-z_.-][A-Za-z0-9_.-]*$")),
        ))
}

/// A user or group id: a non-negative 64-bit integer, or null.
pub(crate) fn id_number() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::SchemaType::from_iter([
            Type::Integer,
            Type::Null,
        ]))
        .minimum(Some(0))
        .maximum(Some(i64::MAX))
}

/// `POST /pause|/resume|/stop`'s body.
#[derive(Deserialize, ToSchema)]
#[schema(as = RuntimeId)]
pub(crate) struct RuntimeBody {
    #[schema(pattern = "^[A-Za-z0-9_-]{1,128}$")]
    pub(crate) runtime_id: String,
}

/// A sandbox as the REST contract shows it.
#[derive(Serialize, ToSchema)]
pub(crate) struct Runtime {
    pub(crate) runtime_id: String,
    pub(crate) session_id: String,
    /// {scheme}://{runtime_id}{RUNTIME_URL_SEPARATOR}{RUNTIME_BASE_URL}
    pub(crate) url: String,
    /// The key the sandbox authenticates with (X-Session-API-Key); derived, never stored
    /// in clear
    #[schema(required = false)]
    pub(crate) session_api_key: Option<String>,
    pub(crate) status: Status,
    #[schema(required = false)]
    pub(crate) pod_status: PodStatus,
    /// The legacy fields beside pod_status: the platform's restarts of the sandbox's
    /// workload since it last started (Kubernetes: its containers' restart counts).
    #[schema(required = false)]
    pub(crate) restart_count: u32,
    /// The reasons of those restarts.
    #[schema(required = false)]
    pub(crate) restart_reasons: Vec<String>,
    /// Why it is not running: image pull failure, unschedulable, …
    #[schema(required = false)]
    pub(crate) status_detail: Option<String>,
    #[schema(required = false)]
    pub(crate) image: String,
    /// The warm pool it was started for; null for a cold start
    #[schema(required = false)]
    pub(crate) pool: Option<String>,
    #[schema(required = false)]
    pub(crate) created_at_ms: i64,
    /// POST /start only: a warm sandbox was claimed
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = bool)]
    pub(crate) warm: Option<bool>,
    /// Where the seconds of the start that claimed or created it went; absent for a
    /// sandbox started before timelines were kept
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub(crate) timeline: Option<StartTimeline>,
}

/// A start's phases, milliseconds since the epoch, each as Sandgate first saw it; a phase
/// not seen yet is absent. A resume keeps the timeline of the start.
#[derive(Serialize, ToSchema)]
pub(crate) struct StartTimeline {
    /// warm: a warm sandbox was claimed; cold: one was created
    pub(crate) launch: Launch,
    /// Why the start was cold: no_pool, pool_empty, init_failed, or the first field that
    /// differed from the nearest pool
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub(crate) cold_reason: Option<String>,
    /// The claim of the warm sandbox, or the cold create
    pub(crate) started_at_ms: i64,
    /// First seen running (a warm claim of a running sandbox: the claim)
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = i64)]
    pub(crate) running_at_ms: Option<i64>,
    /// Its agent-server answered: /api/init of a personalised claim, else GET /alive
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = i64)]
    pub(crate) alive_at_ms: Option<i64>,
    /// The first conversation webhook or event batch it sent
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = i64)]
    pub(crate) first_webhook_at_ms: Option<i64>,
    /// The first model gateway call carrying its session
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = i64)]
    pub(crate) first_llm_call_at_ms: Option<i64>,
}

/// Whether a start claimed a warm sandbox or created one.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Launch {
    Warm,
    Cold,
}

impl From<pb::StartTimeline> for StartTimeline {
    fn from(timeline: pb::StartTimeline) -> Self {
        Self {
            launch: match timeline.launch() {
                pb::Launch::Warm => Launch::Warm,
                pb::Launch::Cold | pb::Launch::Unspecified => Launch::Cold,
            },
            cold_reason: optional(timeline.cold_reason),
            started_at_ms: timeline.started_at_ms,
            running_at_ms: timeline.running_at_ms,
            alive_at_ms: timeline.alive_at_ms,
            first_webhook_at_ms: timeline.first_webhook_at_ms,
            first_llm_call_at_ms: timeline.first_llm_call_at_ms,
        }
    }
}

/// A sandbox's state.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    Starting,
    Running,
    Paused,
    Stopped,
    Error,
}

/// The legacy runtime API's view of status, for older clients: ready (running), pending
/// (starting), not found (paused, stopped), failed (error)
#[derive(Serialize, ToSchema)]
pub(crate) enum PodStatus {
    #[serde(rename = "ready")]
    Ready,
    #[serde(rename = "pending")]
    Pending,
    #[serde(rename = "not found")]
    NotFound,
    #[serde(rename = "failed")]
    Failed,
}

impl From<pb::SandboxStatus> for Status {
    fn from(status: pb::SandboxStatus) -> Self {
        match status {
            pb::SandboxStatus::Starting | pb::SandboxStatus::Unspecified => Self::Starting,
            pb::SandboxStatus::Running => Self::Running,
            pb::SandboxStatus::Paused => Self::Paused,
            pb::SandboxStatus::Stopped => Self::Stopped,
            pb::SandboxStatus::Error => Self::Error,
        }
    }
}

/// The legacy runtime API's `pod_status` for a status (design.md), which older clients
/// (the SDK's `APIRemoteWorkspace`) poll: `ready` is up, `pending` starting, `not found`
/// no pod (paused or stopped), `failed` an error. `status` stays the source of truth.
impl From<pb::SandboxStatus> for PodStatus {
    fn from(status: pb::SandboxStatus) -> Self {
        match status {
            pb::SandboxStatus::Starting | pb::SandboxStatus::Unspecified => Self::Pending,
            pb::SandboxStatus::Running => Self::Ready,
            pb::SandboxStatus::Paused | pb::SandboxStatus::Stopped => Self::NotFound,
            pb::SandboxStatus::Error => Self::Failed,
        }
    }
}

fn optional(text: String) -> Option<String> {
    (!text.is_empty()).then_some(text)
}

impl From<pb::Sandbox> for Runtime {
    fn from(sandbox: pb::Sandbox) -> Self {
        let status = sandbox.status();
        let spec = sandbox.spec.unwrap_or_default();
        Self {
            runtime_id: sandbox.runtime_id,
            session_id: sandbox.session_id,
            url: sandbox.url,
            session_api_key: optional(sandbox.session_api_key),
            status: status.into(),
            pod_status: status.into(),
            restart_count: sandbox.restart_count,
            restart_reasons: sandbox.restart_reasons,
            status_detail: optional(sandbox.status_detail),
            image: spec.image,
            pool: optional(sandbox.pool),
            created_at_ms: sandbox.created_at_ms,
            warm: None,
            timeline: sandbox.timeline.map(StartTimeline::from),
        }
    }
}

/// `GET /list`'s answer.
#[derive(Serialize, ToSchema)]
pub(crate) struct RuntimeList {
    pub(crate) total: usize,
    pub(crate) runtimes: Vec<Runtime>,
}

/// A warm pool's target and counts.
#[derive(Serialize, ToSchema)]
pub(crate) struct WarmPool {
    pub(crate) name: String,
    pub(crate) image: String,
    pub(crate) target: i64,
    pub(crate) ready: i64,
    pub(crate) starting: i64,
    pub(crate) failed: i64,
    /// Why sandboxes are failed or stuck starting, deduplicated; while failed ones wait for
    /// their replacement, when it comes
    pub(crate) failures: Vec<String>,
    /// ready, filling, backing_off (creates keep failing, failed sandboxes wait for their
    /// replacement) or refused (the platform refuses the configuration)
    #[schema(schema_with = pool_state)]
    pub(crate) state: String,
    /// Starts that held this pool nearest and cold-started all the same, by reason
    /// (`pool_empty`, `init_failed`, or the first field that differed), counted by the
    /// replica that answers since it started
    pub(crate) cold_starts: std::collections::BTreeMap<String, i64>,
    /// The latest of them: its reason and what differed (empty: none yet)
    pub(crate) last_cold_start: String,
}

fn pool_state() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["ready", "filling", "backing_off", "refused"]))
        .description(Some(
            "backing_off: creates keep failing, failed sandboxes wait for their replacement; \
             refused: the platform refuses the configuration",
        ))
}

impl From<pb::PoolStatus> for WarmPool {
    fn from(pool: pb::PoolStatus) -> Self {
        Self {
            name: pool.name,
            image: pool.image,
            target: pool.target,
            ready: pool.ready,
            starting: pool.starting,
            failed: pool.failed,
            failures: pool.failures,
            state: pool.state,
            cold_starts: pool.cold_starts.into_iter().collect(),
            last_cold_start: pool.last_cold_start,
        }
    }
}

/// `GET /api/warm-runtime-pools`' answer.
#[derive(Serialize, ToSchema)]
pub(crate) struct PoolList {
    pub(crate) pools: Vec<WarmPool>,
    pub(crate) cold_starts_without_pool: ColdStartsWithoutPool,
}

/// Starts whose image no pool runs (`no_pool`), counted as a pool's `cold_starts` are.
#[derive(Serialize, ToSchema)]
pub(crate) struct ColdStartsWithoutPool {
    pub(crate) count: i64,
    /// The latest's reason (empty: none yet)
    pub(crate) last: String,
}
