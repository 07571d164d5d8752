//! What the load benchmarks share: processes started and read for readiness, a
//! `redis-server` on a free port, and their settings from the environment. The closed-loop
//! load generator is `closed_loop.rs`, the admin login `admin.rs`, the fake LLM provider
//! `upstream.rs`, the builds to compare `binaries.rs`: modules a benchmark includes when it
//! uses them.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Starts `command` and returns once a line of its output contains `ready`, with what
/// follows `ready` on that line. Later output is drained so the process never blocks.
pub async fn spawn_listening(mut command: Command, ready: &str) -> (Child, String) {
    let mut child = command
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    // redis-server logs to stdout; Sandgate to stderr.
    let stream: Box<dyn tokio::io::AsyncRead + Unpin + Send> =
        if ready.contains("Ready") || ready.contains("REPLICA") {
            Box::new(child.stdout.take().expect("stdout"))
        } else {
            Box::new(child.stderr.take().expect("stderr"))
        };
    let mut lines = BufReader::new(stream).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some((_, rest)) = line.split_once(ready) {
            let found = rest.trim().to_owned();
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return (child, found);
        }
    }
    panic!("{command:?} exited before it was ready");
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// `redis-server` on `port`, keeping nothing on disk. Its working directory is a new empty
/// one: a `dump.rdb` left where it runs would be loaded at start, and would let a replica
/// resume from it instead of synchronising afresh.
pub fn redis_command(port: u16) -> Command {
    let dir = tempfile::Builder::new()
        .prefix("sandgate-bench-redis")
        .tempdir()
        .expect("temp dir")
        .keep();
    let mut redis = Command::new("redis-server");
    redis
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--logfile", ""])
        .arg("--dir")
        .arg(dir);
    redis
}

/// A `redis-server` of its own on a free port, keeping nothing on disk; its URL.
pub async fn redis() -> (Child, String) {
    let port = free_port();
    let mut redis = redis_command(port);
    // A replica, when one is started, is served at once, not 5 s later.
    redis.args(["--repl-diskless-sync-delay", "0"]);
    let (child, _) = spawn_listening(redis, "Ready to accept connections").await;
    (child, format!("redis://127.0.0.1:{port}/"))
}

/// `sandgate serve` from `binary` with `args` and `envs`; its base URL.
pub async fn sandgate(binary: &str, args: &[String], envs: &[(&str, &str)]) -> (Child, String) {
    let mut command = Command::new(binary);
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .envs(envs.iter().copied());
    let (child, address) = spawn_listening(command, "listening on http://").await;
    (child, format!("http://{address}"))
}

/// A numeric setting of the bench from the environment.
pub fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}
