//! A throwaway `redis-server` on a free port, stopped when dropped.
//!
//! This file holds one server (start, replicate, URL, stop and restart); a server's TLS
//! certificates (`tls.rs`), a Sentinel group around it (`sentinel.rs`) and a cluster of
//! servers (`cluster.rs`) are files of their own.

mod cluster;
mod sentinel;
mod tls;

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

use sandgate_store::RedisTls;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use sentinel::Sentinels;
use tls::Tls;

pub struct RedisServer {
    port: u16,
    /// For a server that speaks TLS only: its certificates, and the CA clients trust.
    tls: Option<Arc<Tls>>,
    /// Boxed: a `Backend` holds a server, and stays small.
    child: Box<Child>,
    /// Its data directory, kept across `stop` and `restart`. Every server has one, so
    /// that nothing it writes (a replica's copy of its primary's data) lands in the
    /// directory the tests run in.
    dir: tempfile::TempDir,
    /// Whether it keeps what it acknowledged: an append-only file fsynced on every write.
    durable: bool,
    /// The password clients must give (`requirepass`), if any.
    password: Option<String>,
    /// With a Sentinel group around this server (the primary): its replicas and
    /// sentinels. Its URL is then the group's, `redis+sentinel://…`.
    sentinels: Option<Box<Sentinels>>,
    /// A cluster node's bus port; with `others`, this server is a cluster's first master.
    cluster_port: Option<u16>,
    /// The other masters of this server's cluster. Its URL is then the cluster's,
    /// `redis+cluster://…`.
    others: Vec<RedisServer>,
    /// The replicas of the cluster's masters, kept running for as long as the cluster.
    cluster_replicas: Vec<RedisServer>,
}

/// A port nobody listens on right now (another process may take it before Redis does;
/// `start` then tries again).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

impl RedisServer {
    pub async fn start() -> Self {
        Self::start_on_free_port(false, None).await
    }

    /// A server that keeps what it acknowledged: `--appendonly yes --appendfsync always`
    /// in a data directory of its own, so that after `stop` (a crash) and `restart` every
    /// write it answered is still there.
    pub async fn start_durable() -> Self {
        Self::start_on_free_port(true, None).await
    }

    /// A server that refuses clients without `password` (its URL carries it).
    pub async fn start_with_password(password: &str) -> Self {
        Self::start_on_free_port(false, Some(password.to_owned())).await
    }

    /// A server that speaks TLS only (`rediss://`), with a certificate for 127.0.0.1
    /// issued by a CA of its own; with `client_auth`, it also refuses clients without a
    /// certificate from that CA.
    pub async fn start_tls(client_auth: bool) -> Self {
        Self::start_with(false, None, Some(Arc::new(Tls::issue(client_auth)))).await
    }

    async fn start_on_free_port(durable: bool, password: Option<String>) -> Self {
        Self::start_with(durable, password, None).await
    }

    async fn start_with(durable: bool, password: Option<String>, tls: Option<Arc<Tls>>) -> Self {
        Self::start_node(durable, password, tls, false).await
    }

    async fn start_node(
        durable: bool,
        password: Option<String>,
        tls: Option<Arc<Tls>>,
        cluster: bool,
    ) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        for _ in 0..10 {
            let port = free_port();
            let cluster_port = cluster.then(free_port);
            if let Some(child) = Self::spawn(
                port,
                dir.path(),
                durable,
                password.as_deref(),
                tls.as_deref(),
                cluster_port,
            )
            .await
            {
                return Self {
                    port,
                    tls,
                    child,
                    dir,
                    durable,
                    password,
                    sentinels: None,
                    cluster_port,
                    others: Vec::new(),
                    cluster_replicas: Vec::new(),
                };
            }
        }
        panic!("redis-server did not start; is it installed? (.ci/run installs it)");
    }

    async fn spawn(
        port: u16,
        dir: &Path,
        durable: bool,
        password: Option<&str>,
        tls: Option<&Tls>,
        cluster_port: Option<u16>,
    ) -> Option<Box<Child>> {
        let mut command = Command::new("redis-server");
        match tls {
            None => command.args(["--port", &port.to_string()]),
            Some(tls) => command
                .args(["--port", "0", "--tls-port", &port.to_string()])
                .arg("--tls-cert-file")
                .arg(tls.path("server.pem"))
                .arg("--tls-key-file")
                .arg(tls.path("server.key"))
                .arg("--tls-ca-cert-file")
                .arg(tls.path("ca.pem"))
                .args([
                    "--tls-auth-clients",
                    if tls.client_auth { "yes" } else { "no" },
                ]),
        };
        command.args(["--bind", "127.0.0.1", "--save", ""]);
        if let Some(cluster_port) = cluster_port {
            command
                .args(["--cluster-enabled", "yes", "--cluster-port"])
                .arg(cluster_port.to_string())
                .arg("--cluster-config-file")
                .arg(dir.join("nodes.conf"))
                .args(["--cluster-node-timeout", "2000"])
                // Over TLS, the cluster bus and replication too.
                .args(if tls.is_some() {
                    ["--tls-cluster", "yes", "--tls-replication", "yes"]
                } else {
                    ["--tls-cluster", "no", "--tls-replication", "no"]
                })
                // A replica is served at once, not 5 s later.
                .args(["--repl-diskless-sync-delay", "0"]);
        }
        if let Some(password) = password {
            command.args(["--requirepass", password]);
        }
        command.arg("--dir").arg(dir);
        if durable {
            command.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            command.args(["--appendonly", "no"]);
        }
        let mut child = command
            .args(["--logfile", "", "--loglevel", "notice"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server can be spawned");
        let mut lines = BufReader::new(child.stdout.take()?).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("Ready to accept connections") {
                // Keep draining its output so the server never blocks on a full pipe.
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                return Some(Box::new(child));
            }
        }
        drop(child.kill().await);
        None
    }

    /// Makes this server a replica of `primary` and waits until it has synchronised.
    pub async fn replicate(&self, primary: &RedisServer) {
        let mut primary_connection = primary.connection().await;
        // A primary waits 5 s by default for more replicas before it sends its data.
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("repl-diskless-sync-delay")
            .arg(0)
            .query_async::<()>(&mut primary_connection)
            .await
            .expect("CONFIG SET");
        let mut connection = self.connection().await;
        redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(primary.port)
            .query_async::<()>(&mut connection)
            .await
            .expect("REPLICAOF");
        let listed = format!("port={},state=online", self.port);
        // A deadline, not a count of polls: on a machine the whole suite loads, each
        // poll's replies take longer (as a cluster's forming, `cluster.rs`).
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(90);
        while tokio::time::Instant::now() < deadline {
            // A server busy sending its data may answer INFO past the client's response
            // timeout: that is "not yet", not a failure.
            let info: Result<String, _> = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut primary_connection)
                .await;
            let mine: Result<String, _> = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut connection)
                .await;
            if let (Ok(info), Ok(mine)) = (info, mine)
                && info.contains(&listed)
                && mine.contains("master_link_status:up")
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("the replica did not synchronise in 90 s");
    }

    /// Its URL: `redis+sentinel://…` with a Sentinel group, `redis+cluster://…` for a
    /// cluster, else the server's own.
    pub fn url(&self) -> String {
        if let Some(sentinels) = &self.sentinels {
            return sentinels.url();
        }
        if !self.others.is_empty() {
            let nodes: Vec<String> = std::iter::once(self)
                .chain(&self.others)
                .map(|node| format!("127.0.0.1:{}", node.port))
                .collect();
            let scheme = if self.tls.is_some() {
                "rediss+cluster"
            } else {
                "redis+cluster"
            };
            return format!("{scheme}://{}", nodes.join(","));
        }
        self.direct_url()
    }

    /// The server's own URL, whatever names it to Sandgate.
    fn direct_url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        match &self.password {
            Some(password) => format!("{scheme}://:{password}@127.0.0.1:{}/", self.port),
            None => format!("{scheme}://127.0.0.1:{}/", self.port),
        }
    }

    /// What a client needs beyond the URL: the server's CA, and a client certificate
    /// when the server asks for one.
    pub fn tls(&self) -> RedisTls {
        self.tls.as_deref().map(Tls::client).unwrap_or_default()
    }

    /// The flags that give `sandgate` what [`Self::tls`] gives a client.
    pub fn tls_args(&self) -> Vec<String> {
        let Some(tls) = &self.tls else {
            return Vec::new();
        };
        let mut args = vec![
            "--redis-ca-cert".to_owned(),
            tls.path("ca.pem").display().to_string(),
        ];
        if tls.client_auth {
            args.extend([
                "--redis-client-cert".to_owned(),
                tls.path("client.pem").display().to_string(),
                "--redis-client-key".to_owned(),
                tls.path("client.key").display().to_string(),
            ]);
        }
        args
    }

    /// A plain connection, to look at what Sandgate stored.
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        let client = self.tls().client(&self.direct_url());
        client
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the test redis")
    }

    /// A plain connection to each server that holds data: the server, or every master of
    /// a cluster.
    pub async fn node_connections(&self) -> Vec<redis::aio::MultiplexedConnection> {
        let mut connections = vec![self.connection().await];
        for node in &self.others {
            connections.push(node.connection().await);
        }
        connections
    }

    /// How long clients may still be served once this server is killed: none for one
    /// server; a cluster's other masters serve their slots until they judge it failed
    /// (`cluster-node-timeout`, 2 s here), and then refuse every call.
    pub fn failure_detection(&self) -> std::time::Duration {
        if self.others.is_empty() {
            std::time::Duration::ZERO
        } else {
            std::time::Duration::from_secs(10)
        }
    }

    /// Stops the server at once (a crash, as far as clients can tell).
    pub async fn kill(&mut self) {
        drop(self.child.kill().await);
    }

    /// Crashes a durable server (SIGKILL: nothing is flushed at exit, so only what it
    /// fsynced before answering survives) and waits until it is gone.
    pub async fn stop(&mut self) {
        assert!(self.durable, "only a durable server can restart");
        drop(self.child.kill().await);
        drop(self.child.wait().await);
    }

    /// Starts a stopped durable server again, on the same port and data directory. The
    /// port was free while it was down: another process may take it meanwhile, so this
    /// retries for a while before giving up.
    pub async fn restart(&mut self) {
        assert!(self.durable, "only a durable server can restart");
        for _ in 0..50 {
            if let Some(child) = Self::spawn(
                self.port,
                self.dir.path(),
                true,
                self.password.as_deref(),
                self.tls.as_deref(),
                self.cluster_port,
            )
            .await
            {
                self.child = child;
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("redis-server did not restart on port {}", self.port);
    }
}
