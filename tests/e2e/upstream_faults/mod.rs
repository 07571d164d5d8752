//! Upstream faults (issue 6): what is retried and what is not, a stream that breaks
//! midway, and SIGTERM while streams are in flight. The upstream is scripted to fail on
//! cue (tests/e2e/common/scripted_upstream.rs).
//!
//! This file holds the gateways under test (in-process, or `model-gw` and `edge` as
//! processes) and the readers of their answers; the tests are by concern: the retry
//! policy (`retries.rs`), streams that break midway (`streams.rs`), and SIGTERM while
//! streams are in flight (`shutdown.rs`).

mod retries;
mod shutdown;
mod streams;

use std::time::Duration;

use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, Sandgate, SandgateProcess, file_with};

const MASTER_KEY: &str = "sk-master-key-for-fault-tests";
/// The longest any wait of these tests may take before it fails.
const PATIENCE: Duration = Duration::from_secs(10);

/// A gateway configuration with one entry, `model_name`, routed to `base` as an
/// OpenAI-compatible API (`{base}/v1/chat/completions`), which is retried on the
/// gateway's policy.
fn config_file(model_name: &str, base: &str) -> tempfile::NamedTempFile {
    file_with(&format!(
        "model_list:\n  - model_name: {model_name}\n    gateway_params: {{model: openai/up-model, api_base: \"{base}/v1\", api_key: sk-upstream}}\n"
    ))
}

fn chat_body(model: &str, stream: bool) -> String {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream})
        .to_string()
}

/// `sandgate serve` in-process, its gateway's one entry (`model`) at `base`.
struct Gateway {
    sandgate: Sandgate,
    model: String,
    _config: tempfile::NamedTempFile,
    _backend: Backend,
}

async fn start(model: &str, base: &str, extra: &[&str]) -> Gateway {
    let backend = Backend::embedded();
    let config = config_file(model, base);
    let path = config.path().display().to_string();
    let mut args = vec!["--gateway-config", &path, "--proxy-master-key", MASTER_KEY];
    args.extend_from_slice(extra);
    let sandgate = Sandgate::start_with(&backend, &args).await;
    Gateway {
        sandgate,
        model: model.to_owned(),
        _config: config,
        _backend: backend,
    }
}

impl Gateway {
    async fn chat(&self, stream: bool) -> reqwest::Response {
        self.sandgate
            .client
            .post(self.sandgate.url("/v1/chat/completions"))
            .bearer_auth(MASTER_KEY)
            .header("content-type", "application/json")
            .body(chat_body(&self.model, stream))
            .send()
            .await
            .expect("request")
    }

    /// The spend log once it holds an entry: an entry is written just after its answer
    /// ends, so the test waits for it (with a deadline). A second entry for the same
    /// request, were there one, would be written with the first.
    async fn spend_logs(&self) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let response = self
                .sandgate
                .client
                .get(self.sandgate.url("/spend/logs"))
                .bearer_auth(MASTER_KEY)
                .send()
                .await
                .expect("request");
            assert_eq!(response.status(), 200);
            let logs: Vec<Value> = response.json().await.expect("JSON");
            if !logs.is_empty() {
                return logs;
            }
            assert!(tokio::time::Instant::now() < deadline, "no spend log entry");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// A sample of this gateway's entry from `/metrics` (the recorder is the test
    /// process's: every entry name here is used by one test only).
    async fn metric(&self, name: &str, label: (&str, &str)) -> Option<f64> {
        let exposition = self
            .sandgate
            .client
            .get(self.sandgate.url("/metrics"))
            .send()
            .await
            .expect("scrape")
            .text()
            .await
            .expect("exposition");
        let model = format!("model=\"{}\"", self.model);
        let wanted = format!("{}=\"{}\"", label.0, label.1);
        exposition.lines().find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let labels = series.strip_prefix(name)?.strip_prefix('{')?;
            (labels.contains(&model) && labels.contains(&wanted))
                .then(|| value.parse().ok())
                .flatten()
        })
    }

    async fn retries(&self, reason: &str) -> Option<f64> {
        self.metric("sandgate_upstream_retries_total", ("reason", reason))
            .await
    }

    async fn answered(&self, status: &str) -> Option<f64> {
        self.metric("sandgate_gateway_requests_total", ("status", status))
            .await
    }
}

async fn json_of(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let text = response.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    (status, body)
}

fn assert_openai_error(body: &Value, code: &str) {
    let error = &body["error"];
    assert!(error["message"].is_string(), "{body}");
    assert!(error["type"].is_string(), "{body}");
    assert!(error.get("param").is_some(), "{body}");
    assert_eq!(error["code"], code, "{body}");
}

/// The `data:` payloads of an event stream.
fn events(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .collect()
}

/// Reads a streamed answer until it holds `count` whole events.
async fn read_events<S>(chunks: &mut S, text: &mut String, count: usize)
where
    S: futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
{
    let read = tokio::time::timeout(PATIENCE, async {
        while text.matches("\n\n").count() < count {
            let chunk = chunks.next().await.expect("a chunk").expect("chunk");
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(read.is_ok(), "{count} events did not arrive: {text}");
}

/// Reads a streamed answer to its end; every chunk must arrive intact (a clean end).
async fn read_to_end<S>(chunks: &mut S, text: &mut String)
where
    S: futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
{
    let read = tokio::time::timeout(PATIENCE, async {
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.unwrap_or_else(|err| panic!("the stream broke: {err:?}; {text}"));
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(read.is_ok(), "the stream did not end: {text}");
}

/// `sandgate model-gw` and `sandgate edge --model-gw` as processes, the gateway's one
/// entry `model` at `base`.
struct Apart {
    model_gw: SandgateProcess,
    edge: SandgateProcess,
    _config: tempfile::NamedTempFile,
    _data: tempfile::TempDir,
}

async fn start_apart(model: &str, base: &str) -> Apart {
    let data = tempfile::tempdir().expect("temp dir");
    let config = config_file(model, base);
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
    let model_gw = SandgateProcess::spawn(&gateway_args, &[("PROXY_MASTER_KEY", MASTER_KEY)]).await;
    let edge_args = [
        "edge".to_owned(),
        "--listen".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--runtime-api".to_owned(),
        format!("http://{}", model_gw.address),
        "--model-gw".to_owned(),
        format!("http://{}", model_gw.address),
    ];
    let edge = SandgateProcess::spawn(&edge_args, &[]).await;
    Apart {
        model_gw,
        edge,
        _config: config,
        _data: data,
    }
}

impl Apart {
    async fn chat(&self, model: &str, stream: bool) -> reqwest::Response {
        reqwest::Client::new()
            .post(self.edge.url("/v1/chat/completions"))
            .bearer_auth(MASTER_KEY)
            .header("content-type", "application/json")
            .body(chat_body(model, stream))
            .send()
            .await
            .expect("request")
    }
}
