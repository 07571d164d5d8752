//! The real clients, unchanged, on the `process` sandbox driver: the app server's
//! `RemoteSandboxService` starting a real agent-server that posts its conversation back to
//! Sandgate with its session key, across a pause and a resume; and the SDK's
//! `APIRemoteWorkspace` creating, attaching to and cleaning up a sandbox.

use std::path::PathBuf;

use crate::common::{REAL_CLIENTS, RUNTIME_KEY, SandgateProcess, Steps, tool};
use crate::process_sandboxes::serve_with;

/// The gateway's master key: the app server's driver adds its fake LLM as a model.
const MASTER_KEY: &str = "sk-process-real-clients-master-key-0123";

/// Runs a driver script with `python` against a Sandgate of its own on the process
/// driver, whose sandboxes name the agent-server port the real clients use (60000), and
/// whose gateway reaches a fake LLM on this machine's loopback: its data directory, the
/// server, and the script's steps.
async fn drive(
    python: PathBuf,
    script: &str,
    extra: &[&str],
) -> (tempfile::TempDir, SandgateProcess, Steps) {
    let data = tempfile::tempdir().expect("data dir");
    let sandgate = serve_with(
        data.path(),
        "60000",
        &[
            "--proxy-master-key",
            MASTER_KEY,
            "--gateway-allowed-upstream-hosts",
            "127.0.0.1",
            crate::console::CONSOLE_FLAGS[0],
            crate::console::CONSOLE_FLAGS[1],
            crate::console::CONSOLE_FLAGS[2],
        ],
    )
    .await;
    let url = sandgate.url("");
    let mut args = vec!["--url", url.as_str(), "--api-key", RUNTIME_KEY];
    args.extend(extra);
    let steps = Steps::run(python, script, &args, || {
        format!("Sandgate:\n{}", sandgate.log())
    })
    .await;
    (data, sandgate, steps)
}

/// Every sandbox's log under `data`, for a failure's message.
fn sandbox_logs(data: &std::path::Path) -> String {
    std::fs::read_dir(data.join("sandbox-state"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| {
            let log = std::fs::read_to_string(entry.path().join("sandbox.log")).unwrap_or_default();
            format!("--- {}:\n{log}", entry.path().display())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_server_runs_a_real_agent_server_that_posts_back_across_a_resume() {
    let _turn = crate::common::real_agent_server_turn().await;
    let (data, mut sandgate, steps) = drive(
        tool("app-server/bin/python", REAL_CLIENTS),
        "tests/real_clients/process_sandbox_drive.py",
        &["--master-key", MASTER_KEY],
    )
    .await;

    assert_eq!(
        steps.get("running")["health"],
        200,
        "{}",
        steps.get("running")
    );
    let runtime_id = steps.get("running")["id"].as_str().expect("id").to_owned();
    assert!(steps.get("first_turn")["recorded_events"].as_u64() > Some(0));
    assert_eq!(steps.get("pause")["ok"], true);
    assert_eq!(steps.get("paused")["status"], "PAUSED");
    assert_eq!(steps.get("paused")["agent_server_gone"], true);
    assert_eq!(steps.get("resume")["ok"], true);
    assert_eq!(steps.get("resumed")["key_rotated"], true);
    assert_eq!(steps.get("resumed")["same_url"], true);
    // The second turn's events reached Sandgate: the agent-server posted them with the
    // key it was resumed with, and the first one is refused.
    assert!(
        steps.get("second_turn")["recorded_events"].as_u64()
            > steps.get("first_turn")["recorded_events"].as_u64()
    );
    assert_eq!(
        steps.get("old_key")["status"],
        401,
        "{}",
        steps.get("old_key")
    );
    assert_eq!(steps.get("delete")["ok"], true);
    assert_eq!(steps.get("deleted")["found"], false);
    assert!(!data.path().join("sandboxes").join(&runtime_id).exists());
    // The conversation, in the operator's console: what its agent's calls cost and how
    // long its sandbox ran, as the API says.
    crate::console::a_real_conversation_in_the_console(&sandgate.url(""), MASTER_KEY).await;
    sandgate.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_s_api_remote_workspace_creates_attaches_and_cleans_up() {
    let _turn = crate::common::real_agent_server_turn().await;
    let (data, mut sandgate, steps) = drive(
        tool("agent-server-1.58.2/bin/python", REAL_CLIENTS),
        "tests/real_clients/remote_workspace_drive.py",
        &[],
    )
    .await;

    let create = steps.get("create");
    assert_eq!(
        create["exit_code"],
        0,
        "{create}\n{}",
        sandbox_logs(data.path())
    );
    assert_eq!(create["stdout"], "created-42");
    assert!(
        create["host"]
            .as_str()
            .is_some_and(|host| host.starts_with("http://127.0.0.1:"))
    );
    let attach = steps.get("attach");
    assert_eq!(attach["same_host"], true, "{attach}");
    assert_eq!(attach["exit_code"], 0);
    let cleanup = steps.get("cleanup");
    assert_eq!(cleanup["status"], "stopped", "{cleanup}");
    let runtime_id = cleanup["runtime_id"].as_str().expect("id");
    assert!(!data.path().join("sandboxes").join(runtime_id).exists());
    // A SIGKILL (the drop) would leave what still runs running.
    sandgate.terminate().await;
}
