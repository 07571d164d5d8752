//! The sandbox lifecycle API over REST (design.md), on the local driver: statuses and
//! bodies, and the session keys it issues as the webhook sees them.
//!
//! This file holds the calls the tests make; the tests are by concern: the lifecycle, its
//! session keys and its error statuses (`lifecycle.rs`), the pools (`pools.rs`), and the
//! shapes the real clients send and read (`clients.rs`).

mod clients;
mod lifecycle;
mod pools;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{RUNTIME_KEY, Sandgate, conversation};

fn start_body(session_id: &str) -> Value {
    json!({
        "image": "ghcr.io/acme/agent:1.0",
        "command": ["/usr/local/bin/agent-server", "--port", "8000"],
        "working_dir": "/workspace",
        "environment": {"LOG_LEVEL": "info"},
        "session_id": session_id,
        "resource_factor": 1,
        "run_as_user": 1000, "run_as_group": 1000, "fs_group": 1000,
    })
}

async fn call(
    sandgate: &Sandgate,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = sandgate
        .client
        .request(method, sandgate.url(path))
        .header("x-api-key", RUNTIME_KEY);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request");
    let status = response.status();
    let text = response.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}")),
    )
}

async fn action(sandgate: &Sandgate, verb: &str, runtime_id: &str) -> (StatusCode, Value) {
    call(
        sandgate,
        reqwest::Method::POST,
        &format!("/{verb}"),
        Some(json!({ "runtime_id": runtime_id })),
    )
    .await
}

async fn deliver(
    sandgate: &Sandgate,
    key: &str,
    id: &str,
    updated_at: &str,
) -> (StatusCode, Value) {
    let response = sandgate
        .deliver(key, conversation(id, updated_at, "running").to_string())
        .await;
    let status = response.status();
    (status, response.json().await.expect("JSON"))
}
