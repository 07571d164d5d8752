//! A fake LLM provider for the gateway benchmarks: OpenAI-compatible
//! `/v1/chat/completions` (a small completion or a three-event stream), `/v1/responses`
//! and `/v1/embeddings`, answering at once.

use axum::Router;
use axum::body::Body;
use axum::response::Response;
use axum::routing::post;
use bytes::Bytes;
use serde_json::{Value, json};

/// What a provider answers: a small completion, or a three-event stream.
async fn completion(body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let model = request["model"].as_str().unwrap_or_default().to_owned();
    if request["stream"] == true {
        let events = [
            json!({"id": "c1", "object": "chat.completion.chunk", "model": model, "choices": [{"index": 0, "delta": {"content": "Hel"}}]}),
            json!({"id": "c1", "object": "chat.completion.chunk", "model": model, "choices": [{"index": 0, "delta": {"content": "lo"}}]}),
            json!({"id": "c1", "object": "chat.completion.chunk", "model": model, "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}),
        ];
        let chunks: Vec<Result<Bytes, std::convert::Infallible>> = events
            .iter()
            .map(|event| Ok(Bytes::from(format!("data: {event}\n\n"))))
            .chain([Ok(Bytes::from_static(b"data: [DONE]\n\n"))])
            .collect();
        return Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(futures::stream::iter(chunks)))
            .expect("response");
    }
    let reply = json!({
        "id": "c1", "object": "chat.completion", "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(reply.to_string()))
        .expect("response")
}

/// A small Responses API answer.
async fn responses(body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let reply = json!({
        "id": "resp_1", "object": "response", "created_at": 1, "status": "completed",
        "model": request["model"],
        "output": [{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": "Hello", "annotations": []}]}],
        "usage": {"input_tokens": 11, "output_tokens": 7, "total_tokens": 18},
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(reply.to_string()))
        .expect("response")
}

/// A small embedding.
async fn embeddings(body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let reply = json!({
        "object": "list", "model": request["model"],
        "data": [{"object": "embedding", "index": 0, "embedding": [0.25, -0.5, 1.0, 0.125]}],
        "usage": {"prompt_tokens": 8, "total_tokens": 8},
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(reply.to_string()))
        .expect("response")
}

/// The fake provider, on port 0; its base URL.
pub async fn start() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("addr");
    let app = Router::new()
        .route("/v1/chat/completions", post(completion))
        .route("/v1/responses", post(responses))
        .route("/v1/embeddings", post(embeddings));
    let listener = axum::serve::ListenerExt::tap_io(listener, |stream| {
        stream.set_nodelay(true).expect("nodelay");
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

/// A chat completion request for `model`, streamed or not, as agents send them.
pub fn chat(model: &str, stream: bool) -> Bytes {
    Bytes::from(
        json!({
            "model": model,
            "messages": [
                {"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": "Write a function that adds two numbers."}
            ],
            "stream": stream,
            "user": "user-1",
        })
        .to_string(),
    )
}

/// The user's prompt of [`chat`] and [`message`].
const PROMPT: &str = "Write a function that adds two numbers.";

/// `body` with its prompt made its own by `n`: the gateway holds at most four calls of one
/// caller with one prompt in flight (a loop back through a hop), so a load of concurrent
/// calls numbers them, as a platform's calls differ.
pub fn numbered(body: &Bytes, n: u64) -> Bytes {
    let text = std::str::from_utf8(body).expect("a JSON body");
    Bytes::from(text.replacen(PROMPT, &format!("{PROMPT} (call {n})"), 1))
}

/// An Anthropic Messages API request for `model`, streamed or not, as Claude Code sends
/// them.
pub fn message(model: &str, stream: bool) -> Bytes {
    Bytes::from(
        json!({
            "model": model,
            "max_tokens": 1024,
            "system": [{"type": "text", "text": "You are a coding agent."}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Write a function that adds two numbers."}]}
            ],
            "tools": [{"name": "read", "description": "Reads a file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}],
            "stream": stream,
        })
        .to_string(),
    )
}

/// A Responses API request for `model`, streamed or not, as Codex sends them: its
/// instructions, the user's message as an input item, a function tool.
pub fn responses_request(model: &str, stream: bool) -> Bytes {
    Bytes::from(
        json!({
            "model": model,
            "instructions": "You are a coding agent.",
            "input": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Write a function that adds two numbers."}]}
            ],
            "tools": [{"type": "function", "name": "exec_command", "description": "Runs a command", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}],
            "tool_choice": "auto",
            "parallel_tool_calls": false,
            "store": false,
            "stream": stream,
        })
        .to_string(),
    )
}

/// A gateway configuration file with three models served by `api_base`: `claude` (a
/// gateway of the same kind) as `claude-sonnet`, `gpt` (an OpenAI-compatible API, which
/// gets Anthropic's API translated) as `gpt-up`, and `gpt-bridge` (the same, serving chat
/// completions only: the Responses API is bridged); client headers forwarded.
pub fn gateway_config(api_base: &str) -> tempfile::NamedTempFile {
    let config = tempfile::NamedTempFile::new().expect("config");
    std::fs::write(
        config.path(),
        format!(
            "model_list:\n  - model_name: claude\n    gateway_params: {{model: gateway_proxy/claude-sonnet, api_base: \"{api_base}\", api_key: sk-upstream}}\n    model_info: {{input_cost_per_token: 0.000003, output_cost_per_token: 0.000015}}\n  - model_name: gpt\n    gateway_params: {{model: openai/gpt-up, api_base: \"{api_base}/v1\", api_key: sk-upstream}}\n  - model_name: gpt-bridge\n    gateway_params: {{model: openai/gpt-up, api_base: \"{api_base}/v1\", api_key: sk-upstream, responses_api: chat}}\ngeneral_settings:\n  forward_client_headers_to_llm_api: true\n"
        ),
    )
    .expect("write config");
    config
}
