//! The command line. Every setting is also an environment variable; a flag wins over it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

mod server;
mod services;
mod tools;

pub use server::*;
pub use services::*;
pub use tools::*;

#[derive(Debug, Parser)]
#[command(
    name = "sandgate",
    version,
    about = "The operations plane for coding-agent platforms"
)]
pub struct Cli {
    #[command(flatten)]
    pub log: LogArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the edge and every gRPC service in one process (REST and gRPC on one port).
    Serve(ServeArgs),
    /// Run only the runtime API's gRPC services.
    RuntimeApi(RuntimeApiArgs),
    /// Run only the model gateway's gRPC service.
    ModelGw(ModelGwArgs),
    /// Run only the REST edge, calling the gRPC services at the given URLs.
    Edge(EdgeArgs),
    /// Manage warm runtime configurations of a running Sandgate (spec 4.1).
    Admin(AdminClientArgs),
    /// Read the ledger of a running Sandgate: what conversations, teams, users, keys and
    /// models cost.
    Ledger(LedgerArgs),
    /// Check an install's settings, environment and secrets before deploying; exits 1 on
    /// an error.
    CheckConfig(CheckConfigArgs),
    /// Print Kubernetes Secret manifests with strong random values for the install.
    GenSecrets(GenSecretsArgs),
    /// Probe a running service (for container probes): exits 0 when it is healthy.
    HealthCheck(HealthCheckArgs),
    /// Save a support bundle of a running Sandgate (a tar.gz of its versions, settings
    /// with every secret redacted, store, pools, gateway, metrics and recent warnings).
    SupportBundle(SupportBundleArgs),
}

impl Command {
    /// The process's default OpenTelemetry service name (`OTEL_SERVICE_NAME` wins).
    pub fn service_name(&self) -> &'static str {
        match self {
            Self::Serve(_) => "sandgate-serve",
            Self::RuntimeApi(_) => "sandgate-runtime-api",
            Self::ModelGw(_) => "sandgate-model-gw",
            Self::Edge(_) => "sandgate-edge",
            Self::Admin(_) => "sandgate-admin",
            Self::Ledger(_) => "sandgate-ledger",
            Self::CheckConfig(_) => "sandgate-check-config",
            Self::GenSecrets(_) => "sandgate-gen-secrets",
            Self::HealthCheck(_) => "sandgate-health-check",
            Self::SupportBundle(_) => "sandgate-support-bundle",
        }
    }
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Log filter, in `tracing` syntax (e.g. `info`, `sandgate=debug`).
    #[arg(long, env = "SANDGATE_LOG", default_value = "info", global = true)]
    pub log: String,
    /// Log format: `text` or `json`.
    #[arg(
        long,
        env = "SANDGATE_LOG_FORMAT",
        default_value = "text",
        global = true
    )]
    pub log_format: LogFormat,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address of the REST edge (and of the gRPC services, on the same port).
    #[arg(long, env = "SANDGATE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub auth: AuthArgs,
    #[command(flatten)]
    pub catalog: CatalogArgs,
    #[command(flatten)]
    pub admin: AdminArgs,
    #[command(flatten)]
    pub sandboxes: SandboxArgs,
    #[command(flatten)]
    pub gateway: GatewayArgs,
    #[command(flatten)]
    pub edge: EdgeLimits,
    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(Debug, Args)]
pub struct ModelGwArgs {
    /// Address of the model gateway's gRPC service.
    #[arg(long, env = "SANDGATE_GRPC_LISTEN", default_value = "127.0.0.1:50052")]
    pub grpc_listen: SocketAddr,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub gateway: GatewayArgs,
    #[command(flatten)]
    pub idle: IdleArgs,
    #[command(flatten)]
    pub metrics: MetricsArgs,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// Prometheus metrics of a gRPC service process (the edge serves them on its own port).
#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// Address of a listener serving Prometheus metrics at `/metrics`, e.g.
    /// `0.0.0.0:9090`; without it the process keeps no metrics.
    #[arg(long, env = "SANDGATE_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// A key `/metrics` asks of its scrapers (`Authorization: Bearer <key>`); without
    /// it, `/metrics` is open.
    #[arg(long, env = "METRICS_API_KEY", hide_env_values = true)]
    pub metrics_api_key: Option<String>,
}

/// The built-in model gateway.
#[derive(Debug, Args)]
pub struct GatewayArgs {
    /// The gateway's YAML configuration (`model_list`, `general_settings`,
    /// `extra_headers`), re-read when it changes.
    #[arg(long, env = "GATEWAY_CONFIG")]
    pub gateway_config: Option<PathBuf>,
    /// Bearer key of every gateway call; without it the gateway refuses all (401).
    #[arg(long, env = "PROXY_MASTER_KEY", hide_env_values = true)]
    pub proxy_master_key: Option<String>,
    /// Seconds connecting to an upstream may take (then 502).
    #[arg(long, env = "GATEWAY_CONNECT_TIMEOUT", default_value = "5", value_parser = seconds)]
    pub gateway_connect_timeout: Duration,
    /// Seconds an upstream may stay silent, before answering or between two chunks
    /// (then 504).
    #[arg(long, env = "GATEWAY_READ_TIMEOUT", default_value = "600", value_parser = seconds)]
    pub gateway_read_timeout: Duration,
    /// Times an upstream call is tried again after 429, 500, 502 or 503, or a connection
    /// refused or reset before any answer (0 to 5; 0: never), unless its entry sets
    /// `num_retries`. Never once the answer has begun to reach the client, and never after
    /// a timeout.
    #[arg(long, env = "GATEWAY_RETRIES", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(0..=i64::from(sandgate_model_gw::config::MAX_RETRIES)))]
    pub gateway_retries: u32,
    /// Hosts (comma-separated names or addresses) that models added at runtime
    /// (`/model/new`) may reach although they are loopback, private, link-local or a
    /// cloud metadata service; the configuration file's entries go anywhere.
    #[arg(long, env = "GATEWAY_ALLOWED_UPSTREAM_HOSTS", value_delimiter = ',')]
    pub gateway_allowed_upstream_hosts: Vec<String>,
    /// Models `/model/new` may add, at most (then 409): each is held in memory and listed
    /// by `/v1/models` and `/model/info` (about 22 KiB there at most).
    #[arg(long, env = "GATEWAY_MAX_ADDED_MODELS",
          default_value_t = sandgate_model_gw::DEFAULT_MAX_ADDED_MODELS as u64,
          value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub gateway_max_added_models: u64,
    /// The largest whole (not streamed) upstream answer read, in bytes (then 502).
    #[arg(long, env = "GATEWAY_MAX_ANSWER_BYTES", default_value_t = 32 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(1024..))]
    pub gateway_max_answer_bytes: u64,
    /// The longest line (one server-sent event's) of a streamed upstream answer, in
    /// bytes: past it the stream ends with an error event.
    #[arg(long, env = "GATEWAY_MAX_EVENT_BYTES", default_value_t = 8 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(1024..))]
    pub gateway_max_event_bytes: u64,
    /// Seconds one gateway call may take in all, a stream included (then 504).
    #[arg(long, env = "GATEWAY_CALL_DEADLINE", default_value = "1800", value_parser = seconds)]
    pub gateway_call_deadline: Duration,
    /// Spend log entries kept at most (about, on Redis): the oldest go first.
    #[arg(long, env = "SPEND_LOG_MAX_ENTRIES", default_value_t = 100_000,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub spend_log_max_entries: u64,
    /// Seconds a spend log entry is kept at most.
    #[arg(long, env = "SPEND_LOG_MAX_AGE", default_value = "2592000", value_parser = seconds)]
    pub spend_log_max_age: Duration,
}

/// A positive number of seconds, fractions allowed.
fn seconds(value: &str) -> Result<Duration, String> {
    match value.parse::<f64>() {
        Ok(seconds) if seconds > 0.0 && seconds.is_finite() => Ok(Duration::from_secs_f64(seconds)),
        _ => Err(format!("{value:?} is not a positive number of seconds")),
    }
}

/// [`seconds`], or 0: a setting that 0 turns off.
fn seconds_or_zero(value: &str) -> Result<Duration, String> {
    match value.parse::<f64>() {
        Ok(seconds) if seconds >= 0.0 => Duration::try_from_secs_f64(seconds)
            .map_err(|_| format!("{value:?} is too many seconds")),
        _ => Err(format!(
            "{value:?} is not 0 or a positive number of seconds"
        )),
    }
}

#[derive(Debug, Args)]
pub struct RuntimeApiArgs {
    /// Address of the gRPC services.
    #[arg(long, env = "SANDGATE_GRPC_LISTEN", default_value = "127.0.0.1:50051")]
    pub grpc_listen: SocketAddr,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub auth: AuthArgs,
    #[command(flatten)]
    pub catalog: CatalogArgs,
    #[command(flatten)]
    pub admin: AdminArgs,
    #[command(flatten)]
    pub sandboxes: SandboxArgs,
    #[command(flatten)]
    pub metrics: MetricsArgs,
    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(Debug, Args)]
pub struct EdgeArgs {
    /// Address of the REST edge.
    #[arg(long, env = "SANDGATE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// URL of the runtime API's gRPC services, e.g. `http://runtime-api:50051`.
    #[arg(long, env = "SANDGATE_RUNTIME_API_URL")]
    pub runtime_api: String,
    /// URL of the model gateway's gRPC service, e.g. `http://model-gw:50052`; without it
    /// the gateway's routes answer 503.
    #[arg(long, env = "SANDGATE_MODEL_GW_URL")]
    pub model_gw: Option<String>,
    #[command(flatten)]
    pub edge: EdgeLimits,
    #[command(flatten)]
    pub server: ServerArgs,
}
