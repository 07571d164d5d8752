//! A throwaway `redis-server` on a free port, stopped when dropped.

use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub struct RedisServer {
    port: u16,
    /// Boxed: a `Backend` holds a server, and stays small.
    child: Box<Child>,
    /// For a durable server: its data directory (append-only file fsynced on every write),
    /// kept across `stop` and `restart`.
    durable: Option<tempfile::TempDir>,
    /// The password clients must give (`requirepass`), if any.
    password: Option<String>,
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
        Self::start_on_free_port(None, None).await
    }

    /// A server that keeps what it acknowledged: `--appendonly yes --appendfsync always`
    /// in a data directory of its own, so that after `stop` (a crash) and `restart` every
    /// write it answered is still there.
    pub async fn start_durable() -> Self {
        Self::start_on_free_port(Some(tempfile::tempdir().expect("temp dir")), None).await
    }

    /// A server that refuses clients without `password` (its URL carries it).
    pub async fn start_with_password(password: &str) -> Self {
        Self::start_on_free_port(None, Some(password.to_owned())).await
    }

    async fn start_on_free_port(
        durable: Option<tempfile::TempDir>,
        password: Option<String>,
    ) -> Self {
        for _ in 0..10 {
            let port = free_port();
            let data_dir = durable.as_ref().map(|dir| dir.path());
            if let Some(child) = Self::spawn(port, data_dir, password.as_deref()).await {
                return Self {
                    port,
                    child,
                    durable,
                    password,
                };
            }
        }
        panic!("redis-server did not start; is it installed? (.ci/run installs it)");
    }

    async fn spawn(
        port: u16,
        data_dir: Option<&Path>,
        password: Option<&str>,
    ) -> Option<Box<Child>> {
        let mut command = Command::new("redis-server");
        command.args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ]);
        if let Some(password) = password {
            command.args(["--requirepass", password]);
        }
        match data_dir {
            Some(dir) => command
                .args(["--appendonly", "yes", "--appendfsync", "always", "--dir"])
                .arg(dir),
            None => command.args(["--appendonly", "no"]),
        };
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

    pub fn url(&self) -> String {
        match &self.password {
            Some(password) => format!("redis://:{password}@127.0.0.1:{}/", self.port),
            None => format!("redis://127.0.0.1:{}/", self.port),
        }
    }

    /// A plain connection, to look at what Sandgate stored.
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the test redis")
    }

    /// Stops the server at once (a crash, as far as clients can tell).
    pub async fn kill(&mut self) {
        drop(self.child.kill().await);
    }

    /// Crashes a durable server (SIGKILL: nothing is flushed at exit, so only what it
    /// fsynced before answering survives) and waits until it is gone.
    pub async fn stop(&mut self) {
        assert!(self.durable.is_some(), "only a durable server can restart");
        drop(self.child.kill().await);
        drop(self.child.wait().await);
    }

    /// Starts a stopped durable server again, on the same port and data directory. The
    /// port was free while it was down: another process may take it meanwhile, so this
    /// retries for a while before giving up.
    pub async fn restart(&mut self) {
        let data_dir = self
            .durable
            .as_ref()
            .map(|dir| dir.path().to_owned())
            .expect("only a durable server can restart");
        for _ in 0..50 {
            if let Some(child) =
                Self::spawn(self.port, Some(&data_dir), self.password.as_deref()).await
            {
                self.child = child;
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("redis-server did not restart on port {}", self.port);
    }
}
