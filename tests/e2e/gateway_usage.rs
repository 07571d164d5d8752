//! Every token the upstream generated is charged (issue 51, point 1; issue 53, point 5),
//! tried as a hostile key holder would: a client that reads 28 of 30 chunks and leaves,
//! on chat completions, the Responses API, the Messages API and both bridges (Messages
//! and Responses translated to chat completions); an upstream that reports no usage or
//! breaks; `stream` and `stream_options` of the wrong type and members named twice on
//! every route; an upstream's usage of 2^64-1 tokens. Prices come from `litellm_params`
//! before `model_info` (point 4): the entries' input price is 1.0 in `litellm_params` and
//! 5.0 in `model_info`, their output price 1.0, so a call costs its tokens.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::common::scripted_upstream::{Reply, ScriptedUpstream, UPSTREAM_MODEL, event};
use crate::common::{Backend, Sandgate, file_with};
use crate::gateway_keys::{generate, post, send};
use crate::model_gateway::MASTER_KEY;

/// How long a poll waits for the spend the call's end writes (the machine may be slow).
const PATIENCE: Duration = Duration::from_secs(30);

/// `sandgate serve` with three entries on `base`: `chat` (an OpenAI-compatible upstream:
/// the Messages API translated), `bridge` (the Responses API bridged to chat
/// completions), `native` (a gateway that speaks every API itself).
async fn start(base: &str) -> (Sandgate, tempfile::NamedTempFile) {
    let prices = "input_cost_per_token: 1.0";
    let info = "model_info: {input_cost_per_token: 5.0, output_cost_per_token: 1.0}";
    let config = file_with(&format!(
        "model_list:
  - model_name: chat
    litellm_params: {{model: openai/{UPSTREAM_MODEL}, api_base: \"{base}/v1\", api_key: k, {prices}}}
    {info}
  - model_name: bridge
    litellm_params: {{model: openai/{UPSTREAM_MODEL}, api_base: \"{base}/v1\", api_key: k, responses_api: chat, {prices}}}
    {info}
  - model_name: native
    litellm_params: {{model: gateway_proxy/{UPSTREAM_MODEL}, api_base: \"{base}\", api_key: k, {prices}}}
    {info}
"
    ));
    let path = config.path().display().to_string();
    let sandgate = Sandgate::start_with(
        &Backend::embedded(),
        &["--gateway-config", &path, "--proxy-master-key", MASTER_KEY],
    )
    .await;
    (sandgate, config)
}

/// A key's spend once it is `expected` (or what it is after [`PATIENCE`]).
async fn spend_of(sandgate: &Sandgate, token: &str, expected: f64) -> f64 {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let (status, info) = send(
            sandgate
                .client
                .get(sandgate.url(&format!("/key/info?key={token}")))
                .bearer_auth(MASTER_KEY),
        )
        .await;
        assert_eq!(status, 200, "{info}");
        let spend = info["info"]["spend"].as_f64().expect("spend");
        if (spend - expected).abs() < 1e-6 || tokio::time::Instant::now() > deadline {
            return spend;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The spend log's newest entry of `token` once there are `count` of them.
pub(crate) async fn newest_entry(sandgate: &Sandgate, token: &str, count: usize) -> Value {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let (_, logs) = send(
            sandgate
                .client
                .get(sandgate.url("/spend/logs"))
                .bearer_auth(MASTER_KEY),
        )
        .await;
        let entries: Vec<Value> = logs
            .as_array()
            .map(|logs| {
                logs.iter()
                    .filter(|entry| entry["api_key"] == token)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        if entries.len() >= count {
            return entries[0].clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "{logs}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn chat_usage(prompt: u64, completion: u64) -> String {
    let chunk = json!({"id": "c1", "object": "chat.completion.chunk", "model": UPSTREAM_MODEL, "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}});
    format!("data: {chunk}\n\n")
}

fn named(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// 30 chat chunks, the usage, `[DONE]`: 28 of them before the hold.
fn chat_stream(prompt: u64) -> (Vec<String>, usize) {
    let mut events: Vec<String> = (0..30).map(event).collect();
    events.push(chat_usage(prompt, 30));
    events.push("data: [DONE]\n\n".to_owned());
    (events, 28)
}

fn responses_stream(prompt: u64) -> (Vec<String>, usize) {
    let mut events = vec![named(
        "response.created",
        &json!({"type": "response.created", "response": {"id": "r1", "model": UPSTREAM_MODEL, "status": "in_progress", "output": []}}),
    )];
    events.extend((0..30).map(|index| {
        named(
            "response.output_text.delta",
            &json!({"type": "response.output_text.delta", "item_id": "m1", "output_index": 0, "content_index": 0, "delta": format!("part {index}")}),
        )
    }));
    events.push(named(
        "response.completed",
        &json!({"type": "response.completed", "response": {"id": "r1", "model": UPSTREAM_MODEL, "status": "completed", "output": [],
            "usage": {"input_tokens": prompt, "output_tokens": 30, "total_tokens": prompt + 30}}}),
    ));
    (events, 29)
}

fn messages_stream(prompt: u64) -> (Vec<String>, usize) {
    let mut events = vec![
        named(
            "message_start",
            &json!({"type": "message_start", "message": {"id": "m1", "type": "message", "role": "assistant", "model": UPSTREAM_MODEL, "content": [],
                "usage": {"input_tokens": prompt, "output_tokens": 1}}}),
        ),
        named(
            "content_block_start",
            &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
    ];
    events.extend((0..30).map(|index| {
        named(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": format!("part {index}")}}),
        )
    }));
    events.push(named(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": 0}),
    ));
    events.push(named(
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 30}}),
    ));
    events.push(named("message_stop", &json!({"type": "message_stop"})));
    (events, 30)
}

/// One call whose client leaves after the 28th chunk: the API, the path, the body, what
/// the upstream streams, and the spend it reports at the end.
struct Leaving {
    what: &'static str,
    path: &'static str,
    body: Value,
    stream: (Vec<String>, usize),
    expected: f64,
}

/// Calls as a fresh key, reads until the 28th chunk's text (`part 27`) arrived, and
/// leaves; then the upstream sends the rest. The key's spend must come to what the
/// upstream reported at the end of its stream, and the call is logged 499.
async fn leave_after_28(sandgate: &Sandgate, scenario: &Leaving, rest: &Notify) {
    let what = scenario.what;
    let (key, token) = generate(sandgate, &json!({"key_alias": what})).await;
    let response = post(sandgate, scenario.path, &key, &scenario.body)
        .send()
        .await
        .expect("a stream");
    assert_eq!(response.status(), 200, "{what}");
    let mut chunks = response.bytes_stream();
    let mut text = String::new();
    let read = tokio::time::timeout(PATIENCE, async {
        while !text.contains("part 27") {
            let chunk = chunks.next().await.expect("a chunk").expect("chunk");
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(read.is_ok(), "{what}: 28 chunks did not arrive: {text}");
    assert!(!text.contains("part 28"), "{what}: the hold did not hold");
    drop(chunks);
    rest.notify_one();
    let spend = spend_of(sandgate, &token, scenario.expected).await;
    assert!(
        (spend - scenario.expected).abs() < 1e-6,
        "{what}: the key spent {spend}, the upstream generated {}",
        scenario.expected
    );
    let entry = newest_entry(sandgate, &token, 1).await;
    assert_eq!(entry["status"], 499, "{what}: {entry}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_after_28_of_30_chunks_pays_for_all_30() {
    let hi = json!([{"role": "user", "content": "hi"}]);
    let scenarios = [
        Leaving {
            what: "chat completions",
            path: "/v1/chat/completions",
            body: json!({"model": "chat", "stream": true, "messages": hi}),
            stream: chat_stream(11),
            expected: 41.0,
        },
        Leaving {
            what: "responses",
            path: "/v1/responses",
            body: json!({"model": "native", "stream": true, "input": "hi"}),
            stream: responses_stream(13),
            expected: 43.0,
        },
        Leaving {
            what: "messages",
            path: "/v1/messages",
            body: json!({"model": "native", "stream": true, "max_tokens": 100, "messages": hi}),
            stream: messages_stream(17),
            expected: 47.0,
        },
        Leaving {
            what: "messages translated to chat",
            path: "/v1/messages",
            body: json!({"model": "chat", "stream": true, "max_tokens": 100, "messages": hi}),
            stream: chat_stream(19),
            expected: 49.0,
        },
        Leaving {
            what: "responses bridged to chat",
            path: "/v1/responses",
            body: json!({"model": "bridge", "stream": true, "input": "hi"}),
            stream: chat_stream(23),
            expected: 53.0,
        },
    ];
    let gates: Vec<Arc<Notify>> = scenarios.iter().map(|_| Arc::new(Notify::new())).collect();
    let script = scenarios
        .iter()
        .zip(&gates)
        .map(|(scenario, gate)| Reply::Events {
            events: scenario.stream.0.clone(),
            hold: scenario.stream.1,
            then: gate.clone(),
            pace: Duration::from_millis(50),
            reset: false,
        })
        .collect();
    let upstream = ScriptedUpstream::start(script).await;
    let (sandgate, _config) = start(&upstream.base()).await;
    for (scenario, gate) in scenarios.iter().zip(&gates) {
        leave_after_28(&sandgate, scenario, gate).await;
    }
    // Every chat completion stream the gateway forwarded asked for its usage (the
    // translated and bridged ones included); the others report it in their last events.
    let bodies = upstream.bodies();
    assert_eq!(bodies.len(), scenarios.len());
    for index in [0, 3, 4] {
        let body: Value = serde_json::from_slice(&bodies[index]).expect("JSON");
        assert_eq!(body["stream_options"]["include_usage"], true, "{body}");
    }
}

/// Each route the gateway reads, with a body it would take.
fn routes() -> [(&'static str, Value); 6] {
    let hi = json!([{"role": "user", "content": "hi"}]);
    [
        (
            "/v1/chat/completions",
            json!({"model": "chat", "messages": hi}),
        ),
        ("/v1/responses", json!({"model": "native", "input": "hi"})),
        (
            "/v1/messages",
            json!({"model": "chat", "max_tokens": 10, "messages": hi}),
        ),
        (
            "/v1/messages/count_tokens",
            json!({"model": "chat", "messages": hi}),
        ),
        ("/v1/embeddings", json!({"model": "chat", "input": "hi"})),
        ("/v1/completions", json!({"model": "chat", "prompt": "hi"})),
    ]
}

/// `body` with `member` set to the raw JSON `value`, as the last member.
fn with_raw(body: &Value, member: &str, value: &str) -> String {
    let text = body.to_string();
    format!("{},\"{member}\":{value}}}", &text[..text.len() - 1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_of_the_wrong_type_and_members_named_twice_are_refused_on_every_route() {
    let upstream = ScriptedUpstream::start(Vec::new()).await;
    let (sandgate, _config) = start(&upstream.base()).await;
    let (key, _) = generate(&sandgate, &json!({})).await;
    for (path, body) in routes() {
        let anthropic = path.starts_with("/v1/messages");
        let cases = [
            ("stream", "1", Some(("stream", "an integer", "a boolean"))),
            (
                "stream",
                "\"true\"",
                Some(("stream", "a string", "a boolean")),
            ),
            (
                "stream_options",
                "\"x\"",
                Some(("stream_options", "a string", "an object")),
            ),
            (
                "stream_options",
                r#"{"include_usage":"yes"}"#,
                Some(("stream_options.include_usage", "a string", "a boolean")),
            ),
            // A member named twice: Python upstreams read the last, the gateway would
            // read the first.
            ("stream", "true", None),
            (
                "stream_options",
                r#"{"include_usage":false,"include_usage":true}"#,
                None,
            ),
        ];
        for (member, value, invalid) in cases {
            let mut text = with_raw(&body, member, value);
            if invalid.is_none() && member == "stream" {
                // `"stream": false` first, `"stream": true` last.
                text = format!("{{\"stream\":false,{}", &text[1..]);
            }
            let response = sandgate
                .client
                .post(sandgate.url(path))
                .bearer_auth(&key)
                .header("content-type", "application/json")
                .body(text.clone())
                .send()
                .await
                .expect("request");
            assert_eq!(response.status(), 400, "{path} {text}");
            let error: Value = response.json().await.expect("a JSON error");
            let message = if anthropic {
                assert_eq!(error["type"], "error", "{path} {error}");
                assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
                error["error"]["message"].clone()
            } else {
                assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
                error["error"]["message"].clone()
            };
            let message = message.as_str().expect("a message").to_owned();
            match invalid {
                Some((param, got, expected)) => {
                    assert_eq!(
                        message,
                        format!(
                            "Invalid type for '{param}': expected {expected}, but got {got} instead."
                        ),
                        "{path} {text}"
                    );
                    if !anthropic {
                        assert_eq!(error["error"]["param"], param, "{error}");
                        assert_eq!(error["error"]["code"], "invalid_type", "{error}");
                    }
                }
                None => assert!(
                    message.contains("more than once") && message.contains(member),
                    "{path} {text}: {message}"
                ),
            }
        }
    }
    // A duplicate deep inside is refused too; `"stream": null` is no stream, as OpenAI
    // reads an unset parameter.
    let deep = r#"{"model":"chat","messages":[{"role":"user","content":"a","content":"b"}]}"#;
    let (status, error) = send(
        sandgate
            .client
            .post(sandgate.url("/v1/chat/completions"))
            .bearer_auth(&key)
            .body(deep),
    )
    .await;
    assert_eq!(status, 400, "{error}");
    assert!(error.to_string().contains("messages[0].content"), "{error}");
    assert!(upstream.bodies().is_empty(), "a refused call went upstream");
    let (status, _) = send(post(
        &sandgate,
        "/v1/chat/completions",
        &key,
        &json!({"model": "chat", "stream": null, "messages": []}),
    ))
    .await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_without_usage_is_charged_the_estimate_and_its_usage_has_a_ceiling() {
    let events: Vec<String> = (0..3)
        .map(event)
        .chain(["data: [DONE]\n\n".to_owned()])
        .collect();
    let streamed: usize = events.iter().map(String::len).sum();
    let open = Arc::new(Notify::new());
    open.notify_one();
    let broken = Arc::new(Notify::new());
    let huge = u64::MAX;
    let upstream = ScriptedUpstream::start(vec![
        // Read to its end, no usage: the bytes streamed.
        Reply::Events {
            events: events.clone(),
            hold: events.len(),
            then: open.clone(),
            pace: Duration::ZERO,
            reset: false,
        },
        // Broken after three events, no usage: `max_tokens` where smaller.
        Reply::Events {
            events: events[..3].to_vec(),
            hold: 3,
            then: broken.clone(),
            pace: Duration::ZERO,
            reset: true,
        },
        // A whole answer reporting 2^64-1 tokens of each kind.
        Reply::Answer {
            status: 200,
            headers: Vec::new(),
            body: json!({"id": "c1", "object": "chat.completion", "model": UPSTREAM_MODEL,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
                "usage": {"prompt_tokens": huge, "completion_tokens": huge, "total_tokens": huge,
                    "prompt_tokens_details": {"cached_tokens": huge}}})
            .to_string(),
        },
    ])
    .await;
    let (sandgate, _config) = start(&upstream.base()).await;
    let hi = json!([{"role": "user", "content": "hi"}]);

    let (key, token) = generate(&sandgate, &json!({})).await;
    let response = post(
        &sandgate,
        "/v1/chat/completions",
        &key,
        &json!({"model": "chat", "stream": true, "messages": hi}),
    )
    .send()
    .await
    .expect("a stream");
    let text = response.text().await.expect("the stream");
    assert!(text.contains("part 2") && text.contains("[DONE]"), "{text}");
    let sent = upstream.bodies()[0].len();
    let expected = (sent + streamed) as f64;
    let spend = spend_of(&sandgate, &token, expected).await;
    assert_eq!(spend, expected, "request bytes {sent}, streamed {streamed}");
    let entry = newest_entry(&sandgate, &token, 1).await;
    assert_eq!(entry["metadata"]["usage_estimated"], true, "{entry}");
    assert_eq!(entry["prompt_tokens"], sent, "{entry}");

    let (key, token) = generate(&sandgate, &json!({})).await;
    let response = post(
        &sandgate,
        "/v1/chat/completions",
        &key,
        &json!({"model": "chat", "stream": true, "max_tokens": 5, "messages": hi}),
    )
    .send()
    .await
    .expect("a stream");
    let mut chunks = response.bytes_stream();
    let mut text = String::new();
    while !text.contains("part 2") {
        let chunk = chunks.next().await.expect("a chunk").expect("chunk");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    broken.notify_one();
    while let Some(Ok(chunk)) = chunks.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("upstream_error"), "{text}");
    let sent = upstream.bodies()[1].len();
    let expected = (sent + 5) as f64;
    assert_eq!(spend_of(&sandgate, &token, expected).await, expected);

    let (key, token) = generate(&sandgate, &json!({})).await;
    let (status, answer) = send(post(
        &sandgate,
        "/v1/chat/completions",
        &key,
        &json!({"model": "chat", "messages": hi}),
    ))
    .await;
    assert_eq!(status, 200, "{answer}");
    let entry = newest_entry(&sandgate, &token, 1).await;
    assert_eq!(entry["prompt_tokens"], 10_000_000, "{entry}");
    assert_eq!(entry["completion_tokens"], 10_000_000, "{entry}");
    // Cached tokens are the cache read price's (the input price here): 2 × 10^7 in all.
    assert_eq!(spend_of(&sandgate, &token, 2e7).await, 2e7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prices_in_litellm_params_come_before_model_info_and_model_info_shows_them() {
    let upstream = ScriptedUpstream::start(Vec::new()).await;
    let (sandgate, _config) = start(&upstream.base()).await;
    let (status, info) = send(
        sandgate
            .client
            .get(sandgate.url("/model/info?model=chat"))
            .bearer_auth(MASTER_KEY),
    )
    .await;
    assert_eq!(status, 200, "{info}");
    let model_info = &info["data"][0]["model_info"];
    assert_eq!(model_info["input_cost_per_token"], 1.0, "{info}");
    assert_eq!(model_info["output_cost_per_token"], 1.0, "{info}");
    // An added model takes them from its params as well.
    let (status, added) = send(post(
        &sandgate,
        "/model/new",
        MASTER_KEY,
        &json!({"model_name": "added", "litellm_params": {"model": "openai/x", "api_base": "https://api.example/v1",
            "input_cost_per_token": 0.25, "cache_read_input_token_cost": 0.025},
            "model_info": {"input_cost_per_token": 9.0, "output_cost_per_token": 0.5}}),
    ))
    .await;
    assert_eq!(status, 200, "{added}");
    let (_, info) = send(
        sandgate
            .client
            .get(sandgate.url("/model/info?model=added"))
            .bearer_auth(MASTER_KEY),
    )
    .await;
    let model_info = &info["data"][0]["model_info"];
    assert_eq!(model_info["input_cost_per_token"], 0.25, "{info}");
    assert_eq!(model_info["cache_read_input_token_cost"], 0.025, "{info}");
    assert_eq!(model_info["output_cost_per_token"], 0.5, "{info}");
    // A price that is no price is refused where it is written.
    let (status, refused) = send(post(
        &sandgate,
        "/model/new",
        MASTER_KEY,
        &json!({"model_name": "bad", "litellm_params": {"model": "openai/x", "api_base": "https://api.example/v1",
            "output_cost_per_token": -1.0}}),
    ))
    .await;
    assert_eq!(status, 400, "{refused}");
}
