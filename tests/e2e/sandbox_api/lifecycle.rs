//! The lifecycle over REST (start, pause, resume, stop, list) with the session keys it
//! issues as the webhook sees them, and the contract's statuses for every error.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{action, call, deliver, start_body};
use crate::common::{Backend, Sandgate, new_id};

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

crate::on_both_backends!(
    the_lifecycle_and_its_session_keys,
    errors_answer_with_the_contracts_statuses,
);
