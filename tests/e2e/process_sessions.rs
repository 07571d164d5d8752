//! A session belongs to its conversation (issue 51, point 3) for `process` sandboxes in
//! networks of their own (issue 50), from the hostile side, inside real sandboxes on the
//! real `sandgate` binary as root. pasta makes every sandbox's connection to Sandgate from
//! this machine's `127.0.0.1`, so its TCP peer says nothing: each sandbox reaches Sandgate
//! through a door of its own. A sandbox's call without a session gets its own; naming its
//! own is allowed; naming another sandbox's conversation is refused; a call from this
//! machine with the same key, naming the sandbox's session, is refused (this machine's
//! loopback is not the sandbox); and after a pause and a resume (another door) the same
//! holds.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::scripted_upstream::ScriptedUpstream;
use crate::common::{SandgateProcess, file_with, require_root};
use crate::model_gateway::MASTER_KEY;
use crate::process_network::port_of;
use crate::process_sandboxes::{act, call, serve_as, serving, until_session};

/// What the caller does once `go` appears in its working directory: a chat completion
/// through Sandgate's gateway (`$GATEWAY`, key `$KEY`) without a session, naming its own
/// (`$OWN`) and naming another's (`$OTHER`); the statuses into `calls.json`.
const CALLER: &str = r#"
import json, os, time, urllib.error, urllib.request
while not os.path.exists("go"):
    time.sleep(0.05)
seen = {}
for name, session in [("none", None), ("own", os.environ["OWN"]), ("other", os.environ["OTHER"])]:
    request = urllib.request.Request(os.environ["GATEWAY"], method="POST",
        data=json.dumps({"model": "chat", "messages": [{"role": "user", "content": "hi"}]}).encode(),
        headers={"authorization": "Bearer " + os.environ["KEY"], "content-type": "application/json"})
    if session:
        request.add_header("x-litellm-session-id", session)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            seen[name] = answer.status
    except urllib.error.HTTPError as e:
        seen[name] = e.code
    except Exception as e:
        seen[name] = type(e).__name__
with open("calls.json.part", "w") as out:
    json.dump(seen, out)
os.rename("calls.json.part", "calls.json")
"#;

/// `body` to `path` of the gateway with the master key; its status and JSON.
async fn master(sandgate: &SandgateProcess, path: &str, body: Option<Value>) -> (u16, Value) {
    let client = reqwest::Client::new();
    let request = match body {
        Some(body) => client.post(sandgate.url(path)).json(&body),
        None => client.get(sandgate.url(path)),
    };
    let answer = request.bearer_auth(MASTER_KEY).send().await.expect("send");
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap_or(Value::Null))
}

/// Lets the caller in `workspace` go, and reads what it found.
async fn calls(workspace: &Path) -> Value {
    std::fs::write(workspace.join("go"), "").expect("go");
    let file = workspace.join("calls.json");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(text) = std::fs::read_to_string(&file) {
            return serde_json::from_str(&text).expect("json");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {}",
            file.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The spend log entries of `token`'s answered calls (refused ones are logged too), once
/// there are `count`.
async fn answered(sandgate: &SandgateProcess, token: &str, count: usize) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, logs) = master(sandgate, "/spend/logs", None).await;
        let mine: Vec<Value> = logs
            .as_array()
            .into_iter()
            .flatten()
            .filter(|entry| entry["api_key"] == token && entry["status"] == 200)
            .cloned()
            .collect();
        if mine.len() >= count {
            return mine;
        }
        assert!(tokio::time::Instant::now() < deadline, "{logs}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_sandbox_s_calls_carry_its_own_session_and_no_other() {
    if !require_root("process sandboxes' network namespaces (root makes them)") {
        return;
    }
    let upstream = ScriptedUpstream::start(Vec::new()).await;
    let config = file_with(&format!(
        "model_list:\n  - model_name: chat\n    litellm_params: {{model: openai/up-model, api_base: \"{}/v1\", api_key: k}}\n",
        upstream.base()
    ));
    let data = tempfile::tempdir().expect("data");
    let config_path = config.path().display().to_string();
    let mut sandgate = serve_as(
        None,
        data.path(),
        "8000",
        &[
            "--gateway-config",
            &config_path,
            "--proxy-master-key",
            MASTER_KEY,
        ],
    )
    .await;
    let (status, generated) = master(
        &sandgate,
        "/key/generate",
        Some(json!({"key_alias": "sandbox-key"})),
    )
    .await;
    assert_eq!(status, 200, "{generated}");
    let key = generated["key"].as_str().expect("key");
    let token = generated["token"].as_str().expect("token");
    // The other conversation: a sandbox of its own.
    let (status, other) = call(
        &sandgate,
        "/start",
        Some(json!({"image": "local/plain", "command": serving(""),
            "working_dir": "/workspace", "session_id": "conv-b"})),
    )
    .await;
    assert_eq!(status, 200, "{other}");
    let port = port_of(&sandgate.url(""));
    let (status, started) = call(
        &sandgate,
        "/start",
        Some(json!({
            "image": "local/caller",
            "command": serving("/usr/bin/python3 -c \"$CALLER\" &"),
            "working_dir": "/workspace",
            "session_id": "conv-a",
            "environment": {
                "CALLER": CALLER,
                "GATEWAY": format!("http://127.0.0.1:{port}/v1/chat/completions"),
                "KEY": key, "OWN": "conv-a", "OTHER": "conv-b",
            },
        })),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    let id = started["runtime_id"].as_str().expect("id").to_owned();
    until_session(&sandgate, "conv-a", "running").await;
    until_session(&sandgate, "conv-b", "running").await;
    let workspace = data.path().join("sandboxes").join(&id).join("workspace");

    let seen = calls(&workspace).await;
    assert_eq!(seen["none"], 200, "{seen}\n{}", sandgate.log());
    assert_eq!(seen["own"], 200, "{seen}");
    assert_eq!(seen["other"], 403, "{seen}");
    // The call that named none counted for its sandbox's conversation.
    let logged = answered(&sandgate, token, 2).await;
    assert!(
        logged.iter().all(|entry| entry["session_id"] == "conv-a"),
        "{logged:?}"
    );
    // The same key from this machine is not the sandbox, loopback or not.
    let answer = reqwest::Client::new()
        .post(sandgate.url("/v1/chat/completions"))
        .bearer_auth(key)
        .header("x-litellm-session-id", "conv-a")
        .json(&json!({"model": "chat", "messages": []}))
        .send()
        .await
        .expect("send");
    assert_eq!(answer.status(), 403);

    // After a pause and a resume, another door, known as the same sandbox.
    assert_eq!(act(&sandgate, "pause", &id).await, 200);
    until_session(&sandgate, "conv-a", "paused").await;
    for file in ["go", "calls.json"] {
        std::fs::remove_file(workspace.join(file)).expect("rm");
    }
    assert_eq!(act(&sandgate, "resume", &id).await, 200);
    until_session(&sandgate, "conv-a", "running").await;
    let again = calls(&workspace).await;
    assert_eq!(again["none"], 200, "{again}");
    assert_eq!(again["own"], 200, "{again}");
    assert_eq!(again["other"], 403, "{again}");
    let logged = answered(&sandgate, token, 4).await;
    assert!(
        logged.iter().all(|entry| entry["session_id"] == "conv-a"),
        "{logged:?}"
    );
    // The four answered calls reached the upstream; no refused one did.
    assert_eq!(upstream.bodies().len(), 4);
    sandgate.terminate().await;
}
