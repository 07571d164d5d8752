//! What reaches the upstream of the client's headers (with forwarding on and off), and
//! the user and metadata the spend log keeps but the upstream never gets.

use serde_json::{Value, json};

use crate::common::Backend;

use super::*;

fn with_client_headers(request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    request
        .header("x-team", "platform")
        // Named by the configuration's static headers too: the configured value goes alone.
        .header("x-static", "from-the-client")
        .header("x-gateway-session-id", "conv-123")
        .header("x-stainless-os", "Linux")
        .header("x-api-key", "client-credential")
        .header("x-goog-api-key", "client-credential")
        .header("anthropic-beta", "tools-2024")
        .header("cookie", "session=secret")
        .header("user-agent", "OpenAI/Python 1.0")
        .header("traceparent", TRACEPARENT)
}

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_forwarding_on_x_headers_pass_but_not_stainless_or_credentials() {
    let backend = Backend::embedded();
    let gateway = start(&backend, true, true).await;
    let response = with_client_headers(gateway.post("/v1/chat/completions", &chat_body("claude")))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    let headers = gateway.upstream.last().headers;
    assert_eq!(headers["x-team"], "platform");
    assert_eq!(headers["x-gateway-session-id"], "conv-123");
    assert_eq!(headers["anthropic-beta"], "tools-2024");
    let statics: Vec<_> = headers.get_all("x-static").iter().collect();
    assert_eq!(statics, ["fixed"]);
    assert_eq!(headers["authorization"], format!("Bearer {UPSTREAM_KEY}"));
    for name in ["x-stainless-os", "x-api-key", "x-goog-api-key", "cookie"] {
        assert!(headers.get(name).is_none(), "{name} was forwarded");
    }
    assert_ne!(
        headers.get("user-agent").map(|value| value.as_bytes()),
        Some(&b"OpenAI/Python 1.0"[..])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_forwarding_off_only_the_static_headers_go() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;
    let response = with_client_headers(gateway.post("/v1/chat/completions", &chat_body("claude")))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    let headers = gateway.upstream.last().headers;
    assert_eq!(headers["x-static"], "fixed");
    // Trace context always travels: the client's trace, under the gateway's own span.
    let traceparent = headers["traceparent"].to_str().expect("ASCII");
    let (version, rest) = TRACEPARENT.split_at(3);
    let (trace_id, client_span) = rest.split_at(32);
    assert!(
        traceparent.starts_with(&format!("{version}{trace_id}-")),
        "{traceparent}"
    );
    assert!(!traceparent.contains(&client_span[1..17]), "{traceparent}");
    assert!(traceparent.ends_with("-01"), "sampled, as the client said");
    for name in [
        "x-team",
        "x-gateway-session-id",
        "anthropic-beta",
        "x-stainless-os",
        "cookie",
    ] {
        assert!(headers.get(name).is_none(), "{name} was forwarded");
    }
}

async fn the_user_and_metadata_are_logged_not_forwarded(backend: Backend) {
    let gateway = start(&backend, true, true).await;
    let mut body = chat_body("claude");
    body["user"] = "alice@example.com".into();
    let response = gateway
        .post("/v1/chat/completions", &body)
        .header("x-gateway-session-id", "conv-9")
        .header(
            "x-gateway-spend-logs-metadata",
            r#"{"team":"red","cost_center":7}"#,
        )
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    response.bytes().await.expect("body");
    assert!(gateway.upstream.last().body.get("user").is_none());

    let response = gateway
        .post("/v1/chat/completions", &chat_body("claude"))
        .header("x-gateway-spend-logs-metadata", "{not json")
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200, "a malformed header is ignored");
    response.bytes().await.expect("body");

    // LiteLLM's names, as the OpenHands SDK sends them.
    let response = gateway
        .post("/v1/chat/completions", &chat_body("claude"))
        .header("x-litellm-session-id", "conv-10")
        .header("x-litellm-spend-logs-metadata", r#"{"team":"blue"}"#)
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    response.bytes().await.expect("body");

    // Metadata is stored with every entry: past 8 KiB it is ignored, the call served.
    let oversized = json!({ "notes": "n".repeat(8 * 1024) }).to_string();
    let response = gateway
        .post("/v1/chat/completions", &chat_body("claude"))
        .header("x-gateway-spend-logs-metadata", oversized)
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200, "oversized metadata is ignored");
    response.bytes().await.expect("body");

    let logs = gateway.spend_logs(4).await;
    assert_eq!(logs.len(), 4);
    assert_eq!(logs[0]["metadata"], Value::Null, "oversized");
    assert_eq!(logs[1]["session_id"], "conv-10");
    assert_eq!(logs[1]["metadata"], json!({"team": "blue"}));
    assert_eq!(logs[2]["metadata"], Value::Null, "malformed");
    assert_eq!(logs[3]["user"], "alice@example.com");
    assert_eq!(logs[3]["session_id"], "conv-9");
    assert_eq!(
        logs[3]["metadata"],
        json!({"team": "red", "cost_center": 7})
    );
    assert_eq!(logs[3]["prompt_tokens"], 11);
    assert_eq!(logs[3]["model"], "claude");
    let text = serde_json::to_string(&logs).expect("JSON");
    assert!(!text.contains("\"hi\""), "no prompt content: {text}");
    assert!(!text.contains("Hello"), "no response content: {text}");
}

crate::on_both_backends!(the_user_and_metadata_are_logged_not_forwarded);
