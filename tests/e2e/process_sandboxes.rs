//! The `process` sandbox driver on the real `sandgate` binary: sandboxes that really run on
//! this machine, with a plain program (what a sandbox's process gets, its keys, pause,
//! resume, delete, a restart of Sandgate, a warm pool). The real clients on it are in
//! `process_real_clients.rs`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandgate_runtime_api::sandboxes::process::{ProcessDriver, ProcessOptions};
use serde_json::{Value, json};

use crate::common::{RUNTIME_KEY, SandgateProcess, WEBHOOK_KEY};

/// How long a sandbox may take to start before a test gives up on it: a guard against a
/// hang, not a measure of speed. A real agent-server takes seconds of CPU to import; on
/// CI's two shared cores, beside the suite's other real clients, one took over 120 s
/// (the personalised pool's resume, once), so the guard is far beyond that.
pub(crate) const START_WITHIN: Duration = Duration::from_secs(300);

/// A secret of Sandgate's own environment that no sandbox may see.
pub(crate) const SANDGATE_SECRET: &str = "jwt-secret-of-sandgate-never-in-a-sandbox-0123456789";

/// `sandgate serve --sandbox-driver process` with its embedded store and its sandboxes in
/// `data_dir` (both survive a restart on it), with `port` as the port sandbox commands name.
pub(crate) async fn serve(data_dir: &Path, port: &str) -> SandgateProcess {
    serve_with(data_dir, port, &[]).await
}

pub(crate) async fn serve_with(data_dir: &Path, port: &str, extra: &[&str]) -> SandgateProcess {
    serve_as(None, data_dir, port, extra).await
}

/// As [`serve_with`], as the user `uid` when given.
pub(crate) async fn serve_as(
    uid: Option<u32>,
    data_dir: &Path,
    port: &str,
    extra: &[&str],
) -> SandgateProcess {
    SandgateProcess::spawn_as(
        uid,
        &serve_args(data_dir, port, extra),
        &[("JWT_SECRET", SANDGATE_SECRET)],
    )
    .await
}

/// `serve`'s arguments for the process driver on `data_dir`, sandboxes on `port`.
pub(crate) fn serve_args(data_dir: &Path, port: &str, extra: &[&str]) -> Vec<String> {
    let mut args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--webhook-api-keys",
        WEBHOOK_KEY,
        "--default-api-key",
        RUNTIME_KEY,
        "--data-dir",
        &data_dir.display().to_string(),
        "--sandbox-driver",
        "process",
        "--sandbox-port",
        port,
    ]
    .map(str::to_owned)
    .to_vec();
    if let Some(interpreter) = interpreter() {
        args.extend(["--sandbox-read-only-paths".to_owned(), interpreter]);
    }
    args.extend(extra.iter().map(|arg| (*arg).to_owned()));
    args
}

/// The installation of the interpreter the real clients' virtual environments run, which
/// their agent-servers need in every sandbox: on a new machine it is under `/root`
/// (pyenv's), where no sandbox's uid may enter, so the tests grant it to every sandbox
/// as an operator would (`SANDBOX_READ_ONLY_PATHS`), rather than open `/root`.
pub(crate) fn interpreter() -> Option<String> {
    let python = crate::common::repository(".tools/app-server/bin/python");
    let real = std::fs::canonicalize(python).ok()?;
    Some(real.parent()?.parent()?.display().to_string())
}

pub(crate) async fn call(
    sandgate: &SandgateProcess,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let client = reqwest::Client::new();
    let request = match body {
        Some(body) => client.post(sandgate.url(path)).json(&body),
        None => client.get(sandgate.url(path)),
    };
    let response = request
        .header("x-api-key", RUNTIME_KEY)
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The pools' listing.
pub(crate) async fn pools(sandgate: &SandgateProcess) -> Value {
    call(sandgate, "/api/warm-runtime-pools", None).await.1
}

/// Polls the listing until the first pool has a ready sandbox.
pub(crate) async fn pool_ready(sandgate: &SandgateProcess, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let listed = pools(sandgate).await;
        if listed["pools"][0]["ready"] == 1 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pool never filled: {listed}\n{}",
            sandgate.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `POST /{verb}` (pause, resume, stop) of the sandbox `runtime_id`; the status.
pub(crate) async fn act(sandgate: &SandgateProcess, verb: &str, runtime_id: &str) -> u16 {
    let body = json!({ "runtime_id": runtime_id });
    call(sandgate, &format!("/{verb}"), Some(body)).await.0
}

/// Polls the session until its status is `wanted`; the last answer.
pub(crate) async fn until_session(
    sandgate: &SandgateProcess,
    session: &str,
    wanted: &str,
) -> Value {
    let deadline = tokio::time::Instant::now() + START_WITHIN;
    loop {
        let (_, runtime) = call(sandgate, &format!("/sessions/{session}"), None).await;
        if runtime["status"] == wanted || tokio::time::Instant::now() >= deadline {
            assert_eq!(
                runtime["status"],
                wanted,
                "{runtime}\n{}\nthe sandboxes' logs:\n{}",
                sandgate.log(),
                sandgate.sandbox_logs()
            );
            return runtime;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the test sandboxes run in place of an agent-server, by `python3 -c`: the
/// directory it starts in served as files, and the agent-server's session-key check on
/// `/api/…` (`X-Session-API-Key` against its `SESSION_API_KEY`: 200, else 401), which is
/// what Sandgate asks before it calls a sandbox ready (issue 50, point 4).
/// Its key as every agent-server release reads it: `OH_SESSION_API_KEYS_0` first.
pub(crate) const AGENT_SERVER: &str = r#"
import http.server, os
KEY = os.environ.get("OH_SESSION_API_KEYS_0") or os.environ.get("SESSION_API_KEY", "")
class Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        if not self.path.startswith("/api/"):
            return super().do_GET()
        self.send_response(200 if self.headers.get("X-Session-API-Key") == KEY else 401)
        self.send_header("Content-Length", "0")
        self.end_headers()
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"#;

/// A sandbox's command: `script` (run by `sh` in its working directory; empty, or ending
/// in `;` or a newline), then [`AGENT_SERVER`] on its port.
pub(crate) fn serving(script: &str) -> Value {
    json!([
        "/bin/sh",
        "-c",
        format!("{script} exec /usr/bin/python3 -c \"$0\""),
        AGENT_SERVER,
    ])
}

/// What a plain sandbox writes down of its environment at start (a file in its working
/// directory), then serves that directory on the port it is told (`$PORT`).
pub(crate) fn plain_sandbox(session: &str) -> Value {
    json!({
        "image": "local/plain",
        "command": serving("env > environment.txt &&"),
        "working_dir": "/workspace",
        "environment": {"GREETING": "hello"},
        "session_id": session,
    })
}

/// Waits until a warm sandbox's process of `data_dir` accepts connections; its runtime id.
async fn warm_sandbox_ready(data_dir: &Path) -> String {
    let deadline = tokio::time::Instant::now() + START_WITHIN;
    loop {
        for entry in std::fs::read_dir(data_dir.join("sandbox-state"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let port = std::fs::read_to_string(entry.path().join("port")).unwrap_or_default();
            if !port.is_empty() && answers(&format!("http://127.0.0.1:{port}/")).await {
                return entry.file_name().to_string_lossy().into_owned();
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no warm sandbox came up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The sandbox's environment, as it wrote it down.
pub(crate) fn written_environment(dir: &Path) -> HashMap<String, String> {
    let text = std::fs::read_to_string(dir.join("workspace/environment.txt")).unwrap_or_default();
    text.lines()
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

pub(crate) async fn answers(url: &str) -> bool {
    reqwest::get(url)
        .await
        .is_ok_and(|response| response.status().is_success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_is_a_process_of_its_own_that_pauses_resumes_and_goes() {
    let data = tempfile::tempdir().expect("data dir");
    let mut sandgate = serve(data.path(), "8000").await;
    let (status, started) = call(&sandgate, "/start", Some(plain_sandbox("plain-1"))).await;
    assert_eq!(status, 200, "{started}");
    let runtime_id = started["runtime_id"].as_str().expect("id").to_owned();
    let dir: PathBuf = data.path().join("sandboxes").join(&runtime_id);
    let running = until_session(&sandgate, "plain-1", "running").await;
    assert_eq!(running["pod_status"], "ready");
    let url = running["url"].as_str().expect("url").to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    assert!(
        answers(&format!("{url}/environment.txt")).await,
        "the sandbox serves its working directory at its URL"
    );

    // Its environment: the spec's, its key and its port, and nothing of Sandgate's.
    let environment = written_environment(&dir);
    let first_key = running["session_api_key"].as_str().expect("key").to_owned();
    assert_eq!(environment.get("SESSION_API_KEY"), Some(&first_key));
    // Its secret key (what the agent-server encrypts the secrets it saves with): its own,
    // not its session key, which a resume rotates.
    let secret_key = environment
        .get("OH_SECRET_KEY")
        .cloned()
        .unwrap_or_default();
    assert_eq!(secret_key.len(), 64, "{environment:?}");
    assert_ne!(secret_key, first_key);
    assert_eq!(
        environment.get("GREETING").map(String::as_str),
        Some("hello")
    );
    assert_eq!(
        environment.get("PORT").map(String::as_str),
        url.rsplit(':').next()
    );
    assert!(
        !environment.contains_key("JWT_SECRET")
            && !environment.values().any(|value| value == SANDGATE_SECRET),
        "{environment:?}"
    );
    assert_eq!(
        environment.get("HOME").map(PathBuf::from),
        Some(dir.join("home"))
    );

    // Pause stops the process and keeps its directory; resume starts it again with a new
    // key, at the same URL.
    assert_eq!(act(&sandgate, "pause", &runtime_id).await, 200);
    assert!(!answers(&url).await, "a paused sandbox's process is gone");
    assert!(dir.join("workspace/environment.txt").exists());
    assert_eq!(act(&sandgate, "resume", &runtime_id).await, 200);
    let resumed = until_session(&sandgate, "plain-1", "running").await;
    assert_eq!(resumed["url"], url.as_str());
    let second_key = resumed["session_api_key"].as_str().expect("key").to_owned();
    assert_ne!(second_key, first_key);
    let resumed_environment = written_environment(&dir);
    assert_eq!(
        resumed_environment.get("SESSION_API_KEY"),
        Some(&second_key)
    );
    assert_eq!(
        resumed_environment.get("OH_SECRET_KEY"),
        Some(&secret_key),
        "a resumed sandbox reads back what it saved: its secret key is the one it had"
    );

    // A second sandbox of the same command gets a port of its own.
    let (status, started) = call(&sandgate, "/start", Some(plain_sandbox("plain-2"))).await;
    assert_eq!(status, 200, "{started}");
    let second_id = started["runtime_id"].as_str().expect("id").to_owned();
    let running = until_session(&sandgate, "plain-2", "running").await;
    let second_url = running["url"].as_str().expect("url").to_owned();
    assert_ne!(second_url, url);
    let second_environment = written_environment(&data.path().join("sandboxes").join(&second_id));
    assert!(
        second_environment
            .get("OH_SECRET_KEY")
            .is_some_and(|other| other.len() == 64 && *other != secret_key),
        "each sandbox has a secret key of its own: {second_environment:?}"
    );
    assert!(answers(&url).await && answers(&second_url).await);

    // Stop removes the process and the directory.
    assert_eq!(act(&sandgate, "stop", &second_id).await, 200);
    assert!(!answers(&second_url).await);
    assert!(!data.path().join("sandboxes").join(&second_id).exists());
    sandgate.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_reports_the_sandboxes_it_did_not_start_and_resume_brings_them_back() {
    let data = tempfile::tempdir().expect("data dir");
    let mut sandgate = serve(data.path(), "8000").await;
    let (status, started) = call(&sandgate, "/start", Some(plain_sandbox("kept"))).await;
    assert_eq!(status, 200, "{started}");
    let runtime_id = started["runtime_id"].as_str().expect("id").to_owned();
    let running = until_session(&sandgate, "kept", "running").await;
    let url = running["url"].as_str().expect("url").to_owned();
    let dir = data.path().join("sandboxes").join(&runtime_id);
    let secret_key = written_environment(&dir).get("OH_SECRET_KEY").cloned();
    assert!(secret_key.is_some());
    assert!(
        answers(&url).await,
        "the sandbox's process serves before the kill"
    );

    sandgate.kill().await;
    let mut sandgate = serve(data.path(), "8000").await;
    assert!(
        !answers(&url).await,
        "the next run stopped the leftover process"
    );
    let failed = until_session(&sandgate, "kept", "error").await;
    let detail = failed["status_detail"].as_str().unwrap_or_default();
    assert!(detail.contains("resume"), "{failed}");
    assert_eq!(act(&sandgate, "resume", &runtime_id).await, 200);
    let resumed = until_session(&sandgate, "kept", "running").await;
    assert_eq!(resumed["url"], url.as_str(), "its port was kept");
    assert!(answers(&url).await);
    assert_eq!(
        written_environment(&dir).get("OH_SECRET_KEY").cloned(),
        secret_key,
        "another run of Sandgate on the same secret gives it the same secret key"
    );
    sandgate.terminate().await;
    assert!(
        !answers(&url).await,
        "a stopping Sandgate stops its sandboxes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_pool_of_processes_is_claimed_ready() {
    let data = tempfile::tempdir().expect("data dir");
    let pool = plain_sandbox("unused");
    let warm_runtimes = json!({"count": 1, "configs": [{
        "name": "plain", "image": pool["image"], "working_dir": pool["working_dir"],
        "command": pool["command"], "environment": pool["environment"],
    }]});
    let file = data.path().join("warm-runtimes.json");
    std::fs::write(&file, warm_runtimes.to_string()).expect("write");
    let mut sandgate = serve_with(
        data.path(),
        "8000",
        &["--warm-runtimes-file", file.to_str().expect("utf-8")],
    )
    .await;
    let warm_id = warm_sandbox_ready(data.path()).await;

    // A start of the pool's spec claims the running process: up at once, at its URL.
    let (status, started) = call(&sandgate, "/start", Some(plain_sandbox("claims"))).await;
    assert_eq!(status, 200, "{started}");
    assert_eq!(started["warm"], true, "{started}");
    assert_eq!(started["runtime_id"], warm_id.as_str());
    assert_eq!(started["status"], "running");
    let url = started["url"].as_str().expect("url");
    assert!(answers(&format!("{url}/environment.txt")).await);
    // The claimer's key is the one the process runs with.
    let environment = written_environment(&data.path().join("sandboxes").join(&warm_id));
    assert_eq!(
        environment.get("SESSION_API_KEY").map(String::as_str),
        started["session_api_key"].as_str()
    );
    sandgate.terminate().await;
}

/// What the orphan sweep reads of the process driver: every sandbox directory, with when it
/// last started; a deleted sandbox leaves nothing.
#[tokio::test]
async fn the_process_driver_lists_its_workloads_for_the_orphan_sweep() {
    use sandgate_runtime_api::ambient::{Clock, SystemClock};
    use sandgate_runtime_api::sandboxes::driver::SandboxDriver;
    use sandgate_store::SandboxSpec;

    let root = tempfile::tempdir().expect("root");
    let driver = ProcessDriver::open(driver_options(root.path()), &SystemClock).expect("driver");
    // A sandbox as the Kubernetes tests make one, running a program this machine has.
    let mut record = crate::kubernetes::sandbox("0rphan", None);
    record.spec = SandboxSpec {
        image: "local/sleeper".into(),
        command: vec!["/bin/sh".into(), "-c".into(), "exec sleep 60".into()],
        working_dir: "/workspace".into(),
        ..SandboxSpec::default()
    };
    let before = SystemClock.now_ms();
    driver
        .create(&record, &crate::kubernetes::keys("a-key"))
        .await
        .expect("create");
    let workloads = driver.workloads().await.expect("workloads");
    let started = workloads.get("0rphan").copied().expect("listed");
    assert!(
        (before - 1_000..=SystemClock.now_ms() + 1_000).contains(&started),
        "{started} vs {before}"
    );
    driver.delete("0rphan").await.expect("delete");
    assert!(driver.workloads().await.expect("workloads").is_empty());
    assert!(!root.path().join("0rphan").exists());
}

/// The process driver's options on `data`, as `serve` gives them by default.
fn driver_options(data: &Path) -> ProcessOptions {
    ProcessOptions {
        root: data.join("sandboxes"),
        state: data.join("sandbox-state"),
        read_only: Vec::new(),
        port: 8000,
        stop_grace: Duration::from_secs(1),
        network: Default::default(),
        doors: None,
        isolation: Default::default(),
    }
}

/// On a machine that can give sandboxes neither a view nor a network of their own (no
/// bubblewrap, no pasta), where a sandbox would read Sandgate's store as its user, the
/// driver does not start unless told that best effort will do; it says what to install.
#[test]
fn the_process_driver_refuses_a_machine_that_cannot_keep_sandboxes_apart() {
    use sandgate_runtime_api::ambient::SystemClock;
    use sandgate_runtime_api::sandboxes::process_isolation::{Isolation, Requirement};

    let data = tempfile::tempdir().expect("data");
    let refused =
        ProcessDriver::open_on(driver_options(data.path()), Isolation::none(), &SystemClock)
            .err()
            .expect("refused by default");
    for part in [
        "no view of its own",
        "no network of its own",
        "bubblewrap",
        "passt",
        "SANDBOX_ISOLATION=best-effort",
    ] {
        assert!(refused.0.contains(part), "{part}: {refused}");
    }
    assert!(!data.path().join("sandboxes").exists(), "nothing made");
    let best_effort = ProcessOptions {
        isolation: Requirement::BestEffort,
        ..driver_options(data.path())
    };
    ProcessDriver::open_on(best_effort, Isolation::none(), &SystemClock).expect("best effort");
    assert!(data.path().join("sandboxes").is_dir());
}

/// Whether process `pid` still runs (a zombie waiting for its reaper does not).
pub(crate) fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

/// A sandbox whose first process exits is in error, saying so; what it started goes with
/// it (the kernel ends its PID namespace), and its directory goes on delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_whose_process_exits_is_in_error_and_what_it_started_goes_with_it() {
    let data = tempfile::tempdir().expect("data dir");
    let sandgate = serve(data.path(), "8000").await;
    let body = json!({
        "image": "local/quitter",
        // It exits once told to (a file of the test's), so that its child is seen running
        // before it is checked gone.
        "command": ["/bin/sh", "-c", "setsid sleep 7300001 & echo started > child.txt; \
            while [ ! -e exit-now ]; do sleep 0.05; done; exit 3"],
        "working_dir": "/workspace",
        "session_id": "quits",
    });
    let (status, started) = call(&sandgate, "/start", Some(body)).await;
    assert_eq!(status, 200, "{started}");
    let runtime_id = started["runtime_id"].as_str().expect("id").to_owned();
    let dir = data.path().join("sandboxes").join(&runtime_id);
    let deadline = tokio::time::Instant::now() + START_WITHIN;
    while !sleeping("7300001") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sandbox's child never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::write(dir.join("workspace/exit-now"), "").expect("tell it to exit");
    let failed = until_session(&sandgate, "quits", "error").await;
    let detail = failed["status_detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("exited") && detail.contains("sandbox.log"),
        "{failed}"
    );
    assert_eq!(failed["pod_status"], "failed");
    assert!(
        dir.join("workspace/child.txt").exists(),
        "the child was started"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sleeping("7300001") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "what the sandbox started outlived it"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(act(&sandgate, "stop", &runtime_id).await, 200);
    assert!(!dir.exists());
}

/// Whether a `sleep {seconds}` runs on this machine, in any PID namespace.
fn sleeping(seconds: &str) -> bool {
    let wanted = format!("sleep\0{seconds}\0");
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .any(|entry| {
            let pid = entry.file_name().to_string_lossy().into_owned();
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| cmdline == wanted.as_bytes())
                && alive(&pid)
        })
}
