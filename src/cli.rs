//! The command line. Every setting is also an environment variable; a flag wins over it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

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
    /// Run only the REST edge, calling the gRPC services at the given URLs.
    Edge(EdgeArgs),
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
    pub edge: EdgeLimits,
    #[command(flatten)]
    pub shutdown: ShutdownArgs,
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
    pub shutdown: ShutdownArgs,
}

#[derive(Debug, Args)]
pub struct EdgeArgs {
    /// Address of the REST edge.
    #[arg(long, env = "SANDGATE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// URL of the runtime API's gRPC services, e.g. `http://runtime-api:50051`.
    #[arg(long, env = "SANDGATE_RUNTIME_API_URL")]
    pub runtime_api: String,
    /// URL of the model gateway's gRPC service (its routes are not served yet).
    #[arg(long, env = "SANDGATE_MODEL_GW_URL")]
    pub model_gw: Option<String>,
    #[command(flatten)]
    pub edge: EdgeLimits,
    #[command(flatten)]
    pub shutdown: ShutdownArgs,
}

#[derive(Debug, Args)]
pub struct StoreArgs {
    /// Directory of the embedded store (used when no Redis URL is given).
    #[arg(long, env = "SANDGATE_DATA_DIR", default_value = "./.sandgate")]
    pub data_dir: PathBuf,
    /// Redis URL; when given, Redis replaces the embedded store.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    pub redis: Option<String>,
}

#[derive(Debug, Args)]
pub struct AuthArgs {
    /// Comma-separated session keys accepted from external webhook senders.
    #[arg(
        long,
        env = "SANDGATE_WEBHOOK_API_KEYS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub webhook_api_keys: Vec<String>,
    /// The runtime API key: as `X-API-Key` it reads every conversation.
    #[arg(long, env = "DEFAULT_API_KEY", hide_env_values = true)]
    pub default_api_key: Option<String>,
}

#[derive(Debug, Args)]
pub struct EdgeLimits {
    /// Largest accepted request body, in bytes; larger ones get 413.
    #[arg(long, env = "SANDGATE_BODY_LIMIT", default_value_t = sandgate_webhook_gw::DEFAULT_BODY_LIMIT,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=32 * 1024 * 1024))]
    pub body_limit: usize,
}

#[derive(Debug, Args)]
pub struct ShutdownArgs {
    /// Seconds in-flight requests get to finish after SIGTERM or SIGINT.
    #[arg(long = "shutdown-grace", env = "SANDGATE_SHUTDOWN_GRACE", default_value = "10",
          value_parser = |seconds: &str| seconds.parse::<u64>().map(Duration::from_secs))]
    pub grace: Duration,
}
