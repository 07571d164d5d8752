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
use crate::process_network::{port_of, written};
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
    let text = written(&workspace.join("calls.json"), Duration::from_secs(120)).await;
    serde_json::from_str(&text).expect("json")
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

/// Sandgate as root with a gateway entry answered by `upstream`, sandboxes under `data`;
/// its configuration file beside, kept as long as it runs.
async fn gateway_sandgate(
    upstream: &ScriptedUpstream,
    data: &Path,
) -> (SandgateProcess, tempfile::NamedTempFile) {
    let config = file_with(&format!(
        "model_list:\n  - model_name: chat\n    litellm_params: {{model: openai/up-model, api_base: \"{}/v1\", api_key: k}}\n",
        upstream.base()
    ));
    let config_path = config.path().display().to_string();
    let sandgate = serve_as(
        None,
        data,
        "8000",
        &[
            "--gateway-config",
            &config_path,
            "--proxy-master-key",
            MASTER_KEY,
        ],
    )
    .await;
    (sandgate, config)
}

/// A new virtual key: the key and its token.
async fn new_key(sandgate: &SandgateProcess) -> (String, String) {
    let (status, generated) = master(
        sandgate,
        "/key/generate",
        Some(json!({"key_alias": "sandbox-key"})),
    )
    .await;
    assert_eq!(status, 200, "{generated}");
    let field = |name: &str| generated[name].as_str().expect(name).to_owned();
    (field("key"), field("token"))
}

/// A sandbox of conversation `own` that runs [`CALLER`] with `key`, naming `other` last.
fn caller(sandgate: &SandgateProcess, key: &str, own: &str, other: &str) -> Value {
    let port = port_of(&sandgate.url(""));
    json!({
        "image": "local/caller",
        "command": serving("/usr/bin/python3 -c \"$CALLER\" &"),
        "working_dir": "/workspace",
        "session_id": own,
        "environment": {
            "CALLER": CALLER,
            "GATEWAY": format!("http://127.0.0.1:{port}/v1/chat/completions"),
            "KEY": key, "OWN": own, "OTHER": other,
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_sandbox_s_calls_carry_its_own_session_and_no_other() {
    if !require_root("process sandboxes' network namespaces (root makes them)") {
        return;
    }
    let upstream = ScriptedUpstream::start(Vec::new()).await;
    let data = tempfile::tempdir().expect("data");
    let (mut sandgate, _config) = gateway_sandgate(&upstream, data.path()).await;
    let (key, token) = new_key(&sandgate).await;
    let (key, token) = (key.as_str(), token.as_str());
    // The other conversation: a sandbox of its own.
    let (status, other) = call(
        &sandgate,
        "/start",
        Some(json!({"image": "local/plain", "command": serving(""),
            "working_dir": "/workspace", "session_id": "conv-b"})),
    )
    .await;
    assert_eq!(status, 200, "{other}");
    let (status, started) = call(
        &sandgate,
        "/start",
        Some(caller(&sandgate, key, "conv-a", "conv-b")),
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

/// What the hog does: opens as many connections to Sandgate's port (its door) as its
/// descriptors allow, up to 2,000, holds them without a request, writes how many
/// connected (`held.txt`), and keeps them.
const HOG: &str = r#"
import os, resource, socket, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = []
for _ in range(min(2000, hard - 50)):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", int(os.environ["SANDGATE_PORT"])))
    except OSError:
        break
    held.append(s)
with open("held.txt.part", "w") as out:
    out.write(str(len(held)))
os.rename("held.txt.part", "held.txt")
time.sleep(3600)
"#;

/// Sandgate's open descriptors.
fn descriptors(sandgate: &SandgateProcess) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", sandgate.pid())).map_or(0, Iterator::count)
}

/// A sandbox that holds a thousand idle connections to its door takes no more of
/// Sandgate's descriptors than a door holds (256), and another sandbox's calls go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_holding_connections_takes_neither_sandgate_s_descriptors_nor_others_calls() {
    if !require_root("process sandboxes' network namespaces (root makes them)") {
        return;
    }
    let upstream = ScriptedUpstream::start(Vec::new()).await;
    let data = tempfile::tempdir().expect("data");
    let (mut sandgate, _config) = gateway_sandgate(&upstream, data.path()).await;
    let (key, _) = new_key(&sandgate).await;
    let port = port_of(&sandgate.url(""));
    let (status, started) = call(
        &sandgate,
        "/start",
        Some(caller(&sandgate, &key, "conv-calls", "conv-hog")),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    let caller_id = started["runtime_id"].as_str().expect("id").to_owned();
    until_session(&sandgate, "conv-calls", "running").await;
    let before = descriptors(&sandgate);
    let (status, started) = call(
        &sandgate,
        "/start",
        Some(json!({
            "image": "local/hog",
            "command": serving("/usr/bin/python3 -c \"$HOG\" &"),
            "working_dir": "/workspace",
            "session_id": "conv-hog",
            "environment": {"HOG": HOG, "SANDGATE_PORT": port.to_string()},
        })),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    let hog = data
        .path()
        .join("sandboxes")
        .join(started["runtime_id"].as_str().expect("id"))
        .join("workspace");
    until_session(&sandgate, "conv-hog", "running").await;
    let held: usize = written(&hog.join("held.txt"), Duration::from_secs(120))
        .await
        .trim()
        .parse()
        .expect("a count");
    assert!(
        held > 500,
        "the hog held only {held}: the test needs more than a door's"
    );
    // Until Sandgate has taken what pasta brings it (its count stops moving), the most it
    // held: a door's connections, not the hog's.
    let (mut most, mut last, mut still) = (0, 0, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while still < 20 && tokio::time::Instant::now() < deadline {
        let now = descriptors(&sandgate);
        most = most.max(now);
        still = if now == last { still + 1 } else { 0 };
        last = now;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let grown = most.saturating_sub(before);
    assert!(
        grown <= 256 + 20,
        "a sandbox holding {held} connections took {grown} of Sandgate's descriptors"
    );
    // The other sandbox's calls go through its own door meanwhile.
    let workspace = data
        .path()
        .join("sandboxes")
        .join(&caller_id)
        .join("workspace");
    let seen = calls(&workspace).await;
    assert_eq!(seen["none"], 200, "{seen}");
    assert_eq!(seen["other"], 403, "{seen}");
    sandgate.terminate().await;
}
