//! The fake OpenAI-compatible upstream the gateway's tests call: it records every request
//! and answers JSON or SSE (Chat Completions, Responses, Messages), refuses, hangs or holds
//! a stream as its model name asks.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::Response;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::net::TcpListener;

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

/// For an upstream written byte by byte: reads a request's head and its body (of the
/// length its head gives) from `stream`; `false` when the connection ends first.
pub(crate) async fn read_request(stream: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt;

    let mut request = Vec::new();
    let mut buffer = [0_u8; 8192];
    loop {
        let Ok(read) = stream.read(&mut buffer).await else {
            return false;
        };
        if read == 0 {
            return false;
        }
        request.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&request);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|line| {
                    line.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|value| value.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            if request.len() >= end + 4 + length {
                return true;
            }
        }
    }
}

/// `data` as one chunk of a chunked body.
pub(crate) fn chunk(data: &[u8]) -> Vec<u8> {
    let mut framed = format!("{:x}\r\n", data.len()).into_bytes();
    framed.extend_from_slice(data);
    framed.extend_from_slice(b"\r\n");
    framed
}
