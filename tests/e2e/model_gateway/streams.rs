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

/// Events an upstream sends faster than they are relayed (a provider's tokens queued
/// behind a slow reader; here thirty in one write) reach the client in a few writes
/// rather than one each, every event still renamed and in order, the usage counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_events_reaches_the_client_in_a_few_writes() {
    let upstream = burst_upstream().await;
    let config = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(
        config.path(),
        format!(
            "model_list:\n  - model_name: burst\n    gateway_params: {{model: openai/provider-model, \
             api_base: \"http://{upstream}/v1\", api_key: {UPSTREAM_KEY}}}\n"
        ),
    )
    .expect("write config");
    let path = config.path().display().to_string();
    let sandgate = crate::common::Sandgate::start_with(
        &Backend::embedded(),
        &["--gateway-config", &path, "--proxy-master-key", MASTER_KEY],
    )
    .await;
    let mut body = chat_body("burst");
    body["stream"] = true.into();
    let response = sandgate
        .client
        .post(sandgate.url("/v1/chat/completions"))
        .bearer_auth(MASTER_KEY)
        .json(&body)
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    // Each piece the client reads is one chunk of the gateway's chunked answer: one
    // write of the relay.
    let mut pieces = 0;
    let mut text = String::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        pieces += 1;
        text.push_str(&String::from_utf8_lossy(&chunk.expect("chunk")));
    }
    let events: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .collect();
    assert_eq!(events.last(), Some(&"[DONE]"), "{text}");
    let contents: Vec<String> = events[..events.len() - 1]
        .iter()
        .map(|event| {
            let event: Value = serde_json::from_str(event).expect("JSON event");
            assert_eq!(event["model"], "burst", "{event}");
            event["choices"][0]["delta"]["content"]
                .as_str()
                .expect("content")
                .to_owned()
        })
        .collect();
    let sent: Vec<String> = (0..BURST_EVENTS)
        .map(|index| format!("token {index} "))
        .collect();
    assert_eq!(contents, sent);
    assert!(
        pieces <= 3,
        "{pieces} writes for {BURST_EVENTS} events: one per event, not gathered"
    );
    let gateway = Gateway {
        sandgate,
        upstream: FakeUpstream::start().await,
        config,
    };
    let logs = gateway.spend_logs(1).await;
    assert_eq!(logs[0]["completion_tokens"], BURST_EVENTS);
    assert_eq!(logs[0]["status"], 200);
}

/// Events of [`burst_upstream`]'s answer.
const BURST_EVENTS: usize = 30;

/// An upstream answering every request with a stream of [`BURST_EVENTS`] events, each
/// a chunk of its own, all in one write; its address.
async fn burst_upstream() -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let mut answer =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    for index in 0..BURST_EVENTS {
        let mut event = json!({
            "id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "provider-model",
            "choices": [{"index": 0, "delta": {"content": format!("token {index} ")}, "finish_reason": null}],
        });
        if index + 1 == BURST_EVENTS {
            event["choices"][0]["finish_reason"] = "stop".into();
            event["usage"] =
                json!({"prompt_tokens": 5, "completion_tokens": BURST_EVENTS, "total_tokens": 35});
        }
        answer.extend(chunk(format!("data: {event}\n\n").as_bytes()));
    }
    answer.extend(chunk(b"data: [DONE]\n\n"));
    answer.extend_from_slice(b"0\r\n\r\n");
    tokio::spawn(async move {
        loop {
            let Ok((mut connection, _)) = listener.accept().await else {
                return;
            };
            let answer = answer.clone();
            tokio::spawn(async move {
                if !read_request(&mut connection).await {
                    return;
                }
                if connection.write_all(&answer).await.is_err() {
                    return;
                }
                // Kept open until the gateway closes it.
                let mut buffer = [0_u8; 1024];
                while connection
                    .read(&mut buffer)
                    .await
                    .is_ok_and(|read| read > 0)
                {}
            });
        }
    });
    address
}
