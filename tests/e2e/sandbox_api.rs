//! The sandbox lifecycle API over REST (design.md), on the local driver: statuses and
//! bodies, and the session keys it issues as the webhook sees them.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, RUNTIME_KEY, Sandgate, conversation, new_id};

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

async fn the_lifecycle_and_its_session_keys(backend: Backend) {
    let sandgate = Sandgate::start(&backend).await;
    let session = "conv-0001";

    let (status, started) = call(
        &sandgate,
        reqwest::Method::POST,
        "/start",
        Some(start_body(session)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let runtime_id = started["runtime_id"]
        .as_str()
        .expect("runtime_id")
        .to_owned();
    assert_eq!(started["session_id"], session);
    assert_eq!(started["status"], "starting");
    assert_eq!(started["warm"], false, "no pool configured: a cold start");
    assert_eq!(
        started["url"],
        format!("http://{runtime_id}-runtime.localhost")
    );
    assert_eq!(started["image"], "ghcr.io/acme/agent:1.0");
    let first_key = started["session_api_key"].as_str().expect("key").to_owned();
    assert_eq!(first_key.len(), 64);

    let (status, got) = call(
        &sandgate,
        reqwest::Method::GET,
        &format!("/sessions/{session}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got["runtime_id"], runtime_id.as_str());
    assert_eq!(got["session_api_key"], first_key.as_str());
    let (status, batch) = call(
        &sandgate,
        reqwest::Method::GET,
        &format!("/sessions/batch?ids={session}&ids=unknown-session"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(batch.as_array().map(Vec::len), Some(2));
    assert_eq!(batch[0]["runtime_id"], runtime_id.as_str());
    assert_eq!(batch[1], Value::Null);
    let (_, listed) = call(&sandgate, reqwest::Method::GET, "/list", None).await;
    assert_eq!(listed["total"], 1);
    assert_eq!(listed["runtimes"][0]["runtime_id"], runtime_id.as_str());

    // The sandbox's key is a webhook key; the conversation is attributed to it.
    let conversation_id = new_id();
    let (status, body) = deliver(
        &sandgate,
        &first_key,
        &conversation_id,
        "2026-03-01T12:00:00Z",
    )
    .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"success": true})));
    let (_, other) = call(
        &sandgate,
        reqwest::Method::POST,
        "/start",
        Some(start_body("conv-0002")),
    )
    .await;
    let other_key = other["session_api_key"].as_str().expect("key");
    let read_as = |key: String| {
        let request = sandgate
            .client
            .get(sandgate.url(&format!("/api/v1/conversations/{conversation_id}")))
            .header("x-session-api-key", key);
        async move { request.send().await.expect("request").status() }
    };
    assert_eq!(
        read_as(first_key.clone()).await,
        StatusCode::OK,
        "its sandbox reads it"
    );
    assert_eq!(
        read_as(other_key.to_owned()).await,
        StatusCode::NOT_FOUND,
        "another does not"
    );

    // Another sandbox may not write it.
    let (status, body) = deliver(
        &sandgate,
        other_key,
        &conversation_id,
        "2026-03-01T12:01:00Z",
    )
    .await;
    assert_eq!(
        (status, body),
        (StatusCode::UNAUTHORIZED, json!({"detail": "Unauthorized"}))
    );

    // Resume needs a paused sandbox; it rotates the key.
    let (status, body) = action(&sandgate, "resume", &runtime_id).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (status, paused) = action(&sandgate, "pause", &runtime_id).await;
    assert_eq!(
        (status, paused["status"].as_str()),
        (StatusCode::OK, Some("paused"))
    );
    let (status, resumed) = action(&sandgate, "resume", &runtime_id).await;
    assert_eq!(
        (status, resumed["status"].as_str()),
        (StatusCode::OK, Some("starting"))
    );
    let second_key = resumed["session_api_key"].as_str().expect("key").to_owned();
    assert_ne!(second_key, first_key);
    let (status, body) = deliver(
        &sandgate,
        &first_key,
        &conversation_id,
        "2026-03-01T12:02:00Z",
    )
    .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::UNAUTHORIZED,
            json!({"detail": "Invalid session API key"})
        )
    );
    let (status, _) = deliver(
        &sandgate,
        &second_key,
        &conversation_id,
        "2026-03-01T12:03:00Z",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "the new key is the same sandbox");

    let (status, stopped) = action(&sandgate, "stop", &runtime_id).await;
    assert_eq!(
        (status, stopped["status"].as_str()),
        (StatusCode::OK, Some("stopped"))
    );
    let (status, _) = deliver(
        &sandgate,
        &second_key,
        &conversation_id,
        "2026-03-01T12:04:00Z",
    )
    .await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "a stopped sandbox's key is revoked"
    );
    let (status, body) = action(&sandgate, "pause", &runtime_id).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
}

async fn errors_answer_with_the_contracts_statuses(backend: Backend) {
    let sandgate = Sandgate::start(&backend).await;
    // No key, a wrong key.
    for key in [None, Some("wrong")] {
        let mut request = sandgate
            .client
            .post(sandgate.url("/start"))
            .json(&start_body("s"));
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        let response = request.send().await.expect("request");
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let body: Value = response.json().await.expect("JSON");
        assert_eq!(body, json!({"detail": "provide a valid API key"}));
    }
    // A missing field, a wrong type, a bad value: 422 at the field.
    let mut missing = start_body("s");
    missing.as_object_mut().expect("object").remove("image");
    let (status, body) = call(
        &sandgate,
        reqwest::Method::POST,
        "/start",
        Some(missing.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["loc"], json!(["body", "image"]));
    assert_eq!(body["detail"][0]["type"], "missing");
    // FastAPI echoes the input: the object a field is missing from, the value of the
    // wrong type.
    assert_eq!(body["detail"][0]["input"], missing);
    let mut mistyped = start_body("s");
    mistyped["run_as_user"] = json!("root");
    let (status, body) = call(&sandgate, reqwest::Method::POST, "/start", Some(mistyped)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["loc"], json!(["body", "run_as_user"]));
    assert_eq!(body["detail"][0]["type"], "int_type");
    assert_eq!(body["detail"][0]["input"], "root");
    let mut relative = start_body("s");
    relative["working_dir"] = json!("workspace");
    let (status, body) = call(&sandgate, reqwest::Method::POST, "/start", Some(relative)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["loc"], json!(["body", "working_dir"]));
    // Resources no node has, or too few for the agent server to run (1m CPU, 1Mi).
    for factor in [json!(1000), json!(0.0001)] {
        let mut sized = start_body("s");
        sized["resource_factor"] = factor.clone();
        let (status, body) = call(&sandgate, reqwest::Method::POST, "/start", Some(sized)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{factor}");
        assert_eq!(body["detail"][0]["loc"], json!(["body", "resource_factor"]));
        assert_eq!(body["detail"][0]["input"], factor);
        assert!(
            body["detail"][0]["msg"]
                .as_str()
                .is_some_and(|msg| msg.contains("between 0.5 and 16")),
            "{body}"
        );
    }
    let (status, body) = call(
        &sandgate,
        reqwest::Method::POST,
        "/start",
        Some(start_body("not a/valid id")),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["loc"], json!(["body", "session_id"]));
    let (status, body) = call(&sandgate, reqwest::Method::POST, "/pause", Some(json!({}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["loc"], json!(["body", "runtime_id"]));

    // Unknown ids.
    let (status, body) = call(&sandgate, reqwest::Method::GET, "/sessions/nobody", None).await;
    assert_eq!(
        (status, body),
        (
            StatusCode::NOT_FOUND,
            json!({"detail": "Session nobody not found"})
        )
    );
    let (status, body) = action(&sandgate, "pause", "nothing").await;
    assert_eq!(
        (status, body),
        (
            StatusCode::NOT_FOUND,
            json!({"detail": "Runtime nothing not found"})
        )
    );
    let (status, listed) = call(&sandgate, reqwest::Method::GET, "/list", None).await;
    assert_eq!(
        (status, listed),
        (StatusCode::OK, json!({"total": 0, "runtimes": []}))
    );
}

async fn the_pools_endpoint_lists_every_effective_configuration(backend: Backend) {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    let text = json!({"count": 2, "configs": [
        {"name": "v1_current", "image": "ghcr.io/acme/agent:1.0", "working_dir": "/workspace",
         "command": ["/agent"], "environment": {}},
        {"name": "big", "image": "ghcr.io/acme/big:1.0", "working_dir": "/workspace",
         "command": ["/agent"], "environment": {}, "count": 0},
    ]});
    std::fs::write(file.path(), text.to_string()).expect("write");
    let path = file.path().display().to_string();
    let sandgate = Sandgate::start_with(&backend, &["--warm-runtimes-file", &path]).await;
    let response = sandgate
        .client
        .get(sandgate.url("/api/warm-runtime-pools"))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let (status, body) = call(
        &sandgate,
        reqwest::Method::GET,
        "/api/warm-runtime-pools",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let pools = body["pools"].as_array().expect("pools");
    let names: Vec<_> = pools
        .iter()
        .map(|pool| (pool["name"].clone(), pool["target"].clone()))
        .collect();
    assert_eq!(
        names,
        [(json!("big"), json!(0)), (json!("v1_current"), json!(2))]
    );
    for pool in pools {
        let counted =
            pool["ready"].as_i64().expect("ready") + pool["starting"].as_i64().expect("starting");
        assert!(
            counted <= pool["target"].as_i64().expect("target"),
            "{pool}"
        );
        assert_eq!(pool["failed"], 0);
        let state = pool["state"].as_str().unwrap_or_default();
        assert!(matches!(state, "ready" | "filling"), "{pool}");
    }
    // A pool of 0 holds its target.
    assert_eq!(pools[0]["state"], "ready");
}

/// A save wakes the reconciler at once: the pool fills long before the (hour-long)
/// interval. Waits for the pool's status with a deadline, never a fixed sleep.
async fn a_saved_configuration_fills_its_pool_at_once(backend: Backend) {
    let sandgate = crate::admin::start(
        &backend,
        None,
        &[
            "--reconcile-interval",
            "3600",
            "--local-sandbox-start-seconds",
            "0.01",
        ],
    )
    .await;
    let token = crate::admin::login(&sandgate).await;
    let mut config = start_body("");
    let object = config.as_object_mut().expect("object");
    object.remove("session_id");
    object.remove("resource_factor");
    object.insert("count".into(), json!(3));
    let (status, body) = crate::admin::put(&sandgate, &token, "custom", &config).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let pools = sandgate.first_pool_ready(3, Duration::from_secs(20)).await;
    assert_eq!(pools["pools"][0]["name"], "custom");
    // A start with the saved spec now claims one of them.
    let (_, started) = call(
        &sandgate,
        reqwest::Method::POST,
        "/start",
        Some(start_body("conv-claim")),
    )
    .await;
    assert_eq!(started["warm"], true, "{started}");
    assert_eq!(started["pool"], "custom");
}

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

crate::on_both_backends!(
    a_saved_configuration_fills_its_pool_at_once,
    the_shapes_the_real_clients_send_and_read,
    the_lifecycle_and_its_session_keys,
    errors_answer_with_the_contracts_statuses,
    the_pools_endpoint_lists_every_effective_configuration,
);
