//! The real `sandgate` binary, for what only a process can show: signals, restarts, logs.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;

pub struct SandgateProcess {
    pub address: String,
    child: Child,
    log: Arc<Mutex<String>>,
    /// Bumped at every line logged, for tests that wait for one.
    lines: watch::Receiver<usize>,
    log_done: Option<tokio::task::JoinHandle<()>>,
    /// Its `--data-dir`, when it was given one: where its process sandboxes' logs are.
    data_dir: Option<std::path::PathBuf>,
}

/// The `host:port` at the start of `text` (a log line's rest, text or JSON).
fn address_prefix(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '[' | ']')))
        .unwrap_or(text.len());
    &text[..end]
}

impl SandgateProcess {
    /// Runs `sandgate <args>` and waits for its "listening on" line.
    pub async fn spawn(args: &[String], envs: &[(&str, &str)]) -> Self {
        Self::spawn_as(None, args, envs).await
    }

    /// As [`Self::spawn`], as the user `uid` (with its gid) when given: Sandgate as an
    /// unprivileged user, which a test running as root can show.
    pub async fn spawn_as(uid: Option<u32>, args: &[String], envs: &[(&str, &str)]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_sandgate"));
        if let Some(uid) = uid {
            command.uid(uid).gid(uid);
        }
        Self::spawn_command(command, args, envs).await
    }

    /// As [`Self::spawn`], run by `wrapper` (a command that ends by running the one it is
    /// given: `unshare … sh -c '… exec "$@"'`).
    pub async fn spawn_wrapped(wrapper: &[&str], args: &[String], envs: &[(&str, &str)]) -> Self {
        let mut command = Command::new(wrapper[0]);
        command
            .args(&wrapper[1..])
            .arg(env!("CARGO_BIN_EXE_sandgate"));
        Self::spawn_command(command, args, envs).await
    }

    async fn spawn_command(mut command: Command, args: &[String], envs: &[(&str, &str)]) -> Self {
        let mut child = command
            .args(args)
            .envs(envs.iter().copied())
            .env("SANDGATE_LOG_FORMAT", "text")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn sandgate");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let log = Arc::new(Mutex::new(String::new()));
        let mut address = None;
        while let Ok(Some(line)) = lines.next_line().await {
            log.lock().expect("log").push_str(&format!("{line}\n"));
            if let Some((_, rest)) = line.split_once("listening on http://") {
                address = Some(address_prefix(rest).to_owned());
                break;
            }
        }
        let Some(address) = address else {
            panic!(
                "sandgate exited before listening:\n{}",
                log.lock().expect("log")
            );
        };
        let data_dir = args
            .iter()
            .position(|arg| arg == "--data-dir")
            .and_then(|at| args.get(at + 1))
            .map(std::path::PathBuf::from);
        let sink = log.clone();
        let (seen, seen_lines) = watch::channel(0);
        let log_done = tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                sink.lock().expect("log").push_str(&format!("{line}\n"));
                seen.send_modify(|count| *count += 1);
            }
        });
        Self {
            address,
            child,
            log,
            lines: seen_lines,
            log_done: Some(log_done),
            data_dir,
        }
    }

    /// The end of each of its process sandboxes' logs (`sandbox.log`: what a sandbox's
    /// process printed), for a failure to show why a sandbox did not get where expected.
    pub fn sandbox_logs(&self) -> String {
        const TAIL: usize = 4096;
        let Some(state) = self.data_dir.as_ref().map(|dir| dir.join("sandbox-state")) else {
            return String::new();
        };
        let mut logs = String::new();
        for entry in std::fs::read_dir(state).into_iter().flatten().flatten() {
            let Ok(log) = std::fs::read(entry.path().join("sandbox.log")) else {
                continue;
            };
            let tail = String::from_utf8_lossy(&log[log.len().saturating_sub(TAIL)..]);
            logs.push_str(&format!(
                "--- {} (its last {} bytes)\n{tail}\n",
                entry.file_name().to_string_lossy(),
                TAIL.min(log.len())
            ));
        }
        logs
    }

    /// Waits until the process has logged a line containing `needle`; panics, showing
    /// the log, when it has not within `within`.
    pub async fn wait_for_log(&self, needle: &str, within: Duration) {
        let mut lines = self.lines.clone();
        let waited = tokio::time::timeout(within, async {
            while !self.log().contains(needle) {
                if lines.changed().await.is_err() {
                    return false;
                }
            }
            true
        })
        .await;
        assert!(
            waited == Ok(true),
            "no log line with {needle:?}:\n{}",
            self.log()
        );
    }

    /// The first line the process logs that contains `needle`, once it has; panics as
    /// [`Self::wait_for_log`] when it has not within `within`.
    pub async fn logged_line(&self, needle: &str, within: Duration) -> String {
        self.wait_for_log(needle, within).await;
        self.log()
            .lines()
            .find(|line| line.contains(needle))
            .map(str::to_owned)
            .unwrap_or_default()
    }

    /// The `host:port` a log line names after `prefix` (e.g. `metrics at http://`).
    pub fn logged_address(&self, prefix: &str) -> Option<String> {
        let log = self.log();
        let (_, rest) = log.split_once(prefix)?;
        Some(address_prefix(rest).to_owned())
    }

    /// The process's id, to read its resources from `/proc`.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("a running process")
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// Posts a webhook body with the test key; returns the status.
    pub async fn deliver(&self, client: &reqwest::Client, body: &serde_json::Value) -> u16 {
        client
            .post(self.url("/api/v1/webhooks/conversations"))
            .header("x-session-api-key", super::WEBHOOK_KEY)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("post")
            .status()
            .as_u16()
    }

    /// Reads a conversation with the runtime API key.
    pub async fn conversation(&self, client: &reqwest::Client, id: &str) -> reqwest::Response {
        client
            .get(self.url(&format!("/api/v1/conversations/{id}")))
            .header("x-api-key", super::RUNTIME_KEY)
            .send()
            .await
            .expect("get")
    }

    /// Logs in as admin with `password` (a challenge, then its answer); the token.
    pub async fn admin_token(&self, client: &reqwest::Client, password: &str) -> String {
        let challenge: serde_json::Value = client
            .get(self.url("/api/admin/challenge"))
            .send()
            .await
            .expect("challenge")
            .json()
            .await
            .expect("JSON");
        let hash = sandgate_runtime_api::admin::login::login_hash(
            password,
            challenge["salt"].as_str().expect("salt"),
            challenge["challenge"].as_str().expect("challenge"),
            challenge["iterations"].as_u64().expect("iterations") as u32,
        );
        let login: serde_json::Value = client
            .post(self.url("/api/admin/login"))
            .json(&serde_json::json!({ "challenge": challenge["challenge"], "hash": hash }))
            .send()
            .await
            .expect("login")
            .json()
            .await
            .expect("JSON");
        login["token"].as_str().expect("token").to_owned()
    }

    /// Sends SIGTERM and returns the exit code.
    pub async fn terminate(&mut self) -> Option<i32> {
        self.signal_terminate();
        let code = self.child.wait().await.expect("wait").code();
        self.finish_log().await;
        code
    }

    /// Sends SIGTERM and returns at once, for tests that act while the process drains.
    pub fn signal_terminate(&self) {
        assert!(sigterm(self.child.id().expect("running")), "kill -TERM");
    }

    /// Waits for the process to exit, at most `within`, and returns its exit code.
    pub async fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let status = tokio::time::timeout(within, self.child.wait()).await;
        let Ok(status) = status else {
            panic!("sandgate did not exit within {within:?}:\n{}", self.log());
        };
        let code = status.expect("wait").code();
        self.finish_log().await;
        code
    }

    /// Kills the process at once (SIGKILL): nothing gets a chance to flush.
    pub async fn kill(&mut self) {
        self.child.kill().await.expect("kill");
        self.finish_log().await;
    }

    async fn finish_log(&mut self) {
        if let Some(done) = self.log_done.take() {
            drop(done.await);
        }
    }

    /// Everything the process logged so far.
    pub fn log(&self) -> String {
        self.log.lock().expect("log").clone()
    }
}

/// Sends SIGTERM to `pid`: whether it was sent.
fn sigterm(pid: u32) -> bool {
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .is_ok_and(|status| status.success())
}

/// How long a dropped Sandgate with process sandboxes is given to stop them.
const STOP_SANDBOXES_WITHIN: Duration = Duration::from_secs(30);

impl Drop for SandgateProcess {
    /// A test that ends (or fails) with a Sandgate still running whose process sandboxes
    /// may run: it is asked to stop (SIGTERM) and given the time to stop them, as a
    /// SIGKILL would not (bwrap does not die with Sandgate, and pasta is a daemon: both
    /// would outlive the test, their folders deleted). Then `kill_on_drop`.
    fn drop(&mut self) {
        let has_sandboxes = self.data_dir.as_ref().is_some_and(|dir| {
            std::fs::read_dir(dir.join("sandbox-state"))
                .is_ok_and(|mut entries| entries.next().is_some())
        });
        let Some(pid) = self.child.id().filter(|_| has_sandboxes) else {
            return;
        };
        sigterm(pid);
        let deadline = std::time::Instant::now() + STOP_SANDBOXES_WITHIN;
        while matches!(self.child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Runs `sandgate <args>` to its end with only `envs` in its environment (none of the
/// machine's settings leak in), for commands that print and exit.
pub async fn run_sandgate(args: &[&str], envs: &[(&str, &str)]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sandgate"))
        .args(args)
        .env_clear()
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run sandgate")
}
