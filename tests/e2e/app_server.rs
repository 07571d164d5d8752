//! The real OpenHands app server process (openhands-ai 1.11.0) on Sandgate, as an operator
//! runs it: Sandgate is its runtime API (the `process` driver, each sandbox a real
//! agent-server), the source of its sandbox specs (its warm runtime configurations) and
//! its users' model gateway (a virtual key in front of a fake upstream). Driven only
//! through the app server's REST API, as its web UI does
//! (`tests/real_clients/app_server_drive.py`): a cold conversation, a warm one on a pool
//! whose environment differs from the start's, a second message, a pause, a message
//! refused while paused, a resume and a message answered after it, what Sandgate joined
//! (the conversations in its catalog, each sandbox's start timeline), the deletes.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{REAL_CLIENTS, RUNTIME_KEY, SandgateProcess, Steps, tool};
use crate::process_sandboxes::serve_with;

const MASTER_KEY: &str = "sk-app-server-test-master-key-0123456789";
const POOL: &str = "v1_current";

/// The processes of `data`'s sandboxes: those whose `HOME` is a sandbox's.
fn sandbox_processes(data: &Path) -> Vec<String> {
    let home = format!("HOME={}/sandboxes/", data.display());
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .filter(|pid| pid.bytes().all(|byte| byte.is_ascii_digit()))
                .filter(|pid| {
                    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                        environ
                            .split(|byte| *byte == 0)
                            .any(|variable| variable.starts_with(home.as_bytes()))
                    })
                })
                .filter(|pid| crate::process_sandboxes::alive(pid))
                .collect()
        })
        .unwrap_or_default()
}

async fn spend_logs(sandgate: &SandgateProcess) -> Vec<Value> {
    reqwest::Client::new()
        .get(sandgate.url("/spend/logs"))
        .bearer_auth(MASTER_KEY)
        .send()
        .await
        .expect("spend logs")
        .json()
        .await
        .expect("JSON")
}

/// A conversation id as the gateway's session header carries it (the SDK's UUID).
fn hyphenated(hex: &str) -> String {
    uuid::Uuid::parse_str(hex)
        .expect("uuid")
        .hyphenated()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_app_server_runs_cold_warm_paused_and_resumed_conversations_on_sandgate() {
    let _turn = crate::common::real_agent_server_turn().await;
    let python = tool("app-server/bin/python", REAL_CLIENTS);
    // The data directory in a parent only its owner enters, as under /root on a new
    // machine: sandboxes reach their folders through their own view, not through it.
    let parent = tempfile::tempdir().expect("parent");
    std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let data = tempfile::tempdir_in(parent.path()).expect("data dir");
    let warm_file = data.path().join("warm-runtimes.json");
    // Empty: the driver, as the operator, defines the pool (Sandgate reloads the file).
    std::fs::write(&warm_file, json!({"count": 0, "configs": []}).to_string()).expect("write");
    let warm_path = warm_file.display().to_string();
    let mut sandgate = serve_with(
        data.path(),
        "60000",
        &[
            "--warm-runtimes-file",
            &warm_path,
            "--reconcile-interval",
            "0.5",
            "--proxy-master-key",
            MASTER_KEY,
            "--gateway-allowed-upstream-hosts",
            "127.0.0.1",
        ],
    )
    .await;
    let url = sandgate.url("");
    let steps = Steps::run(
        python,
        "tests/real_clients/app_server_drive.py",
        &[
            "--url",
            url.trim_end_matches('/'),
            "--api-key",
            RUNTIME_KEY,
            "--master-key",
            MASTER_KEY,
            "--warm-runtimes-file",
            &warm_path,
            "--pool",
            POOL,
        ],
        || format!("Sandgate:\n{}", sandgate.log()),
    )
    .await;

    // Cold while the pool is empty, saying why; warm once it is filled, although the
    // pool's environment is not the start's.
    let cold = steps.get("cold");
    assert_eq!(cold["record"]["pool"], Value::Null, "{cold}");
    assert!(
        cold["pools"]["pools"][0]["cold_starts"]["pool_empty"].as_i64() >= Some(1),
        "{cold}"
    );
    let warm = steps.get("warm");
    assert_eq!(warm["record"]["pool"], POOL, "{warm}");
    assert_eq!(warm["record"]["status"], "running", "{warm}");

    let second = steps.get("second_message");
    assert_eq!(
        (&second["status"], &second["answers"]),
        (&json!(200), &json!(2))
    );

    let paused = steps.get("paused");
    assert_eq!(paused["status"], 200, "{paused}");
    assert_eq!(paused["record"]["status"], "paused", "{paused}");
    assert_eq!(paused["refused"], 409, "a message while paused: {paused}");

    // After the resume the agent-server answers: it decrypts the conversation's saved LLM
    // key with the sandbox's secret key, which the resume kept, though its session key
    // changed.
    let resumed = steps.get("resumed");
    assert_eq!(resumed["message"], 200, "{resumed}");
    assert_eq!(resumed["answers"], 3, "{resumed}");
    assert_eq!(resumed["execution_status"], "finished", "{resumed}");
    assert_ne!(
        resumed["record"]["session_api_key"], warm["record"]["session_api_key"],
        "the resume rotates the session key"
    );

    // What Sandgate joined: each conversation in its catalog (the sandboxes post to it
    // as their second webhook), and each sandbox's start in order, to its first webhook
    // and its first LLM call (the gateway knew the conversation's sandbox from them).
    let joined = steps.get("joined");
    for (launch, reason) in [("cold", Some("pool_empty")), ("warm", None)] {
        let view = &joined[launch];
        assert_eq!(view["catalog_status"], 200, "{view}");
        let timeline = &view["sandbox"]["timeline"];
        assert_eq!(timeline["launch"], launch, "{timeline}");
        assert_eq!(timeline["cold_reason"].as_str(), reason, "{timeline}");
        let at = |phase: &str| {
            timeline[phase]
                .as_i64()
                .unwrap_or_else(|| panic!("no {phase}: {timeline}"))
        };
        let started = at("started_at_ms");
        assert!(started <= at("running_at_ms"), "{timeline}");
        assert!(at("running_at_ms") <= at("alive_at_ms"), "{timeline}");
        assert!(started <= at("first_webhook_at_ms"), "{timeline}");
        assert!(started <= at("first_llm_call_at_ms"), "{timeline}");
    }

    let deleted = steps.get("deleted");
    for conversation in [&cold["conversation"], &warm["conversation"]] {
        let conversation = conversation.as_str().expect("id");
        assert_eq!(deleted["conversations"][conversation], 200, "{deleted}");
    }
    for sandbox in [&cold["sandbox"], &warm["sandbox"]] {
        let sandbox = sandbox.as_str().expect("id");
        assert_eq!(deleted["sandboxes_stopped"][sandbox], true, "{deleted}");
    }

    // Every LLM call went through the gateway with its conversation's id as its session.
    let conversations = [&cold["conversation"], &warm["conversation"]]
        .map(|id| hyphenated(id.as_str().expect("id")));
    let logs = spend_logs(&sandgate).await;
    assert!(logs.len() >= 4, "{logs:?}");
    for entry in &logs {
        assert!(
            conversations.contains(&entry["session_id"].as_str().unwrap_or("").to_owned()),
            "a call without its conversation: {entry}"
        );
        assert_eq!(entry["status"], 200, "{entry}");
    }
    for conversation in &conversations {
        assert!(
            logs.iter()
                .any(|entry| entry["session_id"] == *conversation),
            "no call of {conversation}: {logs:?}"
        );
    }

    // The pool's replacement still runs until Sandgate stops; then nothing of any sandbox
    // is left.
    assert!(!sandbox_processes(data.path()).is_empty());
    sandgate.terminate().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left = sandbox_processes(data.path());
        if left.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "sandbox processes left after Sandgate stopped: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
