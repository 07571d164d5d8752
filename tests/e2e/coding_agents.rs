//! The coding-agent CLIs, unchanged, through the model gateway (issue 41): Claude Code in
//! print mode and Codex `exec`, installed from npm into `.tools/coding-agents/` by
//! `scripts/install-real-clients`. Each is asked to run a shell command and answer; the
//! fake upstream answers as a provider does (`tests/fixtures/coding_agents/`): a tool call
//! that writes a file, then the final text. The file must exist, the CLI print the text
//! and exit 0, and the spend log hold every call with status 200.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::process::Command;

use crate::common::{Backend, REAL_CLIENTS, Sandgate, file_with, repository, tool};
use crate::model_gateway::{MASTER_KEY, Recorded, UPSTREAM_KEY};

/// The text every final answer holds.
pub(crate) const FINAL_TEXT: &str = "The file is written.";

/// What a fake upstream speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Speaks {
    /// Chat completions only, as vLLM or Ollama: `/responses` and `/messages` are 404.
    Chat,
    /// Anthropic's Messages API, which refuses beta fields without their `anthropic-beta`.
    Messages,
    /// OpenAI's Responses API.
    Responses,
}

/// A provider's stream, recorded.
fn recording(name: &str) -> String {
    std::fs::read_to_string(repository(&format!("tests/fixtures/coding_agents/{name}")))
        .unwrap_or_else(|err| panic!("{name}: {err}"))
}

/// Whether the conversation holds a tool's result: the second turn.
fn after_tool_result(speaks: Speaks, body: &Value) -> bool {
    match speaks {
        Speaks::Chat => body["messages"]
            .as_array()
            .is_some_and(|messages| messages.iter().any(|m| m["role"] == "tool")),
        Speaks::Messages => body["messages"].as_array().is_some_and(|messages| {
            messages.iter().any(|m| {
                m["content"]
                    .as_array()
                    .is_some_and(|blocks| blocks.iter().any(|block| block["type"] == "tool_result"))
            })
        }),
        Speaks::Responses => body["input"].as_array().is_some_and(|items| {
            items
                .iter()
                .any(|item| item["type"] == "function_call_output")
        }),
    }
}

/// The name of the shell tool the request offers, if any.
fn shell_tool(body: &Value) -> Option<&'static str> {
    let tools = body["tools"].as_array()?;
    ["Bash", "exec_command"].into_iter().find(|name| {
        tools
            .iter()
            .any(|tool| tool["name"] == *name || tool["function"]["name"] == *name)
    })
}

fn stream(text: String) -> Response {
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(text))
        .expect("response")
}

/// A stream whose end comes half a second after its last event, as some providers' do:
/// Codex closes the connection at `response.completed`, before the end.
fn lingering_stream(text: String) -> Response {
    let events = futures::stream::once(async move { Ok::<_, std::convert::Infallible>(text) });
    let end = futures::stream::once(async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        Ok(String::new())
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(futures::StreamExt::chain(events, end)))
        .expect("response")
}

fn refused(status: u16, message: &str) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(
            serde_json::json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}})
                .to_string(),
        ))
        .expect("response")
}

#[derive(Clone)]
struct ReplayState {
    speaks: Speaks,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

async fn replay(State(state): State<ReplayState>, request: http::Request<Body>) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.expect("body");
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let path = parts.uri.path().to_owned();
    state.requests.lock().expect("requests").push(Recorded {
        path: path.clone(),
        headers: parts.headers.clone(),
        body: body.clone(),
    });
    let second = after_tool_result(state.speaks, &body);
    let tool = shell_tool(&body);
    match state.speaks {
        Speaks::Chat if path.ends_with("/chat/completions") => match (second, tool) {
            (false, Some(tool)) => {
                stream(recording(&format!("chat_{}_call.sse", tool.to_lowercase())))
            }
            _ => stream(recording("chat_final.sse")),
        },
        Speaks::Messages if path.ends_with("/messages") => {
            // Anthropic's API refuses a beta field whose beta the call does not name.
            let betas = parts
                .headers
                .get_all("anthropic-beta")
                .iter()
                .filter_map(|value| value.to_str().ok())
                .collect::<Vec<_>>()
                .join(",");
            if body.get("context_management").is_some() && !betas.contains("context-management") {
                return refused(400, "context_management: Extra inputs are not permitted");
            }
            match (second, tool) {
                (false, Some(_)) => stream(recording("messages_bash_call.sse")),
                _ => stream(recording("messages_final.sse")),
            }
        }
        Speaks::Responses if path.ends_with("/responses") => match (second, tool) {
            (false, Some(_)) => lingering_stream(recording("responses_exec_command_call.sse")),
            _ => lingering_stream(recording("responses_final.sse")),
        },
        _ => refused(404, "not found"),
    }
}

/// A provider on port 0 that replays the recordings and keeps every request.
pub(crate) struct ReplayUpstream {
    address: std::net::SocketAddr,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl ReplayUpstream {
    pub(crate) async fn start(speaks: Speaks) -> Self {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let app = Router::new().fallback(replay).with_state(ReplayState {
            speaks,
            requests: requests.clone(),
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { address, requests }
    }

    fn base(&self) -> String {
        format!("http://{}", self.address)
    }

    fn all(&self) -> Vec<Recorded> {
        self.requests.lock().expect("requests").clone()
    }
}

/// Sandgate with one entry, `agent`, on `upstream` (the entry's extra settings in
/// `params`, YAML flow mapping members).
pub(crate) async fn gateway(
    upstream: &ReplayUpstream,
    model: &str,
    params: &str,
) -> (Sandgate, tempfile::NamedTempFile) {
    let base = upstream.base();
    let config = file_with(&format!(
        "model_list:\n  - model_name: agent\n    litellm_params: {{model: {model}, api_base: \"{base}/v1\", api_key: {UPSTREAM_KEY}{params}}}\n"
    ));
    let path = config.path().display().to_string();
    let sandgate = Sandgate::start_with(
        &Backend::embedded(),
        &["--gateway-config", &path, "--proxy-master-key", MASTER_KEY],
    )
    .await;
    (sandgate, config)
}

/// The spend log once it holds `count` entries (or what it holds at the deadline).
async fn spend_logs(sandgate: &Sandgate, count: usize) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let logs: Value = sandgate
            .client
            .get(sandgate.url("/spend/logs?limit=1000"))
            .bearer_auth(MASTER_KEY)
            .send()
            .await
            .expect("spend logs")
            .json()
            .await
            .expect("JSON");
        let logs = logs.as_array().cloned().unwrap_or_default();
        if logs.len() >= count || tokio::time::Instant::now() > deadline {
            return logs;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A CLI of `.tools/coding-agents/`, run in `workspace` with a home of its own.
pub(crate) fn cli(name: &str, workspace: &Path, home: &Path) -> Command {
    let mut command = Command::new(tool(
        &format!("coding-agents/node_modules/.bin/{name}"),
        REAL_CLIENTS,
    ));
    command
        .current_dir(workspace)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("DISABLE_TELEMETRY", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Runs `command`; its stdout, once it exited 0.
async fn run(mut command: Command) -> String {
    let output = tokio::time::timeout(Duration::from_secs(240), command.output())
        .await
        .expect("the CLI finished in time")
        .expect("the CLI ran");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the CLI failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// What every run must show: the file written by the tool call, the final text printed,
/// and each upstream call in the spend log with status 200.
pub(crate) async fn assert_the_turns_completed(
    sandgate: &Sandgate,
    upstream: &ReplayUpstream,
    workspace: &Path,
    stdout: &str,
) -> Vec<Recorded> {
    let made = std::fs::read_to_string(workspace.join("made.txt")).expect("the tool call ran");
    assert_eq!(made.trim(), "hello");
    assert!(stdout.contains(FINAL_TEXT), "{stdout}");
    let requests = upstream.all();
    assert!(requests.len() >= 2, "{} upstream calls", requests.len());
    let logs = spend_logs(sandgate, requests.len()).await;
    assert_eq!(logs.len(), requests.len(), "{logs:?}");
    for log in &logs {
        assert_eq!(log["status"], 200, "{log}");
    }
    requests
}

pub(crate) struct Dirs {
    _root: tempfile::TempDir,
    pub(crate) workspace: PathBuf,
    pub(crate) home: PathBuf,
}

pub(crate) fn dirs() -> Dirs {
    let root = tempfile::tempdir().expect("temp dir");
    let workspace = root.path().join("workspace");
    let home = root.path().join("home");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::create_dir_all(&home).expect("home");
    Dirs {
        workspace,
        home,
        _root: root,
    }
}

/// Claude Code in print mode, with the Bash tool allowed, on the gateway's `agent`.
fn claude_code(sandgate: &Sandgate, dirs: &Dirs) -> Command {
    let mut command = cli("claude", &dirs.workspace, &dirs.home);
    command
        .env("ANTHROPIC_BASE_URL", sandgate.url(""))
        .env("ANTHROPIC_AUTH_TOKEN", MASTER_KEY)
        .args([
            "-p",
            "Write hello into made.txt with the shell, then say so.",
            "--allowedTools",
            "Bash",
            "--model",
            "agent",
        ]);
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_runs_a_tool_through_an_openai_entry_on_a_chat_only_upstream() {
    let upstream = ReplayUpstream::start(Speaks::Chat).await;
    let (sandgate, _config) = gateway(&upstream, "openai/gpt-4.1", "").await;
    let dirs = dirs();
    let stdout = run(claude_code(&sandgate, &dirs)).await;
    let requests = assert_the_turns_completed(&sandgate, &upstream, &dirs.workspace, &stdout).await;
    // Claude Code's environment, a system message after the first user turn, is kept
    // where it is.
    let roles: Vec<&str> = requests[0].body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|message| message["role"].as_str())
        .collect();
    assert_eq!(roles.first(), Some(&"system"));
    assert!(roles[1..].contains(&"system"), "{roles:?}");
    assert!(requests.iter().all(|r| r.path == "/v1/chat/completions"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_runs_a_tool_through_a_native_entry_with_its_beta_features() {
    let upstream = ReplayUpstream::start(Speaks::Messages).await;
    let (sandgate, _config) = gateway(
        &upstream,
        "openai/claude-sonnet-4-5",
        ", messages_api: native",
    )
    .await;
    let dirs = dirs();
    let stdout = run(claude_code(&sandgate, &dirs)).await;
    let requests = assert_the_turns_completed(&sandgate, &upstream, &dirs.workspace, &stdout).await;
    // Client headers are not forwarded here, yet the API's own headers went: no call was
    // refused and retried without its beta features.
    for request in &requests {
        assert!(request.body.get("context_management").is_some());
        assert!(request.headers.contains_key("anthropic-beta"));
        assert!(request.headers.contains_key("anthropic-version"));
        assert!(request.headers.values().all(|value| !value.is_empty()));
    }
}

/// Codex's configuration (`$CODEX_HOME/config.toml`) for the gateway's `agent`, through a
/// provider that speaks the Responses API (the only wire API Codex 0.171 has), its
/// sandbox off (the sandbox needs bubblewrap; the test's workspace is a temporary
/// directory) and nothing asked; the directory, for `CODEX_HOME`.
pub(crate) fn codex_home(sandgate: &Sandgate, dirs: &Dirs) -> PathBuf {
    let codex_home = dirs.home.join(".codex");
    std::fs::create_dir_all(&codex_home).expect("codex home");
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model = \"agent\"\nmodel_provider = \"sandgate\"\nsandbox_mode = \"danger-full-access\"\napproval_policy = \"never\"\n\n[model_providers.sandgate]\nname = \"Sandgate\"\nbase_url = \"{}\"\nenv_key = \"SANDGATE_API_KEY\"\nwire_api = \"responses\"\n",
            sandgate.url("/v1")
        ),
    )
    .expect("codex config");
    codex_home
}

/// Codex `exec` on the gateway's `agent`.
fn codex(sandgate: &Sandgate, dirs: &Dirs) -> Command {
    let mut command = cli("codex", &dirs.workspace, &dirs.home);
    command
        .env("CODEX_HOME", codex_home(sandgate, dirs))
        .env("SANDGATE_API_KEY", MASTER_KEY)
        .args([
            "exec",
            "--skip-git-repo-check",
            "Write hello into made.txt with the shell, then say so.",
        ]);
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_runs_a_tool_through_a_responses_upstream() {
    let upstream = ReplayUpstream::start(Speaks::Responses).await;
    let (sandgate, _config) = gateway(&upstream, "openai/gpt-5-codex", "").await;
    let dirs = dirs();
    let stdout = run(codex(&sandgate, &dirs)).await;
    // Each answer's stream ends half a second after `response.completed`, where Codex
    // closes the connection: the calls are complete all the same (200, not 499).
    let requests = assert_the_turns_completed(&sandgate, &upstream, &dirs.workspace, &stdout).await;
    assert!(requests.iter().all(|r| r.path == "/v1/responses"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_runs_a_tool_through_a_chat_only_upstream_over_the_responses_bridge() {
    let upstream = ReplayUpstream::start(Speaks::Chat).await;
    let (sandgate, _config) = gateway(&upstream, "openai/gpt-4.1", ", responses_api: chat").await;
    let dirs = dirs();
    let stdout = run(codex(&sandgate, &dirs)).await;
    let requests = assert_the_turns_completed(&sandgate, &upstream, &dirs.workspace, &stdout).await;
    assert!(requests.iter().all(|r| r.path == "/v1/chat/completions"));
    // The second turn carries the call and its output, as chat completions need them.
    let messages = requests[1].body["messages"].as_array().expect("messages");
    let tool = messages
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("the tool's output");
    let call = messages
        .iter()
        .find(|m| m["tool_calls"].is_array())
        .expect("the assistant's call");
    assert_eq!(tool["tool_call_id"], call["tool_calls"][0]["id"]);
}
