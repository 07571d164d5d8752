//! The built-in model gateway over REST (spec 4.2, 4.3; design.md), against a fake
//! upstream on port 0 that records every request and answers JSON or SSE.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::Response;
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::common::{Backend, Sandgate};

pub(crate) const MASTER_KEY: &str = "sk-master-key-for-tests";
pub(crate) const UPSTREAM_KEY: &str = "sk-upstream-key";

/// One request the fake upstream got.
#[derive(Clone, Debug)]
pub(crate) struct Recorded {
    pub(crate) path: String,
    pub(crate) headers: http::HeaderMap,
    pub(crate) body: Value,
}

/// An OpenAI-compatible upstream: answers JSON, or SSE when asked to stream; `deny` gets
/// 401, `hang` never answers, and a `gated` stream holds its second event until `release`
/// is notified.
pub(crate) struct FakeUpstream {
    address: std::net::SocketAddr,
    requests: Arc<Mutex<Vec<Recorded>>>,
    /// Lets a `gated` stream's second event go.
    pub(crate) release: Arc<tokio::sync::Notify>,
    /// TCP connections accepted so far.
    connections: Arc<std::sync::atomic::AtomicUsize>,
}

#[derive(Clone)]
struct UpstreamState {
    requests: Arc<Mutex<Vec<Recorded>>>,
    release: Arc<tokio::sync::Notify>,
}

async fn answer(State(state): State<UpstreamState>, request: http::Request<Body>) -> Response {
    let requests = state.requests;
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.expect("body");
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    requests.lock().expect("requests").push(Recorded {
        path: parts.uri.path().to_owned(),
        headers: parts.headers,
        body: body.clone(),
    });
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    if model == "deny" {
        return Response::builder()
            .status(401)
            .header("content-type", "application/json")
            .body(Body::from(
                r#"{"error":{"message":"invalid api key","type":"auth_error","param":null,"code":"401"}}"#,
            ))
            .expect("response");
    }
    if model == "hang" {
        std::future::pending::<()>().await;
    }
    if model.ends_with("html") {
        // What a web server in front of an upstream answers a path it does not serve.
        return Response::builder()
            .status(404)
            .header("content-type", "text/html")
            .body(Body::from("<html><body>Not Found</body></html>"))
            .expect("response");
    }
    if model == "overloaded" {
        return Response::builder()
            .status(503)
            .header("content-type", "application/json")
            .body(Body::from(
                r#"{"error":{"message":"overloaded","type":"server_error","param":null,"code":"503"}}"#,
            ))
            .expect("response");
    }
    let path = parts.uri.path();
    if path.ends_with("/responses") {
        return responses_answer(&body, &model);
    }
    if path.ends_with("/embeddings") {
        return json_answer(json!({
            "object": "list", "model": model,
            "data": [{"object": "embedding", "index": 0, "embedding": [0.25, -0.5, 1.0]}],
            "usage": {"prompt_tokens": 3, "total_tokens": 3},
        }));
    }
    if path.ends_with("/completions") && !path.ends_with("/chat/completions") {
        return json_answer(json!({
            "id": "cmpl-1", "object": "text_completion", "created": 1, "model": model,
            "choices": [{"text": "Hello", "index": 0, "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3},
        }));
    }
    if path.ends_with("/messages/count_tokens") {
        return json_answer(json!({"input_tokens": 42}));
    }
    if path.ends_with("/messages") {
        return messages_answer(&body, &model);
    }
    let usage = json!({"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18});
    let tool = body["tools"][0]["function"]["name"]
        .as_str()
        .map(str::to_owned);
    if body["stream"] == true {
        // As OpenAI streams: the usage chunk only when the request asks for it.
        let mut events = match &tool {
            Some(tool) => vec![
                json!({"id": "c1", "object": "chat.completion.chunk", "model": model, "choices": [{"index": 0, "delta": {"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": tool, "arguments": ""}}]}}]}),
                json!({"id": "c1", "object": "chat.completion.chunk", "model": model, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\":"}}]}}]}),
                json!({"id": "c1", "object": "chat.completion.chunk", "model": model, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"README.md\"}"}}]}}]}),
                json!({"id": "c1", "object": "chat.completion.chunk", "model": model, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            ],
            None => vec![
                json!({"id": "c1", "object": "chat.completion.chunk", "model": model, "choices": [{"index": 0, "delta": {"content": "Hel"}}]}),
                json!({"id": "c1", "object": "chat.completion.chunk", "model": model, "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]}),
            ],
        };
        if body["stream_options"]["include_usage"] == true {
            events.push(json!({"id": "c1", "object": "chat.completion.chunk", "model": model, "choices": [], "usage": usage}));
        }
        let gate = (model == "gated").then_some(state.release);
        let chunks = events
            .into_iter()
            .map(|event| format!("data: {event}\n\n"))
            .chain(["data: [DONE]\n\n".to_owned()])
            .enumerate()
            .map(move |(index, chunk)| {
                let gate = gate.clone();
                async move {
                    if let (1, Some(gate)) = (index, gate) {
                        gate.notified().await;
                    }
                    Ok::<_, Infallible>(Bytes::from(chunk))
                }
            });
        return Response::builder()
            .header("content-type", "text/event-stream")
            .header("x-request-id", "req-upstream-1")
            .header("x-ratelimit-remaining-requests", "99")
            .body(Body::from_stream(
                futures::stream::iter(chunks).then(|chunk| chunk),
            ))
            .expect("response");
    }
    let content = if model == "test/big" {
        "x".repeat(3 << 20)
    } else {
        "Hello".to_owned()
    };
    let message = match &tool {
        Some(tool) => json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": tool, "arguments": "{\"path\":\"README.md\"}"}},
        ]}),
        None => json!({"role": "assistant", "content": content}),
    };
    let reply = json!({
        "id": "c1", "object": "chat.completion", "created": 1, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": if tool.is_some() { "tool_calls" } else { "stop" }}],
        "usage": usage,
    });
    Response::builder()
        .header("content-type", "application/json")
        .header("x-request-id", "req-upstream-1")
        .header("x-ratelimit-remaining-requests", "99")
        .header("x-litellm-response-cost", "0.00042")
        .header("set-cookie", "upstream=secret")
        .body(Body::from(reply.to_string()))
        .expect("response")
}

fn json_answer(body: Value) -> Response {
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("response")
}

fn sse_answer(events: Vec<(&'static str, Value)>) -> Response {
    let text: String = events
        .into_iter()
        .map(|(kind, data)| format!("event: {kind}\ndata: {data}\n\n"))
        .collect();
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(text))
        .expect("response")
}

/// OpenAI's Responses API, as it answers and streams.
fn responses_answer(request: &Value, model: &str) -> Response {
    let response = |status: &str, text: &str| {
        json!({
            "id": "resp_1", "object": "response", "created_at": 1, "status": status,
            "model": model, "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
            "output": if text.is_empty() { json!([]) } else { json!([{
                "type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }]) },
            "usage": if status == "completed" { json!({
                "input_tokens": 9, "output_tokens": 2, "total_tokens": 11,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            }) } else { Value::Null },
        })
    };
    if request["stream"] != true {
        return json_answer(response("completed", "Hello"));
    }
    sse_answer(vec![
        (
            "response.created",
            json!({"type": "response.created", "sequence_number": 0, "response": response("in_progress", "")}),
        ),
        (
            "response.output_text.delta",
            json!({"type": "response.output_text.delta", "sequence_number": 1, "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "Hel", "logprobs": []}),
        ),
        (
            "response.output_text.delta",
            json!({"type": "response.output_text.delta", "sequence_number": 2, "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "lo", "logprobs": []}),
        ),
        (
            "response.completed",
            json!({"type": "response.completed", "sequence_number": 3, "response": response("completed", "Hello")}),
        ),
    ])
}

/// Anthropic's Messages API, as it answers and streams: a tool use when the request has
/// tools, text otherwise.
fn messages_answer(request: &Value, model: &str) -> Response {
    let tool = request["tools"][0]["name"].as_str();
    let (block, stop_reason) = match tool {
        Some(tool) => (
            json!({"type": "tool_use", "id": "toolu_1", "name": tool, "input": {"path": "README.md"}}),
            "tool_use",
        ),
        None => (json!({"type": "text", "text": "Hello"}), "end_turn"),
    };
    let message = |content: Value, stop: Value, output: u64| {
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": null,
            "usage": {"input_tokens": 13, "output_tokens": output},
        })
    };
    if request["stream"] != true {
        return json_answer(message(json!([block]), stop_reason.into(), 5));
    }
    let (start, delta) = match tool {
        Some(tool) => (
            json!({"type": "tool_use", "id": "toolu_1", "name": tool, "input": {}}),
            json!({"type": "input_json_delta", "partial_json": "{\"path\":\"README.md\"}"}),
        ),
        None => (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": "Hello"}),
        ),
    };
    sse_answer(vec![
        (
            "message_start",
            json!({"type": "message_start", "message": message(json!([]), Value::Null, 1)}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": start}),
        ),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": 5}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ])
}

impl FakeUpstream {
    pub(crate) async fn start() -> Self {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let release = Arc::new(tokio::sync::Notify::new());
        let app = Router::new().fallback(answer).with_state(UpstreamState {
            requests: requests.clone(),
            release: release.clone(),
        });
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let accepted = connections.clone();
        let listener = axum::serve::ListenerExt::tap_io(listener, move |_| {
            accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            address,
            requests,
            release,
            connections,
        }
    }

    pub(crate) fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(crate) fn base(&self) -> String {
        format!("http://{}", self.address)
    }

    pub(crate) fn last(&self) -> Recorded {
        self.requests
            .lock()
            .expect("requests")
            .last()
            .cloned()
            .expect("the upstream got a request")
    }

    pub(crate) fn count(&self) -> usize {
        self.requests.lock().expect("requests").len()
    }

    /// Every request it got, in order.
    pub(crate) fn all(&self) -> Vec<Recorded> {
        self.requests.lock().expect("requests").clone()
    }
}

/// A port nothing listens on.
async fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    listener.local_addr().expect("address").port()
}

pub(crate) async fn config_text(upstream: &FakeUpstream, forward: bool, wildcard: bool) -> String {
    let base = upstream.base();
    let closed = closed_port().await;
    let mut text = format!(
        r#"model_list:
  - model_name: claude
    gateway_params: {{model: gateway_proxy/claude-sonnet, api_base: "{base}/", api_key: {UPSTREAM_KEY}}}
  - model_name: gpt
    gateway_params: {{model: openai/azure/gpt-4o, api_base: "{base}/openai/v1", api_key: {UPSTREAM_KEY}}}
  - model_name: denied
    gateway_params: {{model: gateway_proxy/deny, api_base: "{base}", api_key: wrong}}
  - model_name: slow
    gateway_params: {{model: gateway_proxy/hang, api_base: "{base}", api_key: {UPSTREAM_KEY}}}
  - model_name: gated
    gateway_params: {{model: gateway_proxy/gated, api_base: "{base}", api_key: {UPSTREAM_KEY}}}
  - model_name: broken
    gateway_params: {{model: openai/x/y, api_base: "http://127.0.0.1:{closed}/v1", api_key: {UPSTREAM_KEY}}}
"#
    );
    if wildcard {
        text.push_str(&format!(
            "  - model_name: \"*\"\n    gateway_params: {{model: \"openai/*\", api_base: \"{base}/any/v1\", api_key: sk-wild}}\n"
        ));
    }
    text.push_str(&format!(
        "general_settings:\n  forward_client_headers_to_llm_api: {forward}\nextra_headers:\n  x-static: fixed\n"
    ));
    text
}

struct Gateway {
    sandgate: Sandgate,
    upstream: FakeUpstream,
    config: tempfile::NamedTempFile,
}

async fn start(backend: &Backend, forward: bool, wildcard: bool) -> Gateway {
    let upstream = FakeUpstream::start().await;
    let config = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(
        config.path(),
        config_text(&upstream, forward, wildcard).await,
    )
    .expect("write config");
    let path = config.path().display().to_string();
    let sandgate = Sandgate::start_with(
        backend,
        &[
            "--gateway-config",
            &path,
            "--proxy-master-key",
            MASTER_KEY,
            // `hang` is cut off after this; the large bodies' tests must not be, even on
            // a loaded machine, where a debug build copies 9 MiB slowly.
            "--gateway-read-timeout",
            "2",
            // The fake upstream is on loopback, where added models may go only so.
            "--gateway-allowed-upstream-hosts",
            "127.0.0.1",
        ],
    )
    .await;
    Gateway {
        sandgate,
        upstream,
        config,
    }
}

impl Gateway {
    fn post(&self, path: &str, body: &Value) -> reqwest::RequestBuilder {
        self.sandgate
            .client
            .post(self.sandgate.url(path))
            .bearer_auth(MASTER_KEY)
            .header("content-type", "application/json")
            .body(body.to_string())
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        json_of(
            self.sandgate
                .client
                .get(self.sandgate.url(path))
                .bearer_auth(MASTER_KEY)
                .send()
                .await
                .expect("request"),
        )
        .await
    }

    async fn chat(&self, body: &Value) -> (StatusCode, Value) {
        json_of(
            self.post("/v1/chat/completions", body)
                .send()
                .await
                .expect("request"),
        )
        .await
    }

    /// The spend log once it holds `count` entries. An entry is written just after its
    /// answer ends, so the test waits for it (with a deadline).
    async fn spend_logs(&self, count: usize) -> Vec<Value> {
        self.spend_logs_until(&format!("{count} entries"), |entries| {
            entries.len() >= count
        })
        .await
    }

    /// The spend log once `done` holds of it (entries are written after the answers, in
    /// batches), or a failure naming `what` was awaited.
    async fn spend_logs_until(&self, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let (status, body) = self.get("/spend/logs").await;
            assert_eq!(status, 200, "{body}");
            let entries = body.as_array().expect("an array").clone();
            if done(&entries) {
                return entries;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the spend log never had {what}: {body}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

async fn json_of(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let text = response.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    (status, body)
}

fn assert_openai_error(body: &Value) {
    let error = &body["error"];
    assert!(error["message"].is_string(), "{body}");
    assert!(error["type"].is_string(), "{body}");
    assert!(error.get("param").is_some(), "{body}");
    assert!(error["code"].is_string(), "{body}");
}

fn chat_body(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_prefixes_route_and_the_response_names_the_asked_model() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;

    let (status, body) = gateway.chat(&chat_body("claude")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "claude");
    assert_eq!(body["choices"][0]["message"]["content"], "Hello");
    let sent = gateway.upstream.last();
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.body["model"], "claude-sonnet");
    assert_eq!(sent.body["messages"][0]["content"], "hi");
    assert_eq!(
        sent.headers["authorization"],
        format!("Bearer {UPSTREAM_KEY}")
    );

    let (status, body) = json_of(
        gateway
            .post("/chat/completions", &chat_body("gpt"))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "gpt");
    let sent = gateway.upstream.last();
    assert_eq!(sent.path, "/openai/v1/chat/completions");
    assert_eq!(sent.body["model"], "azure/gpt-4o");
}

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
async fn a_wildcard_forwards_provider_names_and_refuses_bare_ones() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;
    let (status, body) = gateway.chat(&chat_body("anthropic/claude-3-5")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "anthropic/claude-3-5");
    let sent = gateway.upstream.last();
    assert_eq!(sent.path, "/any/v1/chat/completions");
    assert_eq!(sent.body["model"], "anthropic/claude-3-5");
    assert_eq!(sent.headers["authorization"], "Bearer sk-wild");

    let requests = gateway.upstream.count();
    let (status, body) = gateway.chat(&chat_body("claude-3-5")).await;
    assert_eq!(status, 400, "{body}");
    assert_openai_error(&body);
    assert_eq!(gateway.upstream.count(), requests, "nothing was forwarded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_body_arrives_whole() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;
    let (status, body) = gateway.chat(&chat_body("test/big")).await;
    assert_eq!(status, 200);
    assert_eq!(body["model"], "test/big");
    assert_eq!(
        body["choices"][0]["message"]["content"]
            .as_str()
            .map(str::len),
        Some(3 << 20)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_models_are_404_without_a_wildcard() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, false).await;
    let (status, body) = gateway.chat(&chat_body("anthropic/claude-3-5")).await;
    assert_eq!(status, 404, "{body}");
    assert_openai_error(&body);
    assert_eq!(body["error"]["code"], "404");
    assert_eq!(gateway.upstream.count(), 0);
}

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
async fn every_call_needs_the_master_key() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;
    let client = &gateway.sandgate.client;
    for request in [
        client.get(gateway.sandgate.url("/v1/models")),
        client
            .get(gateway.sandgate.url("/v1/models"))
            .bearer_auth("wrong"),
        client
            .post(gateway.sandgate.url("/v1/chat/completions"))
            .body(chat_body("claude").to_string()),
        client
            .post(gateway.sandgate.url("/v1/chat/completions"))
            .header("authorization", format!("Basic {MASTER_KEY}"))
            .body(chat_body("claude").to_string()),
        client.get(gateway.sandgate.url("/spend/logs")),
        client
            .post(gateway.sandgate.url("/model/new"))
            .bearer_auth("wrong")
            .body("{}"),
    ] {
        let (status, body) = json_of(request.send().await.expect("request")).await;
        assert_eq!(status, 401, "{body}");
        assert_openai_error(&body);
        assert!(!body.to_string().contains(MASTER_KEY));
    }
    assert_eq!(gateway.upstream.count(), 0);
}

/// The master key where LiteLLM's proxy takes it: the Anthropic SDK and Claude Code send
/// `x-api-key`, Azure OpenAI clients `api-key`, LiteLLM's own `x-litellm-api-key`. Each
/// carrier with a wrong key is refused, and none is passed on to the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_master_key_is_taken_from_every_carrier_litellm_reads() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;
    let client = &gateway.sandgate.client;
    for (header, value) in [
        ("x-api-key", MASTER_KEY.to_owned()),
        ("api-key", MASTER_KEY.to_owned()),
        ("x-litellm-api-key", MASTER_KEY.to_owned()),
        ("x-litellm-api-key", format!("Bearer {MASTER_KEY}")),
    ] {
        let (status, body) = json_of(
            client
                .get(gateway.sandgate.url("/v1/models"))
                .header(header, &value)
                .send()
                .await
                .expect("request"),
        )
        .await;
        assert_eq!(status, 200, "{header}: {body}");
        let (status, body) = json_of(
            client
                .get(gateway.sandgate.url("/v1/models"))
                .header(header, "sk-wrong")
                .send()
                .await
                .expect("request"),
        )
        .await;
        assert_eq!(status, 401, "{header}: {body}");

        let response = client
            .post(gateway.sandgate.url("/v1/chat/completions"))
            .header(header, &value)
            .json(&chat_body("claude"))
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), 200, "{header}");
        response.bytes().await.expect("body");
        let sent = gateway.upstream.last().headers;
        assert!(sent.get(header).is_none(), "{header} went upstream");
        assert!(
            !format!("{sent:?}").contains(MASTER_KEY),
            "the master key went upstream"
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

async fn an_added_model_is_listed_and_routed_at_once(backend: Backend) {
    let gateway = start(&backend, false, false).await;
    let (status, body) = json_of(
        gateway
            .post(
                "/model/new",
                &json!({"model_name": "added", "gateway_params": {
                    "model": "gateway_proxy/added-upstream",
                    "api_base": gateway.upstream.base(),
                    "api_key": "sk-added",
                }}),
            )
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model_name"], "added");
    assert!(!body.to_string().contains("sk-added"), "{body}");

    let (_, models) = gateway.get("/v1/models").await;
    let ids: Vec<_> = models["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|model| model["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        ids,
        [
            "claude", "gpt", "denied", "slow", "gated", "broken", "added"
        ]
    );

    let (status, body) = gateway.chat(&chat_body("added")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "added");
    let sent = gateway.upstream.last();
    assert_eq!(sent.body["model"], "added-upstream");
    assert_eq!(sent.headers["authorization"], "Bearer sk-added");

    let (status, body) = json_of(
        gateway
            .post("/model/new", &json!({"model_name": "x", "gateway_params": {"model": "gpt-4o", "api_base": "http://g"}}))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_openai_error(&body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_list_has_configured_entries_first_then_the_registry() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;
    for path in ["/v1/models", "/models"] {
        let (status, body) = gateway.get(path).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["object"], "list");
        let data = body["data"].as_array().expect("data");
        assert!(data.len() >= 200, "{} entries", data.len());
        let ids: Vec<_> = data
            .iter()
            .map(|model| model["id"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(
            ids[..7],
            ["claude", "gpt", "denied", "slow", "gated", "broken", "*"]
        );
        assert!(ids.contains(&"gpt-4o"));
        assert_eq!(data[0]["object"], "model");
        assert!(data[0]["created"].is_i64());
        assert!(data[0]["owned_by"].is_string());
    }
    let (status, body) = gateway.get("/v1/models/claude").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["id"], "claude");
    let (status, body) = gateway.get("/v1/models/azure/gpt-4o").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["id"], "azure/gpt-4o");
    let (status, body) = gateway.get("/v1/models/nope").await;
    assert_eq!(status, 404, "{body}");
    assert_openai_error(&body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_config_is_read_again_and_a_broken_one_ignored() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, false).await;
    let text = format!(
        "model_list:\n  - model_name: fresh\n    gateway_params: {{model: gateway_proxy/fresh-up, api_base: \"{}\", api_key: k}}\n",
        gateway.upstream.base()
    );
    std::fs::write(gateway.config.path(), &text).expect("rewrite config");
    let (_, models) = gateway.get("/v1/models").await;
    assert_eq!(models["data"][0]["id"], "fresh");
    assert_eq!(models["data"].as_array().map(Vec::len), Some(1));

    std::fs::write(gateway.config.path(), "model_list: [this is: not valid").expect("break");
    let (status, models) = gateway.get("/v1/models").await;
    assert_eq!(status, 200);
    assert_eq!(
        models["data"][0]["id"], "fresh",
        "the last good config stays"
    );
    let (status, body) = gateway.chat(&chat_body("fresh")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(gateway.upstream.last().body["model"], "fresh-up");
}

crate::on_both_backends!(
    the_user_and_metadata_are_logged_not_forwarded,
    an_added_model_is_listed_and_routed_at_once,
);

/// `sandgate model-gw` and `sandgate edge --model-gw`, as real processes, with the master
/// key and an upstream key taken from the environment.
#[tokio::test]
async fn model_gw_and_edge_run_apart_with_keys_from_the_environment() {
    let upstream = FakeUpstream::start().await;
    let data = tempfile::tempdir().expect("temp dir");
    let config = crate::common::file_with(&format!(
        "model_list:\n  - model_name: claude\n    gateway_params: {{model: gateway_proxy/claude-sonnet, api_base: \"{}\", api_key: os.environ/TEST_GATEWAY_KEY}}\n",
        upstream.base()
    ));
    let gateway_args = [
        "model-gw",
        "--grpc-listen",
        "127.0.0.1:0",
        "--data-dir",
        &data.path().display().to_string(),
        "--gateway-config",
        &config.path().display().to_string(),
    ]
    .map(str::to_owned);
    let model_gw = crate::common::SandgateProcess::spawn(
        &gateway_args,
        &[
            ("PROXY_MASTER_KEY", MASTER_KEY),
            ("TEST_GATEWAY_KEY", "sk-from-env"),
        ],
    )
    .await;
    let edge_args = [
        "edge".to_owned(),
        "--listen".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--runtime-api".to_owned(),
        format!("http://{}", model_gw.address),
        "--model-gw".to_owned(),
        format!("http://{}", model_gw.address),
    ];
    let edge = crate::common::SandgateProcess::spawn(&edge_args, &[]).await;
    let client = reqwest::Client::new();
    let (status, body) = json_of(
        client
            .post(edge.url("/v1/chat/completions"))
            .bearer_auth(MASTER_KEY)
            .body(chat_body("claude").to_string())
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "claude");
    assert_eq!(
        upstream.last().headers["authorization"],
        "Bearer sk-from-env"
    );
    assert!(!model_gw.log().contains("sk-from-env"));
    assert!(!model_gw.log().contains(MASTER_KEY));

    // An edge older than the Call rpc, during a rolling upgrade, still gets its chat
    // completions through the deprecated ChatCompletion rpc.
    #[expect(deprecated, reason = "what an older edge calls")]
    {
        use sandgate_proto::models::v1::ChatCompletionRequest;
        use sandgate_proto::models::v1::model_gateway_client::ModelGatewayClient;
        let channel =
            tonic::transport::Endpoint::from_shared(format!("http://{}", model_gw.address))
                .expect("endpoint")
                .connect()
                .await
                .expect("connect");
        let mut request = tonic::Request::new(ChatCompletionRequest {
            body: chat_body("claude").to_string().into(),
        });
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {MASTER_KEY}").parse().expect("metadata"),
        );
        let mut answer = ModelGatewayClient::new(channel)
            .chat_completion(request)
            .await
            .expect("the deprecated rpc answers")
            .into_inner();
        let first = answer.next().await.expect("a message").expect("no error");
        assert_eq!(first.status, 200);
        let mut body = first.chunk.to_vec();
        while let Some(message) = answer.next().await {
            body.extend_from_slice(&message.expect("no error").chunk);
        }
        let body: Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(body["model"], "claude");
    }
}

/// A configuration naming an unset variable stops the start, naming the entry.
#[tokio::test]
async fn an_unset_variable_is_a_start_error_naming_the_entry() {
    let config = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(
        config.path(),
        "model_list:\n  - model_name: claude\n    gateway_params: {model: gateway_proxy/c, api_base: \"http://127.0.0.1:9\", api_key: os.environ/SANDGATE_TEST_NEVER_SET}\n",
    )
    .expect("write config");
    let data = tempfile::tempdir().expect("temp dir");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_sandgate"))
        .args(["model-gw", "--grpc-listen", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .arg("--gateway-config")
        .arg(config.path())
        .env_remove("SANDGATE_TEST_NEVER_SET")
        .output()
        .await
        .expect("run sandgate");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("model_list[0] (claude)"), "{stderr}");
    assert!(stderr.contains("SANDGATE_TEST_NEVER_SET"), "{stderr}");
}

/// Calls of Redis's `HGETALL` so far (the read of the added models), on every server that
/// holds data.
pub(crate) async fn hgetall_calls(backend: &Backend) -> u64 {
    let Backend::Redis(redis) = backend else {
        unreachable!("a Redis backend")
    };
    let mut calls = 0;
    for mut connection in redis.node_connections().await {
        let stats: String = ::redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut connection)
            .await
            .expect("INFO");
        calls += stats
            .lines()
            .find_map(|line| line.strip_prefix("cmdstat_hgetall:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |calls| calls.parse::<u64>().expect("a count"));
    }
    calls
}

/// Two replicas on one Redis with one configuration: a model added through one is routed
/// by the other at once, though the other keeps the model entries between calls (no store
/// read before each upstream call); one added again with other parameters is routed anew
/// as soon as the other hears of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_added_model_is_seen_by_every_replica() {
    let backend = Backend::redis().await;
    let first = start(&backend, false, false).await;
    let path = first.config.path().display().to_string();
    let second = Sandgate::start_with(
        &backend,
        &[
            "--gateway-config",
            &path,
            "--proxy-master-key",
            MASTER_KEY,
            "--gateway-allowed-upstream-hosts",
            "127.0.0.1",
        ],
    )
    .await;
    let chat_on_second = |model: &'static str| {
        let request = second
            .client
            .post(second.url("/v1/chat/completions"))
            .bearer_auth(MASTER_KEY)
            .body(chat_body(model).to_string());
        async move { json_of(request.send().await.expect("request")).await }
    };
    let add = |upstream_model: &str| {
        first
            .post(
                "/model/new",
                &json!({"model_name": "shared", "gateway_params": {
                    "model": format!("gateway_proxy/{upstream_model}"),
                    "api_base": first.upstream.base(), "api_key": "k",
                }}),
            )
            .send()
    };

    // The second replica routes, and keeps what it read.
    let (status, body) = chat_on_second("claude").await;
    assert_eq!(status, 200, "{body}");
    let reads = hgetall_calls(&backend).await;
    for _ in 0..10 {
        assert_eq!(chat_on_second("claude").await.0, 200);
    }
    assert!(
        hgetall_calls(&backend).await < reads + 10,
        "the added models are not read from the store for every call"
    );

    assert_eq!(add("shared-up").await.expect("request").status(), 200);
    let (status, body) = chat_on_second("shared").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "shared");
    assert_eq!(first.upstream.last().body["model"], "shared-up");

    assert_eq!(add("shared-up-2").await.expect("request").status(), 200);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (status, body) = chat_on_second("shared").await;
        assert_eq!(status, 200, "{body}");
        if first.upstream.last().body["model"] == "shared-up-2" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the second replica still routes the model as first added"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// A whole answer is taken as soon as its announced length is in (without waiting for its
/// end-of-stream), and the upstream connection still goes back to the pool: calls one
/// after the other share their connections. (The connection's return races the next call,
/// which may then open another now and then, hence the bound rather than exactly one.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_one_after_the_other_reuse_upstream_connections() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, false).await;
    for _ in 0..10 {
        let (status, body) = gateway.chat(&chat_body("claude")).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["model"], "claude");
    }
    assert_eq!(
        gateway.upstream.requests.lock().expect("requests").len(),
        10
    );
    let connections = gateway.upstream.connections();
    assert!(
        connections <= 5,
        "10 calls opened {connections} upstream connections"
    );
}

async fn text_of(response: reqwest::Response) -> (StatusCode, http::HeaderMap, String) {
    let status = response.status();
    let headers = response.headers().clone();
    (status, headers, response.text().await.expect("body"))
}

/// Every API goes to its own path on a gateway of the same kind (`claude`) and on an
/// OpenAI-compatible one (`gpt`), with `model` renamed both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_embeddings_and_completions_go_to_their_paths_on_both_kinds() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;
    for (model, prefix, upstream_model) in [
        ("claude", "/v1", "claude-sonnet"),
        ("gpt", "/openai/v1", "azure/gpt-4o"),
    ] {
        for (path, body, check) in [
            (
                "/v1/responses",
                json!({"model": model, "input": "hi"}),
                "output",
            ),
            (
                "/responses",
                json!({"model": model, "input": "hi"}),
                "output",
            ),
            (
                "/v1/embeddings",
                json!({"model": model, "input": "hi"}),
                "data",
            ),
            (
                "/embeddings",
                json!({"model": model, "input": "hi"}),
                "data",
            ),
            (
                "/v1/completions",
                json!({"model": model, "prompt": "hi"}),
                "choices",
            ),
        ] {
            let (status, answer) =
                json_of(gateway.post(path, &body).send().await.expect("request")).await;
            assert_eq!(status, 200, "{path} {model}: {answer}");
            assert_eq!(answer["model"], model, "{path}: {answer}");
            assert!(answer.get(check).is_some(), "{path}: {answer}");
            let sent = gateway.upstream.last();
            let upstream_path = path.trim_start_matches("/v1");
            assert_eq!(sent.path, format!("{prefix}{upstream_path}"));
            assert_eq!(sent.body["model"], upstream_model);
        }
    }
    let logs = gateway.spend_logs(10).await;
    let kinds: Vec<&str> = logs
        .iter()
        .filter_map(|log| log["call_type"].as_str())
        .collect();
    for kind in ["responses", "embedding", "text_completion"] {
        assert!(kinds.contains(&kind), "{kinds:?}");
    }
    let embedding = logs
        .iter()
        .find(|log| log["call_type"] == "embedding")
        .expect("an embedding");
    assert_eq!(embedding["prompt_tokens"], 3);
    let responses = logs
        .iter()
        .find(|log| log["call_type"] == "responses")
        .expect("a response");
    assert_eq!(
        responses["prompt_tokens"], 9,
        "input_tokens read as the prompt's"
    );
    assert_eq!(responses["completion_tokens"], 2);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_info_health_probes_and_answer_headers() {
    let backend = Backend::embedded();
    let upstream = FakeUpstream::start().await;
    let base = upstream.base();
    let config = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(
        config.path(),
        format!(
            r#"model_list:
  - model_name: claude
    litellm_params: {{model: gateway_proxy/claude-sonnet, api_base: "{base}", api_key: k}}
    model_info: {{max_input_tokens: 200000, max_output_tokens: 8192, supports_vision: true, supports_function_calling: true}}
  - model_name: gpt
    litellm_params: {{model: openai/azure/gpt-4o, api_base: "{base}/v1", api_key: k}}
litellm_settings: {{drop_params: true}}
"#
        ),
    )
    .expect("write config");
    let path = config.path().display().to_string();
    let sandgate = Sandgate::start_with(
        &backend,
        &["--gateway-config", &path, "--proxy-master-key", MASTER_KEY],
    )
    .await;
    let get = |path: &str| {
        sandgate
            .client
            .get(sandgate.url(path))
            .bearer_auth(MASTER_KEY)
            .send()
    };
    let (status, info) = json_of(get("/v1/model/info").await.expect("request")).await;
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["data"][0]["model_name"], "claude");
    assert_eq!(info["data"][0]["model_info"]["max_input_tokens"], 200000);
    assert_eq!(info["data"][0]["model_info"]["supports_vision"], true);
    assert_eq!(
        info["data"][0]["litellm_params"]["model"],
        "gateway_proxy/claude-sonnet"
    );
    assert!(
        !info.to_string().contains("\"k\""),
        "the key is never listed: {info}"
    );
    assert_eq!(info["data"][1]["model_info"], json!({}));
    let (_, same) = json_of(get("/model/info").await.expect("request")).await;
    assert_eq!(same, info);
    let (status, groups) = json_of(get("/model_group/info").await.expect("request")).await;
    assert_eq!(status, 200, "{groups}");
    assert_eq!(groups["data"][0]["model_group"], "claude");
    assert_eq!(groups["data"][0]["max_output_tokens"], 8192);
    assert_eq!(groups["data"][0]["providers"], json!(["litellm_proxy"]));
    let unauthenticated = sandgate
        .client
        .get(sandgate.url("/v1/model/info"))
        .send()
        .await
        .expect("request");
    assert_eq!(unauthenticated.status(), 401);

    for probe in ["/health/liveliness", "/health/readiness"] {
        let response = sandgate
            .client
            .get(sandgate.url(probe))
            .send()
            .await
            .expect("probe");
        assert_eq!(response.status(), 200, "{probe}");
    }

    // The upstream's request id, rate limits and chained cost headers reach the client;
    // its cookies do not.
    let response = sandgate
        .client
        .post(sandgate.url("/v1/chat/completions"))
        .bearer_auth(MASTER_KEY)
        .json(&chat_body("gpt"))
        .send()
        .await
        .expect("request");
    let headers = response.headers();
    assert_eq!(headers["llm_provider-x-request-id"], "req-upstream-1");
    assert_eq!(headers["x-ratelimit-remaining-requests"], "99");
    assert_eq!(headers["x-litellm-response-cost"], "0.00042");
    assert!(headers.get("set-cookie").is_none());
    assert_eq!(
        headers["x-request-id"].len(),
        36,
        "the gateway's own request id"
    );
    assert!(headers.get("x-accel-buffering").is_none(), "a whole answer");
}

/// An image inline (base64) makes bodies of megabytes: 9 MiB passes, as through LiteLLM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nine_mebibyte_image_request_reaches_the_upstream_whole() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;
    let image = "A".repeat(9 << 20);
    let body = json!({"model": "gpt", "user": "u", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{image}")}},
    ]}]});
    let (status, answer) = json_of(
        gateway
            .post("/v1/chat/completions", &body)
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let sent = gateway.upstream.last();
    let url = sent.body["messages"][0]["content"][0]["image_url"]["url"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(url.len(), image.len() + "data:image/png;base64,".len());
    assert!(sent.body.get("user").is_none());
    assert_eq!(sent.body["model"], "azure/gpt-4o");
}
