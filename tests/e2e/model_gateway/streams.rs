//! Streamed answers: renamed event by event, relayed before the upstream has finished, and
//! their usage logged.

use futures::StreamExt;
use serde_json::{Value, json};

use crate::common::Backend;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_is_renamed_chunk_by_chunk_and_its_usage_logged() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;
    let mut body = chat_body("gpt");
    body["stream"] = true.into();
    let response = gateway
        .post("/v1/chat/completions", &body)
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "text/event-stream");
    // No proxy between here and the client buffers or caches the events.
    assert_eq!(headers["cache-control"], "no-cache");
    assert_eq!(headers["x-accel-buffering"], "no");
    assert_eq!(headers["x-ratelimit-remaining-requests"], "99");
    assert_eq!(headers["llm_provider-x-request-id"], "req-upstream-1");
    let mut text = String::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk.expect("chunk")));
    }
    let events: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .collect();
    // The usage chunk the gateway asked for is not the client's: two chunks and [DONE].
    assert_eq!(events.len(), 3, "{text}");
    for event in &events[..2] {
        let event: Value = serde_json::from_str(event).expect("JSON event");
        assert_eq!(event["model"], "gpt", "{event}");
    }
    assert_eq!(events[2], "[DONE]");
    assert_eq!(
        gateway.upstream.last().body["stream_options"],
        json!({"include_usage": true}),
        "the gateway asks for the usage"
    );

    let logs = gateway.spend_logs(1).await;
    assert_eq!(logs[0]["model"], "gpt");
    assert_eq!(logs[0]["upstream_model"], "azure/gpt-4o");
    assert_eq!(logs[0]["prompt_tokens"], 11);
    assert_eq!(logs[0]["completion_tokens"], 7);
    assert_eq!(logs[0]["total_tokens"], 18);
    assert_eq!(logs[0]["status"], 200);
    assert_eq!(logs[0]["call_type"], "completion");
    // The answer's own request id is the spend log's.
    assert_eq!(
        headers["x-request-id"],
        logs[0]["request_id"].as_str().unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_reaches_the_client_before_the_upstream_has_finished() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;
    let mut body = chat_body("gated");
    body["stream"] = true.into();
    let response = gateway
        .post("/v1/chat/completions", &body)
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    let mut chunks = response.bytes_stream();
    let mut text = String::new();
    // The upstream holds its second event until the client has the first: a gateway that
    // buffered the stream would never deliver it.
    let first = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while !text.contains("\n\n") {
            let chunk = chunks.next().await.expect("a chunk").expect("chunk");
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(first.is_ok(), "the first event did not arrive on its own");
    assert!(text.contains(r#""model":"gated""#), "{text}");
    assert!(!text.contains("[DONE]"), "{text}");
    gateway.upstream.release.notify_one();
    while let Some(chunk) = chunks.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk.expect("chunk")));
    }
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_response_names_the_asked_model_in_its_events_and_logs_its_usage() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;
    let body = json!({"model": "gpt", "input": "hi", "stream": true});
    let (status, headers, text) = text_of(
        gateway
            .post("/v1/responses", &body)
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["cache-control"], "no-cache");
    let created = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .find(|event| event["type"] == "response.created")
        .expect("response.created");
    assert_eq!(created["response"]["model"], "gpt", "{text}");
    let logs = gateway.spend_logs(1).await;
    assert_eq!(logs[0]["total_tokens"], 11);
}
