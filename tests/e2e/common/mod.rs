//! Test harness: real servers on port 0. A `redis-server` per test on a free port (never
//! the machine's own on 6379), Sandgate in-process or as its real binary. Readiness is read
//! from the servers' own output, never waited for with sleeps.

mod cluster_formation;
pub mod fake_kube;
pub mod fixtures;
mod process;
mod redis_server;
pub mod scripted_upstream;

use std::net::SocketAddr;
use std::path::PathBuf;

use sandgate::cli::{Cli, Command};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

pub use process::{SandgateProcess, run_sandgate};
pub use redis_server::RedisServer;

/// A path in the repository.
pub fn repository(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The script that installs the real clients into `.tools/`.
pub const REAL_CLIENTS: &str = "scripts/install-real-clients";

/// A temporary file holding `text` (a gateway configuration, say), removed when dropped.
pub fn file_with(text: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), text).expect("write the temp file");
    file
}

/// A file of `.tools/` (`path` relative to it) that the repository's script `installer`
/// installs; a test that needs it fails naming the script when it is missing.
pub fn tool(path: &str, installer: &str) -> PathBuf {
    let tool = repository(&format!(".tools/{path}"));
    assert!(
        tool.exists(),
        "{} is missing: run {installer} (scripts/test does)",
        tool.display()
    );
    tool
}

/// The variable that lets the suite run unprivileged on purpose: the tests that need root
/// then say they did not run (and scripts/test says so loudly), rather than fail.
pub const UNPRIVILEGED: &str = "SANDGATE_TESTS_UNPRIVILEGED";

/// Whether this test runs as root, which `what` needs. Not root: the test fails, unless
/// `SANDGATE_TESTS_UNPRIVILEGED=1` leaves the root-only tests out of this run: then `false`
/// (the caller returns), said on stderr. CI runs as root.
#[expect(
    clippy::print_stderr,
    reason = "a test left out must say so where the run's output shows it"
)]
pub fn require_root(what: &str) -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var_os(UNPRIVILEGED).is_some_and(|value| value == "1"),
        "{what} needs root: run the tests as root (CI does), or set {UNPRIVILEGED}=1 to leave it out"
    );
    eprintln!("NOT RUN, not root ({UNPRIVILEGED}=1): {what}");
    false
}

/// Runs `command` (a real client's driver, or a checker script) to its end, with nothing
/// on its stdin; its stdout. Panics, showing what it wrote and `context()` (a server's
/// log), when it fails.
pub async fn driver_output(
    mut command: tokio::process::Command,
    context: impl FnOnce() -> String,
) -> String {
    let output = command
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run the driver");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the driver failed ({}):\n{stdout}\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        context()
    );
    stdout
}

/// Runs `command` as [`driver_output`] does; its stdout read as one JSON report.
pub async fn driver_report(command: tokio::process::Command) -> serde_json::Value {
    let stdout = driver_output(command, String::new).await;
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|error| panic!("the driver's report is not JSON ({error}): {stdout}"))
}

/// What a real client's driver script did, step by step: each line of its output that is
/// a JSON object `{"step": name, …}`, by name.
pub struct Steps(std::collections::HashMap<String, serde_json::Value>);

impl Steps {
    /// Runs `python script args…` (a script of the repository) to its end; panics, showing
    /// its output and `context()` (a server's log), when it fails.
    pub async fn run(
        python: PathBuf,
        script: &str,
        args: &[&str],
        context: impl FnOnce() -> String,
    ) -> Self {
        let mut command = tokio::process::Command::new(python);
        command.arg(repository(script)).args(args);
        let stdout = driver_output(command, context).await;
        Self(
            stdout
                .lines()
                .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                .filter_map(|step| Some((step["step"].as_str()?.to_owned(), step)))
                .collect(),
        )
    }

    /// The step `name`; panics, listing them all, when the driver did not report it.
    pub fn get(&self, name: &str) -> &serde_json::Value {
        self.0
            .get(name)
            .unwrap_or_else(|| panic!("no step {name}: {:?}", self.0))
    }
}

/// A session key every test server accepts from external senders.
pub const WEBHOOK_KEY: &str = "test-session-key";
/// A second static key: another sender.
pub const OTHER_WEBHOOK_KEY: &str = "other-session-key";
/// The runtime API key (`X-API-Key`), which reads everything.
pub const RUNTIME_KEY: &str = "test-runtime-api-key";
/// The admin password of servers started with [`admin_args`].
pub const ADMIN_PASSWORD: &str = "a long enough admin password for tests";
/// Their admin token key: fixed, so tokens and sandbox session keys outlive a restart.
pub const JWT_SECRET: &str = "an HMAC key of at least thirty-two bytes";

/// The flags that enable admin login (cheap hashes: the tests exercise the protocol).
pub fn admin_args() -> Vec<String> {
    [
        "--admin-password",
        ADMIN_PASSWORD,
        "--jwt-secret",
        JWT_SECRET,
        "--pbkdf2-iterations",
        "1000",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// A clock the test moves: expiry and timings are tested without waiting.
pub struct TestClock(std::sync::atomic::AtomicI64);

impl TestClock {
    pub fn at(now_ms: i64) -> Self {
        Self(std::sync::atomic::AtomicI64::new(now_ms))
    }

    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }
}

impl sandgate_runtime_api::ambient::Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Where a test server keeps its data.
pub enum Backend {
    Embedded(tempfile::TempDir),
    Redis(RedisServer),
}

impl Backend {
    pub fn embedded() -> Self {
        Self::Embedded(tempfile::tempdir().expect("temp dir"))
    }

    pub async fn redis() -> Self {
        Self::Redis(RedisServer::start().await)
    }

    /// Redis over TLS only (`rediss://`), with a private CA.
    pub async fn redis_tls() -> Self {
        Self::Redis(RedisServer::start_tls(false).await)
    }

    /// Redis behind Sentinel (`redis+sentinel://`): a primary, a replica of it and three
    /// sentinels, as a production group runs (the failover tests start their own).
    pub async fn redis_sentinel() -> Self {
        Self::Redis(RedisServer::start_sentinel(1, false).await)
    }

    /// A Redis Cluster of three masters (`redis+cluster://`).
    pub async fn redis_cluster() -> Self {
        Self::Redis(RedisServer::start_cluster(3).await)
    }

    /// A Redis Cluster of three masters over TLS only (`rediss+cluster://`, a private CA).
    pub async fn redis_tls_cluster() -> Self {
        Self::Redis(RedisServer::start_tls_cluster(3).await)
    }

    /// The command-line flags that select this backend.
    pub fn args(&self) -> Vec<String> {
        match self {
            Self::Embedded(dir) => vec!["--data-dir".into(), dir.path().display().to_string()],
            Self::Redis(redis) => {
                let mut args = vec!["--redis".into(), redis.url()];
                args.extend(redis.tls_args());
                args
            }
        }
    }
}

/// The flags every test server runs with.
pub fn base_args(backend: &Backend) -> Vec<String> {
    let mut args = vec![
        "--webhook-api-keys".to_owned(),
        format!("{WEBHOOK_KEY},{OTHER_WEBHOOK_KEY}"),
        "--default-api-key".to_owned(),
        RUNTIME_KEY.to_owned(),
    ];
    args.extend(backend.args());
    args
}

/// `serve` on port 0 with the test keys and `backend`: the real binary's arguments.
pub fn serve_args(backend: &Backend) -> Vec<String> {
    let mut args = vec![
        "serve".to_owned(),
        "--listen".to_owned(),
        "127.0.0.1:0".to_owned(),
    ];
    args.extend(base_args(backend));
    args
}

/// The binary's logging and tracing, installed once in the test process: spans carry
/// trace context (the gateway's `traceparent` comes from them), and no log is printed.
fn init_telemetry() {
    static TELEMETRY: std::sync::OnceLock<Option<sandgate::telemetry::Telemetry>> =
        std::sync::OnceLock::new();
    TELEMETRY.get_or_init(|| {
        // Silent unless asked (`SANDGATE_TEST_LOG=warn`, any `--log` filter): to debug.
        let args = sandgate::cli::LogArgs {
            log: std::env::var("SANDGATE_TEST_LOG").unwrap_or_else(|_| "off".to_owned()),
            log_format: sandgate::cli::LogFormat::Text,
        };
        sandgate::telemetry::init(&args, "sandgate-test").ok()
    });
}

/// `sandgate serve` running inside the test process; stops when dropped.
pub struct Sandgate {
    pub address: SocketAddr,
    pub client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Sandgate {
    pub async fn start(backend: &Backend) -> Self {
        Self::start_with(backend, &[]).await
    }

    pub async fn start_with(backend: &Backend, extra: &[&str]) -> Self {
        init_telemetry();
        let mut argv = vec![
            "sandgate".to_owned(),
            "serve".to_owned(),
            "--listen".to_owned(),
            "127.0.0.1:0".to_owned(),
        ];
        argv.extend(base_args(backend));
        argv.extend(extra.iter().map(|arg| (*arg).to_owned()));
        let Command::Serve(args) = <Cli as clap::Parser>::try_parse_from(argv)
            .expect("valid flags")
            .command
        else {
            unreachable!("parsed `serve`")
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(sandgate::serve(args, listener, async {
            drop(stopped.await);
        }));
        Self {
            address,
            // Redirects are answers too: tests look at them rather than follow them.
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// Stops the server and waits until it has released everything (the store too).
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("server task").expect("server result");
        }
    }

    /// The warm pools' status (`GET /api/warm-runtime-pools`, runtime API key) once the
    /// first pool has `ready` sandboxes ready; fails the test past `within`. Polls, never
    /// a fixed sleep.
    pub async fn first_pool_ready(
        &self,
        ready: u64,
        within: std::time::Duration,
    ) -> serde_json::Value {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let pools: serde_json::Value = self
                .client
                .get(self.url("/api/warm-runtime-pools"))
                .header("x-api-key", RUNTIME_KEY)
                .send()
                .await
                .expect("pools")
                .json()
                .await
                .expect("JSON");
            if pools["pools"][0]["ready"] == ready {
                return pools;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the pool never filled: {pools}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Posts a webhook body with the given session key.
    pub async fn deliver(&self, key: &str, body: impl Into<reqwest::Body>) -> reqwest::Response {
        self.client
            .post(self.url("/api/v1/webhooks/conversations"))
            .header("content-type", "application/json")
            .header("x-session-api-key", key)
            .body(body)
            .send()
            .await
            .expect("request")
    }

    /// Posts a webhook body with the test key and asserts it was acknowledged.
    pub async fn deliver_ok(&self, body: &serde_json::Value) {
        let response = self.deliver(WEBHOOK_KEY, body.to_string()).await;
        assert_eq!(
            response.status(),
            200,
            "{}",
            response.text().await.unwrap_or_default()
        );
    }

    /// Reads a conversation with the runtime API key.
    pub async fn conversation(&self, id: &str) -> reqwest::Response {
        self.client
            .get(self.url(&format!("/api/v1/conversations/{id}")))
            .header("x-api-key", RUNTIME_KEY)
            .send()
            .await
            .expect("request")
    }
}

impl Drop for Sandgate {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Runs each named `async fn(Backend)` on the embedded store, on Redis, on Redis over TLS
/// (`rediss://` with a private CA), behind Sentinel, and on a three-master Redis Cluster,
/// plain and over TLS.
#[macro_export]
macro_rules! on_both_backends {
    ($($test:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test($crate::common::Backend::embedded()).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test($crate::common::Backend::redis().await).await;
                }
            )*
        }
        mod redis_tls {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test($crate::common::Backend::redis_tls().await).await;
                }
            )*
        }
        mod redis_sentinel {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test($crate::common::Backend::redis_sentinel().await).await;
                }
            )*
        }
        mod redis_cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test($crate::common::Backend::redis_cluster().await).await;
                }
            )*
        }
        mod redis_tls_cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test($crate::common::Backend::redis_tls_cluster().await).await;
                }
            )*
        }
    };
}

/// Polls `poll` until what it answers is `done`, for at most `within` (and once at
/// least): the last answer, `done` unless it never came.
pub async fn until<T, Fut>(
    within: std::time::Duration,
    mut poll: impl FnMut() -> Fut,
    done: impl Fn(&T) -> bool,
) -> T
where
    Fut: std::future::Future<Output = T>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let answer = poll().await;
        if done(&answer) || tokio::time::Instant::now() >= deadline {
            return answer;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Polls `status` until it answers `wanted`, for at most `within` (and once at least):
/// the statuses seen meanwhile, the last one `wanted` unless it never came.
pub async fn until_status<F, Fut>(
    within: std::time::Duration,
    wanted: u16,
    mut status: F,
) -> Vec<u16>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = u16>,
{
    let deadline = tokio::time::Instant::now() + within;
    let mut seen = Vec::new();
    loop {
        let answer = status().await;
        seen.push(answer);
        if answer == wanted || tokio::time::Instant::now() >= deadline {
            return seen;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A valid ConversationInfo body built from a real fixture, with the given id and
/// `updated_at`, for tests that need many distinct records.
pub fn conversation(id: &str, updated_at: &str, status: &str) -> serde_json::Value {
    let mut body = fixtures::json("accept/agent_basic_idle");
    body["id"] = id.into();
    body["updated_at"] = updated_at.into();
    body["execution_status"] = status.into();
    body
}

/// A fresh conversation id.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A turn of the tests that run a real agent-server, two at a time. Each start costs about
/// ten CPU-seconds of Python imports; beside the rest of the suite on two cores, several at
/// once made a start outlast the real clients' own waits (the SDK's workspace gives up
/// after two minutes). Held for the whole test.
pub async fn real_agent_server_turn() -> tokio::sync::SemaphorePermit<'static> {
    static TURNS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);
    TURNS.acquire().await.expect("the turns are never closed")
}
