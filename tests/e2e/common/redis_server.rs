//! A throwaway `redis-server` on a free port, stopped when dropped.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub struct RedisServer {
    port: u16,
    child: Child,
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
        for _ in 0..10 {
            if let Some(server) = Self::try_start(free_port()).await {
                return server;
            }
        }
        panic!("redis-server did not start; is it installed? (.ci/run installs it)");
    }

    async fn try_start(port: u16) -> Option<Self> {
        let mut child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
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
                return Some(Self { port, child });
            }
        }
        drop(child.kill().await);
        None
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
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
}
