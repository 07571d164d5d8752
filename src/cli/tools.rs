//! The command line of the tools around a running install: `admin`, `check-config`,
//! `gen-secrets`, `support-bundle` and `health-check`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::{AdminArgs, AuthArgs, GatewayArgs, SandboxArgs, StoreArgs, seconds};

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
    /// Print the audit log's newest entries, one JSON object a line, newest first.
    Audit {
        /// How many entries, at most.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
}

#[derive(Debug, Args)]
pub struct LedgerArgs {
    /// Base URL of Sandgate's REST edge, e.g. `http://127.0.0.1:8080`.
    #[arg(long, env = "RUNTIME_API_URL")]
    pub url: String,
    /// The admin password: the ledger is read with the admin's token.
    #[arg(long, env = "ADMIN_PASSWORD", hide_env_values = true)]
    pub admin_password: Option<String>,
    /// The first day (UTC, `2026-11-01`); without it, 30 days before `--to`.
    #[arg(long, global = true)]
    pub from: Option<String>,
    /// The last day, included; without it, today.
    #[arg(long, global = true)]
    pub to: Option<String>,
    #[command(subcommand)]
    pub command: LedgerCommand,
}

#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Print one conversation's ledger as JSON.
    Conversation { id: String },
    /// Print the ledger summed by team, user, key, model, conversation, day or a tag's
    /// value: every row, as CSV (a header line, then a row a line).
    Rollup {
        /// `team`, `user`, `key`, `model`, `conversation`, `day`, or `tag:<key>` (a row
        /// per value of the tag `<key>`, as `tag:project`).
        #[arg(long, value_parser = rollup_by)]
        by: String,
    },
}

/// A rollup's `--by`: one of the groups, or `tag:` and a tag's key.
fn rollup_by(by: &str) -> Result<String, String> {
    let groups = ["team", "user", "key", "model", "conversation", "day"];
    match by.strip_prefix("tag:") {
        Some(key) if !key.is_empty() => Ok(by.to_owned()),
        _ if groups.contains(&by) => Ok(by.to_owned()),
        _ => Err(format!("one of {}, or tag:<key>", groups.join(", "))),
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
    /// A `/start` body (JSON, as the app server sends it) to hold against the installer's
    /// warm configurations: names the fields in which it differs from each, and fails
    /// when none would be claimed.
    #[arg(long)]
    pub start_request: Option<PathBuf>,
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
