//! The command line's settings of the HTTP server: what the edge accepts and from whom,
//! and how the server treats its connections and stops.

use std::time::Duration;

use clap::Args;

use super::seconds;

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
    /// Serve the operator console at `/console`: pages in the browser that sign in with
    /// the admin password or the master key (docs/console.md).
    #[arg(long, env = "SANDGATE_CONSOLE")]
    pub console: bool,
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
            threads: crate::http_server::Threads::Own,
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
