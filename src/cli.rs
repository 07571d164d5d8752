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
    /// Run only the model gateway's gRPC service.
    ModelGw(ModelGwArgs),
    /// Run only the REST edge, calling the gRPC services at the given URLs.
    Edge(EdgeArgs),
    /// Manage warm runtime configurations of a running Sandgate (spec 4.1).
    Admin(AdminClientArgs),
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

#[derive(Debug, Args)]
pub struct StoreArgs {
    /// Directory of the embedded store (used when no Redis URL is given).
    #[arg(long, env = "SANDGATE_DATA_DIR", default_value = "./.sandgate")]
    pub data_dir: PathBuf,
    /// Redis URL; when given, Redis replaces the embedded store. `redis://`, `rediss://`
    /// (TLS, checked against the system's roots or `--redis-ca-cert`), `redis+unix://`,
    /// `redis+sentinel://host:port[,host:port…]/<master>` (and `rediss+sentinel://`): the
    /// primary the sentinels name, followed through failovers;
    /// `redis+cluster://host:port[,host:port…]` (and `rediss+cluster://`): a Redis Cluster,
    /// learnt from the nodes named.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    pub redis: Option<String>,
    /// PEM file of the CA that signed the Redis server's certificate, trusted instead of
    /// the system's roots (a private CA).
    #[arg(long, env = "REDIS_CA_CERT")]
    pub redis_ca_cert: Option<PathBuf>,
    /// PEM file of a client certificate, for a Redis server that asks for one
    /// (`tls-auth-clients yes`); with `--redis-client-key`.
    #[arg(long, env = "REDIS_CLIENT_CERT", requires = "redis_client_key")]
    pub redis_client_cert: Option<PathBuf>,
    /// PEM file of the client certificate's private key.
    #[arg(long, env = "REDIS_CLIENT_KEY", requires = "redis_client_cert")]
    pub redis_client_key: Option<PathBuf>,
    /// Replicas that must have a write before it is acknowledged (Redis `WAIT`, within
    /// 1.5 s; else the write is answered 503 and its sender sends it again): with N ≥ 1,
    /// a write answered success survives the primary's loss. 0: acknowledged once the
    /// primary has it. On a cluster, N replicas of every master.
    #[arg(long, env = "REDIS_MIN_REPLICAS_ACK", default_value_t = 0, requires = "redis",
          value_parser = clap::value_parser!(u32).range(0..=16))]
    pub redis_min_replicas_ack: u32,
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

/// What the conversation catalog keeps.
#[derive(Debug, Args)]
pub struct CatalogArgs {
    /// The most agent-server events a conversation keeps; older ones are dropped as new
    /// ones arrive (counted in `sandgate_events_dropped_total`).
    #[arg(long, env = "SANDGATE_EVENTS_PER_CONVERSATION", default_value_t = 10_000,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub events_per_conversation: u32,
    /// How long agent-server events are kept, in seconds: older ones are never listed and
    /// are dropped by their conversation's next batch; a conversation that posts nothing
    /// for this long loses its events (on Redis, by key expiry).
    #[arg(long, env = "SANDGATE_EVENTS_MAX_AGE_SECONDS", default_value_t = 30 * 24 * 3600,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub events_max_age_seconds: u64,
}

/// Runtime management: admin login and warm runtime configurations.
#[derive(Debug, Args)]
pub struct AdminArgs {
    /// The admin password; without it every admin endpoint answers 403.
    #[arg(long, env = "ADMIN_PASSWORD", hide_env_values = true)]
    pub admin_password: Option<String>,
    /// HMAC key of admin tokens, at least 32 bytes (checked at start); shared by every
    /// replica. Without it a random key is used, valid only until this process restarts.
    #[arg(long, env = "JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,
    /// The most warm sandboxes one configuration may ask for (`count`); a save asking for
    /// more is refused, and no pool grows past it.
    #[arg(long, env = "WARM_POOL_MAX_SIZE", default_value_t = 100,
          value_parser = clap::value_parser!(i64).range(0..=100_000))]
    pub warm_pool_max_size: i64,
    /// The most warm sandboxes all configurations together may ask for.
    #[arg(long, env = "WARM_POOLS_MAX_TOTAL", default_value_t = 1000,
          value_parser = clap::value_parser!(i64).range(0..=1_000_000))]
    pub warm_pools_max_total: i64,
    /// The installer's warm runtime configurations (`{"count": N, "configs": [...]}`),
    /// re-read when it changes.
    #[arg(long, env = "WARM_RUNTIMES_FILE")]
    pub warm_runtimes_file: Option<PathBuf>,
    /// Overlay mode: saved configurations merge over the installer's instead of taking
    /// pool management over (`1`, `true` or `yes`).
    #[arg(long, env = "WARM_RUNTIME_CONFIG_OVERLAY", default_value = "false",
          action = clap::ArgAction::Set, value_parser = flag)]
    pub warm_runtime_config_overlay: bool,
    /// PBKDF2-HMAC-SHA256 iterations asked of login hashes.
    #[arg(long, env = "PBKDF2_ITERATIONS",
          default_value_t = sandgate_runtime_api::admin::login::DEFAULT_PBKDF2_ITERATIONS,
          value_parser = clap::value_parser!(u32).range(1_000..=10_000_000))]
    pub pbkdf2_iterations: u32,
    /// Admin challenges, and login attempts, each client address may make per window
    /// (counted apart, across every replica); past it, 429 with `Retry-After`. 0 turns
    /// the limit off.
    #[arg(long, env = "ADMIN_LOGIN_RATE",
          default_value_t = sandgate_runtime_api::admin::rate_limit::DEFAULT_LOGIN_RATE.attempts)]
    pub admin_login_rate: u32,
    /// Seconds of the login rate's window, which opens with a client's first attempt.
    #[arg(long, env = "ADMIN_LOGIN_RATE_WINDOW", default_value = "60", value_parser = seconds)]
    pub admin_login_rate_window: Duration,
    /// Judged admin logins (a live challenge answered, the hash checked) of the account
    /// per window of `ADMIN_LOGIN_RATE_WINDOW`, whatever their source: many addresses do
    /// not multiply the guesses. Past it, 429 for every client until the window ends. 0
    /// turns the bound off.
    #[arg(long, env = "ADMIN_LOGIN_ACCOUNT_RATE",
          default_value_t = sandgate_runtime_api::admin::rate_limit::DEFAULT_ACCOUNT_LOGIN_ATTEMPTS)]
    pub admin_login_account_rate: u32,
}

/// Sandboxes and their warm pools.
#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// Where sandboxes run: `local` (nothing runs: sandboxes live in the store, for
    /// trying the API out), `process` (each sandbox a process on this machine, under the
    /// data directory: the whole loop on one machine, see README) or `kubernetes`.
    #[arg(long, env = "SANDBOX_DRIVER", default_value = "local")]
    pub sandbox_driver: SandboxDriverKind,
    /// Namespace of the sandboxes' workloads (`kubernetes`).
    #[arg(long, env = "SANDBOX_NAMESPACE", default_value = "sandgate-sandboxes")]
    pub sandbox_namespace: String,
    /// Storage class of the sandboxes' volume claims (`kubernetes`); without it the
    /// cluster's default class.
    #[arg(long, env = "STORAGE_CLASS")]
    pub storage_class: Option<String>,
    /// Ephemeral storage requested per sandbox (`kubernetes`).
    #[arg(long, env = "EPHEMERAL_STORAGE_SIZE", default_value = "25Gi")]
    pub ephemeral_storage_size: String,
    /// The port the agent server listens on inside a sandbox (`kubernetes`); with
    /// `process`, the port sandbox commands name, rewritten to each sandbox's own.
    #[arg(long, env = "SANDBOX_PORT", default_value_t = 8000)]
    pub sandbox_port: u16,
    /// What sandbox pods may do (`kubernetes`), a Pod Security Standard level:
    /// `restricted` (no root, no capabilities; a start asking for user 0 or a FUSE mount
    /// is refused), `baseline` (root allowed) or `privileged` (FUSE S3 mounts run
    /// privileged). The sandbox namespace can enforce the same level.
    #[arg(long, env = "SANDBOX_POD_SECURITY", default_value = "restricted")]
    pub sandbox_pod_security: sandgate_runtime_api::sandboxes::kubernetes::PodSecurity,
    /// Ingress class of the sandboxes' ingresses (`kubernetes`); without it the default.
    #[arg(long, env = "SANDBOX_INGRESS_CLASS")]
    pub sandbox_ingress_class: Option<String>,
    /// TLS secret (in the sandbox namespace) of the sandboxes' ingresses, the wildcard
    /// certificate (`kubernetes`, with SSL on).
    #[arg(long, env = "SANDBOX_TLS_SECRET")]
    pub sandbox_tls_secret: Option<String>,
    /// A sandbox's host is `{runtime_id}{separator}{base}`.
    #[arg(long, env = "RUNTIME_BASE_URL", default_value = "runtime.localhost")]
    pub runtime_base_url: String,
    #[arg(long, env = "RUNTIME_URL_SEPARATOR", default_value = "-")]
    pub runtime_url_separator: String,
    /// The sandbox URL pattern the application is given (`https://{runtime_id}-runtime.<base
    /// domain>`); when set, it must match the URLs sandboxes get (checked at start).
    #[arg(long, env = "RUNTIME_URL_PATTERN")]
    pub runtime_url_pattern: Option<String>,
    /// `http://` sandbox URLs instead of `https://` (`1|true|yes`).
    #[arg(long, env = "RUNTIME_DISABLE_SSL", default_value = "true",
          action = clap::ArgAction::Set, value_parser = flag)]
    pub runtime_disable_ssl: bool,
    /// Seconds between two passes of the warm-pool reconciler (it also acts at once when
    /// a configuration changes or a claim empties a slot).
    #[arg(long, env = "RECONCILE_INTERVAL", default_value = "60", value_parser = seconds)]
    pub reconcile_interval: Duration,
    /// Seconds a sandbox may stay starting (an image that cannot be pulled, a container
    /// that cannot be created or keeps crashing, a pod no node takes) before it is in
    /// error, with the platform's reason.
    #[arg(long, env = "SANDBOX_START_TIMEOUT", default_value = "600", value_parser = seconds)]
    pub sandbox_start_timeout: Duration,
    /// Sandboxes the runtime API key may hold at once (starting or running; a paused one
    /// holds none): a start or resume past it answers 429. Unset, any number.
    #[arg(long, env = "MAX_RUNTIMES")]
    pub max_runtimes: Option<usize>,
    /// Starts and resumes the runtime API key may make per minute (and at once, after a
    /// quiet minute): more answer 429. Unset or 0, any number.
    #[arg(long, env = "SANDBOX_START_RATE")]
    pub sandbox_start_rate: Option<u32>,
    /// Seconds a paused sandbox may idle before it is deleted.
    #[arg(long, env = "RUNTIME_DEAD_SECONDS", default_value = "864000", value_parser = seconds)]
    pub runtime_dead_seconds: Duration,
    /// Key that sandboxes' session keys derive from (at least 32 bytes, checked at start;
    /// the same on every replica). Without it, one derived from JWT_SECRET.
    #[arg(long, env = "SANDBOX_KEY_SECRET", hide_env_values = true)]
    pub sandbox_key_secret: Option<String>,
    /// Seconds a `local` sandbox takes to go from starting to running.
    #[arg(long, env = "LOCAL_SANDBOX_START_SECONDS", default_value = "2", value_parser = seconds)]
    pub local_sandbox_start_seconds: Duration,
    /// Allocatable ephemeral storage of one sandbox node (a quantity, e.g. `200Gi`): when
    /// given, the warm pools are checked to fit the nodes (spec 8).
    #[arg(long, env = "NODE_EPHEMERAL_STORAGE")]
    pub node_ephemeral_storage: Option<String>,
    /// How many nodes run sandboxes, for the capacity check.
    #[arg(long, env = "SANDBOX_NODES", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub sandbox_nodes: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SandboxDriverKind {
    Local,
    Process,
    Kubernetes,
}

/// A boolean setting: `1|true|yes` or `0|false|no` (any case), or empty for false.
fn flag(value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" => Ok(true),
        "" | "0" | "false" | "no" => Ok(false),
        other => Err(format!("{other:?} is not 1/true/yes or 0/false/no")),
    }
}

#[derive(Debug, Args)]
pub struct AdminClientArgs {
    /// Base URL of Sandgate's REST edge, e.g. `http://127.0.0.1:8080`.
    #[arg(long, env = "RUNTIME_API_URL")]
    pub url: String,
    /// The admin password, for `save`, `delete`, and fetching the `default` API key.
    #[arg(long, env = "ADMIN_PASSWORD", hide_env_values = true)]
    pub admin_password: Option<String>,
    /// The API key for `list` and `template`; without it the `default` key is fetched
    /// through an admin login.
    #[arg(long, env = "API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Print the effective configurations as JSON.
    List,
    /// Print a configuration derived from NAME, with another image and count, for `save`.
    Template {
        name: String,
        #[arg(long)]
        image: String,
        #[arg(long)]
        count: u32,
    },
    /// Save the configuration read from stdin as NAME.
    Save { name: String },
    /// Delete the saved configuration NAME.
    Delete { name: String },
}

#[derive(Debug, Args)]
pub struct EdgeLimits {
    /// Largest accepted request body, in bytes; larger ones get 413.
    #[arg(long, env = "SANDGATE_BODY_LIMIT", default_value_t = sandgate_edge::DEFAULT_BODY_LIMIT,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=32 * 1024 * 1024))]
    pub body_limit: usize,
    /// Largest accepted request body on the model gateway's LLM routes (chat completions,
    /// responses, messages, embeddings, completions), in bytes: images travel in them.
    #[arg(long, env = "SANDGATE_GATEWAY_BODY_LIMIT", default_value_t = sandgate_edge::DEFAULT_GATEWAY_BODY_LIMIT,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=60 * 1024 * 1024))]
    pub gateway_body_limit: usize,
    /// Proxies in front of the edge (comma-separated CIDRs or addresses) whose
    /// `X-Forwarded-For` names the client, for per-client limits; from any other peer,
    /// the peer is the client. Without it, behind a proxy every client has its address.
    #[arg(long, env = "SANDGATE_TRUSTED_PROXIES", value_delimiter = ',', value_parser = trusted_proxy)]
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// A key the edge's `/metrics` asks of its scrapers (`Authorization: Bearer <key>`);
    /// without it, `/metrics` is open.
    #[arg(long, env = "METRICS_API_KEY", hide_env_values = true)]
    pub metrics_api_key: Option<String>,
}

/// A CIDR (`10.0.0.0/8`) or a single address.
fn trusted_proxy(value: &str) -> Result<ipnet::IpNet, String> {
    let value = value.trim();
    value
        .parse::<ipnet::IpNet>()
        .or_else(|_| value.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("{value:?} is neither a CIDR (10.0.0.0/8) nor an address"))
}

/// What the HTTP server allows its clients, and how it stops.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Seconds in-flight requests get to finish after SIGTERM or SIGINT. Connections with
    /// no request in flight close at once.
    #[arg(long = "shutdown-grace", env = "SANDGATE_SHUTDOWN_GRACE", default_value = "10",
          value_parser = |seconds: &str| seconds.parse::<u64>().map(Duration::from_secs))]
    pub grace: Duration,
    /// Most connections open at once. At the cap, a new connection displaces the one
    /// that has waited longest with no request in flight. Lowered to fit the open-file
    /// limit, which is raised to its hard limit at start.
    #[arg(long, env = "SANDGATE_MAX_CONNECTIONS", default_value_t = crate::http_server::Limits::default().max_connections,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_connections: usize,
    /// Seconds a client has to send a request's headers once it has begun.
    #[arg(long, env = "SANDGATE_HEADER_READ_TIMEOUT", default_value = "30", value_parser = seconds)]
    pub header_read_timeout: Duration,
    /// Seconds a connection may stay open with no request in flight. Keep it above the
    /// upstream keep-alive of the proxy in front (nginx and cloud load balancers: 60).
    #[arg(long, env = "SANDGATE_IDLE_TIMEOUT", default_value = "75", value_parser = seconds)]
    pub idle_timeout: Duration,
    /// Seconds a request body may send nothing before the request fails.
    #[arg(long, env = "SANDGATE_BODY_IDLE_TIMEOUT", default_value = "60", value_parser = seconds)]
    pub body_idle_timeout: Duration,
}

impl ServerArgs {
    /// The servers' settings, once per process: it raises the open-file limit and fits
    /// the connection cap to it.
    pub fn config(&self) -> crate::http_server::Config {
        crate::http_server::Config {
            grace: self.grace,
            limits: crate::http_server::Limits {
                max_connections: crate::http_server::fit_connections_to_descriptors(
                    self.max_connections,
                ),
                header_read_timeout: self.header_read_timeout,
                idle_timeout: self.idle_timeout,
                body_idle_timeout: self.body_idle_timeout,
            },
        }
    }
}

/// Which service's settings `check-config` checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckedService {
    /// Everything `serve` runs: the runtime API and the model gateway.
    Serve,
    RuntimeApi,
    ModelGw,
    Edge,
}

#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// The service whose settings these are; each is checked for what it runs.
    #[arg(long, default_value = "serve")]
    pub service: CheckedService,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub auth: AuthArgs,
    #[command(flatten)]
    pub admin: AdminArgs,
    #[command(flatten)]
    pub sandboxes: SandboxArgs,
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// The edge's runtime API URL (`--service edge`).
    #[arg(long, env = "SANDGATE_RUNTIME_API_URL")]
    pub runtime_api: Option<String>,
    /// The edge's model gateway URL (`--service edge`).
    #[arg(long, env = "SANDGATE_MODEL_GW_URL")]
    pub model_gw: Option<String>,
    /// Also connect to the store as configured (Redis: URL, TLS, password) and report
    /// whether it answers.
    #[arg(long)]
    pub connect: bool,
}

#[derive(Debug, Args)]
pub struct GenSecretsArgs {
    /// Namespace of the Secrets: the application's.
    #[arg(long, default_value = "sandgate")]
    pub namespace: String,
}

#[derive(Debug, Args)]
pub struct SupportBundleArgs {
    /// Base URL of the server that builds the bundle: `serve`'s (e.g.
    /// `http://127.0.0.1:8080`), or runtime-api's metrics listener
    /// (`http://127.0.0.1:9090`, from inside its pod).
    #[arg(long, env = "RUNTIME_API_URL")]
    pub url: String,
    /// The admin password, to log in.
    #[arg(long, env = "ADMIN_PASSWORD", hide_env_values = true)]
    pub admin_password: Option<String>,
    /// Sign the admin token with JWT_SECRET instead of logging in: for runtime-api's
    /// metrics listener, which serves no login (run inside its pod, which has the key).
    #[arg(long)]
    pub sign_with_jwt_secret: bool,
    #[arg(long, env = "JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,
    /// Where to write the archive; `-` for standard output. Default:
    /// `sandgate-support-bundle-<unix time>.tar.gz` in the current directory.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Write the archive's files as one JSON object (file name → text) instead of the
    /// archive: for `kubectl support-bundle`, which stores what it collects as text (and
    /// runs its own redactors over it).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["http", "grpc"])))]
pub struct HealthCheckArgs {
    /// GET this URL; healthy on a 2xx answer (e.g. `http://127.0.0.1:8080/health`).
    #[arg(long)]
    pub http: Option<String>,
    /// Call grpc.health.v1 Check (service "") at this address; healthy on SERVING (e.g.
    /// `http://127.0.0.1:50051`).
    #[arg(long)]
    pub grpc: Option<String>,
    /// Seconds the whole check may take.
    #[arg(long, default_value = "3", value_parser = seconds)]
    pub timeout: Duration,
}
