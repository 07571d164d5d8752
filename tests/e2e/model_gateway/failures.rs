//! Upstream failures as the client sees them: each mapped to its status, and an answer that
//! is not JSON wrapped in OpenAI's error object.

use serde_json::{Value, json};

use crate::common::Backend;

use super::*;

/// The SDKs read a failed answer as a JSON error object: an upstream's page that is not
/// one reaches them wrapped in one, its status and text kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_failure_that_is_not_json_reaches_the_client_as_an_error_object() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;
    for path in ["/v1/embeddings", "/v1/chat/completions", "/v1/responses"] {
        let response = gateway
            .post(
                path,
                &json!({"model": "x/html", "input": "x", "messages": []}),
            )
            .send()
            .await
            .expect("answer");
        let status = response.status();
        assert_eq!(
            status,
            404,
            "{path}: {}",
            response.text().await.unwrap_or_default()
        );
        assert_eq!(
            response.headers()["content-type"],
            "application/json",
            "{path}"
        );
        let body: Value = response.json().await.expect("JSON");
        assert_openai_error(&body);
        assert_eq!(body["error"]["type"], "not_found_error", "{path}");
        assert_eq!(
            body["error"]["message"], "<html><body>Not Found</body></html>",
            "{path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_failures_map_to_their_statuses() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;

    let response = gateway
        .post("/v1/chat/completions", &chat_body("denied"))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 401);
    assert_eq!(
        response.text().await.expect("body"),
        r#"{"error":{"message":"invalid api key","type":"auth_error","param":null,"code":"401"}}"#,
        "the upstream's own body, untouched"
    );

    let (status, body) = gateway.chat(&chat_body("broken")).await;
    assert_eq!(status, 502, "{body}");
    assert_openai_error(&body);

    let (status, body) = gateway.chat(&chat_body("slow")).await;
    assert_eq!(status, 504, "{body}");
    assert_openai_error(&body);
    assert!(!body.to_string().contains(UPSTREAM_KEY));

    let statuses: Vec<_> = gateway
        .spend_logs(3)
        .await
        .iter()
        .map(|entry| entry["status"].as_u64().unwrap_or_default())
        .collect();
    assert_eq!(statuses, [504, 502, 401]);
    let (status, body) = gateway.get("/spend/logs?limit=1").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body.as_array().map(Vec::len), Some(1));
    let (status, body) = gateway.get("/spend/logs?limit=lots").await;
    assert_eq!(status, 400, "{body}");
    assert_openai_error(&body);

    let (status, body) = json_of(
        gateway
            .post("/v1/chat/completions", &json!("not an object"))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_openai_error(&body);
}
