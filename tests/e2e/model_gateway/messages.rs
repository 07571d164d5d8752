//! The Messages API (Anthropic's): passed to a gateway upstream as it came, and translated
//! for an OpenAI one.

use serde_json::json;

use crate::common::Backend;

use super::*;

/// Anthropic's Messages API: passed as it is to a gateway of the same kind, translated to
/// a chat completion for an OpenAI-compatible upstream, errors in Anthropic's shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_pass_to_a_gateway_and_are_translated_for_an_openai_upstream() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, false).await;
    let request = |model: &str| {
        json!({
            "model": model, "max_tokens": 100, "system": "Be brief.",
            "messages": [{"role": "user", "content": "Read the README."}],
            "tools": [{"name": "read", "description": "Reads a file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}],
            "metadata": {"user_id": "alice"},
        })
    };
    // Same kind: the path and the body as they were, but for `model`.
    let (status, answer) = json_of(
        gateway
            .sandgate
            .client
            .post(gateway.sandgate.url("/v1/messages"))
            .header("x-api-key", MASTER_KEY)
            .header("anthropic-version", "2023-06-01")
            .json(&request("claude"))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["model"], "claude");
    assert_eq!(answer["content"][0]["type"], "tool_use");
    let sent = gateway.upstream.last();
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.body["system"], "Be brief.");
    // Anthropic's API needs its version and takes the key as x-api-key, forwarding off
    // or not; the client's x-api-key (the master key) never goes.
    assert_eq!(sent.headers["anthropic-version"], "2023-06-01");
    assert_eq!(sent.headers["x-api-key"], UPSTREAM_KEY);
    assert_eq!(sent.body["model"], "claude-sonnet");

    // OpenAI-compatible: a chat completion upstream, a message back.
    let (status, answer) = json_of(
        gateway
            .post("/v1/messages", &request("gpt"))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let sent = gateway.upstream.last();
    assert_eq!(sent.path, "/openai/v1/chat/completions");
    assert_eq!(
        sent.body["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );
    assert_eq!(sent.body["tools"][0]["function"]["name"], "read");
    assert_eq!(answer["type"], "message");
    assert_eq!(answer["model"], "gpt");
    assert_eq!(answer["stop_reason"], "tool_use");
    assert_eq!(
        answer["content"][0],
        json!({"type": "tool_use", "id": "call_1", "name": "read", "input": {"path": "README.md"}})
    );
    assert_eq!(
        answer["usage"],
        json!({"input_tokens": 11, "output_tokens": 7})
    );

    // Streamed, translated: Anthropic's events, in order.
    let mut streamed = request("gpt");
    streamed["stream"] = true.into();
    let (status, headers, text) = text_of(
        gateway
            .post("/v1/messages", &streamed)
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["content-type"], "text/event-stream");
    let kinds: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("event: "))
        .collect();
    assert_eq!(
        kinds,
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ],
        "{text}"
    );
    assert_eq!(
        gateway.upstream.last().body["stream_options"],
        json!({"include_usage": true})
    );

    // count_tokens: the gateway's own answer, and a one-token completion's usage.
    for (model, expected) in [("claude", 42), ("gpt", 11)] {
        let (status, answer) = json_of(
            gateway
                .post(
                    "/v1/messages/count_tokens",
                    &json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}),
                )
                .send()
                .await
                .expect("request"),
        )
        .await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer, json!({"input_tokens": expected}));
    }

    // Errors, the gateway's and the upstream's, in Anthropic's shape.
    let (status, answer) = json_of(
        gateway
            .post("/v1/messages", &request("nope"))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(answer["type"], "error");
    assert_eq!(answer["error"]["type"], "not_found_error");
    let bad = json!({"model": "gpt", "max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "web_search_tool_result"}]}]});
    let (status, answer) = json_of(
        gateway
            .post("/v1/messages", &bad)
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(answer["error"]["type"], "invalid_request_error");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("messages[0].content[0].type"),
        "{answer}"
    );

    // The refused call has its entry too (status 400, its reason), written after the
    // answer like every other.
    let logs = gateway
        .spend_logs_until("the refused and the translated calls' entries", |logs| {
            logs.iter().any(|log| log["status"] == 400)
                && logs
                    .iter()
                    .any(|log| log["upstream_model"] == "azure/gpt-4o")
        })
        .await;
    let refused = logs
        .iter()
        .find(|log| log["status"] == 400)
        .expect("the refused call's entry");
    assert_eq!(refused["call_type"], "anthropic_messages");
    let translated = logs
        .iter()
        .find(|log| {
            log["call_type"] == "anthropic_messages"
                && log["upstream_model"] == "azure/gpt-4o"
                && log["status"] == 200
        })
        .expect("the translated call's entry");
    assert_eq!(translated["user"], "alice");
    assert_eq!(translated["total_tokens"], 18);
}
