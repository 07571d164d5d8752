//! A Sentinel group around a primary: its replicas and three sentinels on free ports,
//! and the group's URL.

use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::{RedisServer, free_port};

/// The name the sentinels know the primary by.
pub const SENTINEL_MASTER: &str = "mymaster";

/// The replicas and sentinels of a Sentinel group around a primary.
pub(super) struct Sentinels {
    /// Kept running for as long as the group.
    _replicas: Vec<RedisServer>,
    nodes: Vec<(u16, Box<Child>)>,
    /// The sentinels' configuration files, which they rewrite.
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// A primary in a Sentinel group on free ports: `replicas` replicas and three
    /// sentinels watching it as `mymaster` (down after 1 s: a test wants its failover
    /// quick). Its URL is the group's. With `failover`, returns once the sentinels know the
    /// replicas and each other, as a failover needs; else once they monitor the primary.
    pub async fn start_sentinel(replicas: usize, failover: bool) -> Self {
        let mut primary = Self::start().await;
        let mut replica_servers = Vec::with_capacity(replicas);
        for _ in 0..replicas {
            let replica = Self::start().await;
            replica.replicate(&primary).await;
            replica_servers.push(replica);
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let mut nodes = Vec::new();
        for index in 0..3 {
            nodes.push(spawn_sentinel(dir.path(), index, primary.port).await);
        }
        let sentinels = Sentinels {
            _replicas: replica_servers,
            nodes,
            _dir: dir,
        };
        if failover {
            sentinels.wait_until_known(replicas).await;
        }
        primary.sentinels = Some(Box::new(sentinels));
        primary
    }
}

async fn spawn_sentinel(dir: &Path, index: usize, primary: u16) -> (u16, Box<Child>) {
    for _ in 0..10 {
        let port = free_port();
        let config = dir.join(format!("sentinel-{index}.conf"));
        std::fs::write(
            &config,
            format!(
                "port {port}\nbind 127.0.0.1\nsentinel monitor {SENTINEL_MASTER} 127.0.0.1 {primary} 2\n\
                 sentinel down-after-milliseconds {SENTINEL_MASTER} 1000\n\
                 sentinel failover-timeout {SENTINEL_MASTER} 4000\n\
                 sentinel parallel-syncs {SENTINEL_MASTER} 2\n"
            ),
        )
        .expect("write the sentinel's configuration");
        let mut child = Command::new("redis-server")
            .arg(&config)
            .args(["--sentinel", "--logfile", "", "--loglevel", "notice"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server --sentinel can be spawned");
        let Some(stdout) = child.stdout.take() else {
            continue;
        };
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("+monitor master") {
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                return (port, Box::new(child));
            }
        }
        drop(child.kill().await);
    }
    panic!("no sentinel started");
}

impl Sentinels {
    /// Waits until every sentinel knows the primary's `replicas` replicas and the other
    /// sentinels: a failover needs them.
    async fn wait_until_known(&self, replicas: usize) {
        // A deadline, not a count of polls: on a machine the whole suite loads, each
        // poll's replies take longer (as a cluster's forming, `cluster.rs`).
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(90);
        while tokio::time::Instant::now() < deadline {
            let mut ready = true;
            for (port, _) in &self.nodes {
                let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).expect("url");
                let Ok(mut connection) = client.get_multiplexed_async_connection().await else {
                    ready = false;
                    break;
                };
                let count = |answer: redis::RedisResult<Vec<redis::Value>>| {
                    answer.map_or(0, |list| list.len())
                };
                let known = count(
                    redis::cmd("SENTINEL")
                        .arg("replicas")
                        .arg(SENTINEL_MASTER)
                        .query_async(&mut connection)
                        .await,
                );
                let others = count(
                    redis::cmd("SENTINEL")
                        .arg("sentinels")
                        .arg(SENTINEL_MASTER)
                        .query_async(&mut connection)
                        .await,
                );
                if known < replicas || others < 2 {
                    ready = false;
                    break;
                }
            }
            if ready {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("the sentinels did not learn the group in 90 s");
    }

    /// `redis+sentinel://…/mymaster`.
    pub(super) fn url(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|(port, _)| format!("127.0.0.1:{port}"))
            .collect();
        format!("redis+sentinel://{}/{SENTINEL_MASTER}", nodes.join(","))
    }
}
