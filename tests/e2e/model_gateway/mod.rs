//! The built-in model gateway over REST (spec 4.2, 4.3; design.md), against a fake
//! upstream on port 0 that records every request and answers JSON or SSE.
//!
//! By concern: the fake upstream (`upstream.rs`), routing and bodies (`routing.rs`),
//! streams (`streams.rs`), upstream failures (`failures.rs`), the master key
//! (`master_key.rs`), headers and the spend log's metadata (`headers.rs`), the added
//! models' registry (`registry.rs`), the Messages API (`messages.rs`) and the gateway as
//! processes of its own (`processes.rs`).

mod egress;
mod failures;
mod headers;
mod master_key;
mod messages;
mod processes;
mod registry;
mod routing;
mod streams;
mod upstream;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::common::{Backend, Sandgate};

pub(crate) use upstream::{FakeUpstream, Recorded, chunk, read_request};

pub(crate) const MASTER_KEY: &str = "sk-master-key-for-tests";
pub(crate) const UPSTREAM_KEY: &str = "sk-upstream-key";

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

async fn text_of(response: reqwest::Response) -> (StatusCode, http::HeaderMap, String) {
    let status = response.status();
    let headers = response.headers().clone();
    (status, headers, response.text().await.expect("body"))
}
