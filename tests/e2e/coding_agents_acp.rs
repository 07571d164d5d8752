//! The coding agents' ACP adapters, as an OpenHands `ACPAgent` (or Zed) launches them,
//! through the model gateway (issue 41): claude-code-acp running the current Claude Code
//! CLI, and codex-acp, each given one prompt over the Agent Client Protocol by
//! `tests/real_clients/acp_drive.py`, which grants what the agent asks. The providers are
//! the fakes of [`crate::coding_agents`], replaying recorded streams.

use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

use crate::coding_agents::{
    Dirs, FINAL_TEXT, ReplayUpstream, Speaks, assert_the_turns_completed, codex_home, dirs, gateway,
};
use crate::common::{REAL_CLIENTS, driver_report, repository, tool};
use crate::model_gateway::MASTER_KEY;

const PROMPT: &str = "Write hello into made.txt with the shell, then say so.";

/// The ACP driver for the adapter `name` of `.tools/coding-agents/`, in `dirs`.
fn driver(name: &str, dirs: &Dirs) -> Command {
    let mut command = Command::new(tool("llm-clients/bin/python", REAL_CLIENTS));
    command
        .arg(repository("tests/real_clients/acp_drive.py"))
        .args(["--cwd", &dirs.workspace.display().to_string()])
        .args(["--prompt", PROMPT, "--"])
        .arg(tool(
            &format!("coding-agents/node_modules/.bin/{name}"),
            REAL_CLIENTS,
        ))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &dirs.home)
        .env("DISABLE_TELEMETRY", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    command
}

async fn report(command: Command) -> Value {
    tokio::time::timeout(Duration::from_secs(240), driver_report(command))
        .await
        .expect("the agent answered in time")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_acp_runs_a_tool_through_an_openai_entry() {
    let upstream = ReplayUpstream::start(Speaks::Chat).await;
    let (sandgate, _config) = gateway(&upstream, "openai/gpt-4.1", "").await;
    let dirs = dirs();
    let mut command = driver("claude-code-acp", &dirs);
    command
        .env("ANTHROPIC_BASE_URL", sandgate.url(""))
        .env("ANTHROPIC_AUTH_TOKEN", MASTER_KEY)
        // The adapter picks among Claude's model families: each is the gateway's `agent`.
        .env("ANTHROPIC_MODEL", "agent")
        .env("ANTHROPIC_DEFAULT_OPUS_MODEL", "agent")
        .env("ANTHROPIC_DEFAULT_SONNET_MODEL", "agent")
        .env("ANTHROPIC_DEFAULT_HAIKU_MODEL", "agent")
        // The current CLI, not the one the adapter's SDK bundles.
        .env(
            "CLAUDE_CODE_EXECUTABLE",
            tool("coding-agents/node_modules/.bin/claude", REAL_CLIENTS),
        )
        // The adapter runs Claude Code with permission bypass allowed, which Claude Code
        // refuses as root unless told it is in a sandbox (CI containers run as root).
        .env("IS_SANDBOX", "1");
    let report = report(command).await;
    assert_eq!(report["stop_reason"], "end_turn", "{report}");
    let text = report["text"].as_str().unwrap_or_default().to_owned();
    assert_the_turns_completed(&sandgate, &upstream, &dirs.workspace, &text).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_acp_runs_a_tool_through_a_chat_only_upstream_over_the_bridge() {
    let upstream = ReplayUpstream::start(Speaks::Chat).await;
    let (sandgate, _config) = gateway(&upstream, "openai/gpt-4.1", ", responses_api: chat").await;
    let dirs = dirs();
    let mut command = driver("codex-acp", &dirs);
    command
        .env("CODEX_HOME", codex_home(&sandgate, &dirs))
        .env("SANDGATE_API_KEY", MASTER_KEY);
    let report = report(command).await;
    assert_eq!(report["stop_reason"], "end_turn", "{report}");
    let text = report["text"].as_str().unwrap_or_default();
    assert!(text.contains(FINAL_TEXT), "{report}");
    assert_the_turns_completed(&sandgate, &upstream, &dirs.workspace, text).await;
}
