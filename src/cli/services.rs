//! The command line's settings of what the services stand on: the store, authentication,
//! the conversation catalog, runtime management and the sandboxes with their warm pools.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{seconds, seconds_or_zero};

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
    /// Keep the ledger (docs/runtime-api-and-pools.md): what each conversation, team,
    /// user, key and model cost, counted as it happens. `off`: nothing is counted nor
    /// read back (the ledger's reads answer empty), for a deployment that bills
    /// elsewhere; set it alike on every service.
    #[arg(long, env = "SANDGATE_LEDGER", default_value = "on", value_parser = ["on", "off"])]
    pub ledger: String,
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
    /// New conversations each sender (a webhook key, a sandbox's session key) may create
    /// per window, counted across every replica; past it, 429 with `Retry-After` for a
    /// conversation it has not created yet, while its existing ones take deliveries. 0
    /// turns the bound off.
    #[arg(long, env = "WEBHOOK_NEW_CONVERSATIONS_RATE",
          default_value_t = sandgate_runtime_api::conversations::creation_rate::DEFAULT_CREATION_RATE.conversations)]
    pub webhook_new_conversations_rate: u32,
    /// Seconds of that window, which opens with a sender's first new conversation.
    #[arg(long, env = "WEBHOOK_NEW_CONVERSATIONS_WINDOW", default_value = "60",
          value_parser = seconds)]
    pub webhook_new_conversations_window: Duration,
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
    /// not multiply the guesses. Past it, a client (an address, an IPv6 /64) that has
    /// given a wrong proof in the window gets 429 unjudged until the window ends; one that
    /// has not is still judged, so strangers cannot lock the admin out. 0 turns the bound
    /// off.
    #[arg(long, env = "ADMIN_LOGIN_ACCOUNT_RATE",
          default_value_t = sandgate_runtime_api::admin::rate_limit::DEFAULT_ACCOUNT_LOGIN_ATTEMPTS)]
    pub admin_login_account_rate: u32,
}

/// Sandboxes and their warm pools.
#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// Where sandboxes run: `local` (nothing runs: sandboxes live in the store, for
    /// trying the API out), `process` (each sandbox a process on this machine, under the
    /// data directory: the whole loop on one machine, see docs/runtime-api-and-pools.md)
    /// or `kubernetes`.
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
    /// Directories of this machine every sandbox sees read-only at the same path
    /// (`process`, comma-separated), bound with Sandgate's rights: for an installation a
    /// sandbox's uid could not reach on its own, such as an interpreter under `/root`.
    /// What lies inside still answers to the sandbox's uid.
    #[arg(long, env = "SANDBOX_READ_ONLY_PATHS", value_delimiter = ',')]
    pub sandbox_read_only_paths: Vec<PathBuf>,
    /// Where a `process` sandbox's connections may go out, when it has a network of its
    /// own (Sandgate as root, with pasta): `internet`, every address but IANA's
    /// special-purpose blocks (private networks, link-local and the metadata service, this
    /// machine), as the chart's `sandboxEgress.internet`; or `none`, only the ports
    /// forwarded to this machine's loopback.
    #[arg(long, env = "SANDBOX_EGRESS", default_value = "internet")]
    pub sandbox_egress: sandgate_runtime_api::sandboxes::process::Egress,
    /// Whether the `process` driver starts on a machine that cannot give each sandbox a
    /// view of its own (bubblewrap) and a network of its own (pasta): `required` (it
    /// refuses to start, saying what is missing: without them a sandbox reads Sandgate's
    /// files, its store among them, and reaches this machine's loopback services) or
    /// `best-effort` (it starts and says what sandboxes lack; for code you trust).
    #[arg(long, env = "SANDBOX_ISOLATION", default_value = "required")]
    pub sandbox_isolation: sandgate_runtime_api::sandboxes::process_isolation::Requirement,
    /// Ports of this machine's loopback a `process` sandbox reaches at the same port of its
    /// own loopback, beside Sandgate's own (`serve`) and the webhooks its start names:
    /// `PORT` or `INSIDE:OUTSIDE`, comma-separated; for an edge run apart from the runtime
    /// API.
    #[arg(long, env = "SANDBOX_FORWARD_PORTS", value_delimiter = ',', value_parser = forward)]
    pub sandbox_forward_ports: Vec<(u16, u16)>,
    /// `serve`: how a `process` sandbox in a network of its own reaches Sandgate's port, a
    /// listener of its own (its door: the edge without `/metrics`).
    #[arg(skip)]
    pub sandbox_doors: Option<sandgate_runtime_api::sandboxes::process::Doors>,
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
    /// What an hour of a running sandbox costs (at resource factor 1; a sandbox of factor
    /// 2 costs twice), in the ledger's currency: its `sandbox_cost`. Unset, 0.
    #[arg(long, env = "SANDBOX_HOUR_PRICE", value_parser = price)]
    pub sandbox_hour_price: Option<f64>,
    /// The same, for an hour of a paused sandbox (its storage kept, no compute).
    #[arg(long, env = "SANDBOX_PAUSED_HOUR_PRICE", value_parser = price)]
    pub sandbox_paused_hour_price: Option<f64>,
    #[command(flatten)]
    pub idle: IdleArgs,
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

/// Idle pause: the runtime API pauses idle sandboxes, and the model gateway (in its own
/// process too) marks the sandboxes of the calls it relays active, so both read it.
#[derive(Debug, Args)]
pub struct IdleArgs {
    /// Seconds a running sandbox whose conversation shows no activity (no webhook, no
    /// event batch, no gateway call with its session) runs before it is paused; 0, never.
    /// The same on every replica and on the model gateway.
    #[arg(long, env = "RUNTIME_IDLE_SECONDS", default_value = "1200", value_parser = seconds_or_zero)]
    pub runtime_idle_seconds: Duration,
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

/// `PORT` or `INSIDE:OUTSIDE`.
fn forward(text: &str) -> Result<(u16, u16), String> {
    let port = |part: &str| {
        part.trim()
            .parse::<u16>()
            .ok()
            .filter(|port| *port > 0)
            .ok_or_else(|| format!("{part:?} is not a port"))
    };
    match text.split_once(':') {
        Some((inside, outside)) => Ok((port(inside)?, port(outside)?)),
        None => port(text).map(|port| (port, port)),
    }
}

/// A price: a finite number, not negative.
fn price(value: &str) -> Result<f64, String> {
    match value.trim().parse::<f64>() {
        Ok(price) if price.is_finite() && price >= 0.0 => Ok(price),
        _ => Err(format!("{value:?} is not a price (a number, 0 or more)")),
    }
}
