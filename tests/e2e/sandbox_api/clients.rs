//! What the real clients send and read (design.md, "Runtime API clients"): their
//! command shapes, fields Sandgate has no use for, the legacy `pod_status`, and `/list`.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{action, call};
use crate::common::{Backend, Sandgate};

/// What the real clients send and read (design.md, "Runtime API clients"): `command` as
/// one command line (the SDK's `APIRemoteWorkspace`) or null (the app server's
/// `RemoteSandboxService`), fields Sandgate has no use for, the legacy `pod_status`, and a
/// `/list` of what they count as running.
async fn the_shapes_the_real_clients_send_and_read(backend: Backend) {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    let text = json!({"count": 1, "configs": [
        {"name": "v1_current", "image": "ghcr.io/acme/agent:1.0", "working_dir": "/workspace",
         "command": ["/usr/local/bin/agent-server", "--port", "8000"], "environment": {}},
    ]});
    std::fs::write(file.path(), text.to_string()).expect("write");
    let path = file.path().display().to_string();
    let sandgate = Sandgate::start_with(&backend, &["--warm-runtimes-file", &path]).await;
    sandgate.first_pool_ready(1, Duration::from_secs(10)).await;

    // One command line, split as a shell splits words: the same arguments as the pool's,
    // so it claims the warm sandbox. Unknown fields are ignored.
    let (status, claimed) = call(
        &sandgate,
        reqwest::Method::POST,
        "/start",
        Some(json!({
            "image": "ghcr.io/acme/agent:1.0",
            "command": "/usr/local/bin/agent-server  '--port' \"8000\"",
            "working_dir": "/workspace",
            "environment": {},
            "session_id": "conv-line",
            "kubernetes": {"node_selector": {"pool": "agents"}},
            "api_key": null,
        })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    assert_eq!(claimed["warm"], true, "{claimed}");
    assert_eq!(claimed["status"], "running");
    assert_eq!(claimed["pod_status"], "ready");
    assert_eq!(claimed["restart_count"], 0);
    assert_eq!(claimed["restart_reasons"], json!([]));

    // null: the image's own entrypoint, a cold start.
    let (status, cold) = call(
        &sandgate,
        reqwest::Method::POST,
        "/start",
        Some(json!({
            "image": "ghcr.io/acme/agent:1.0", "command": null, "working_dir": "/workspace",
            "environment": {}, "session_id": "conv-null",
        })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{cold}");
    assert_eq!(cold["warm"], false);
    assert_eq!(cold["pod_status"], "pending", "{cold}");
    let cold_id = cold["runtime_id"].as_str().expect("runtime_id").to_owned();

    // A line no shell could split: 422 at the field, the input echoed.
    let (status, refused) = call(
        &sandgate,
        reqwest::Method::POST,
        "/start",
        Some(json!({
            "image": "ghcr.io/acme/agent:1.0", "command": "/agent 'unclosed",
            "working_dir": "/workspace", "environment": {},
        })),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(refused["detail"][0]["loc"], json!(["body", "command"]));
    assert_eq!(refused["detail"][0]["input"], "/agent 'unclosed");

    // Paused: no pod; /list leaves it out unless show_all.
    let (_, paused) = action(&sandgate, "pause", &cold_id).await;
    assert_eq!(paused["pod_status"], "not found", "{paused}");
    let listed_ids = |listed: &Value| -> Vec<String> {
        listed["runtimes"]
            .as_array()
            .expect("runtimes")
            .iter()
            .map(|runtime| {
                runtime["session_id"]
                    .as_str()
                    .expect("session_id")
                    .to_owned()
            })
            .collect()
    };
    let (_, listed) = call(&sandgate, reqwest::Method::GET, "/list", None).await;
    assert_eq!(listed_ids(&listed), ["conv-line"], "{listed}");
    assert_eq!(listed["total"], 1);
    let (_, all) = call(&sandgate, reqwest::Method::GET, "/list?show_all=true", None).await;
    let mut ids = listed_ids(&all);
    ids.sort();
    assert_eq!(ids, ["conv-line", "conv-null"], "{all}");
    assert_eq!(all["total"], 2);
    let (status, refused) = call(
        &sandgate,
        reqwest::Method::GET,
        "/list?show_all=maybe",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(refused["detail"][0]["loc"], json!(["query", "show_all"]));
}

crate::on_both_backends!(the_shapes_the_real_clients_send_and_read);
