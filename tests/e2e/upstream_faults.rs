//! Upstream faults (issue 6): what is retried and what is not, a stream that breaks
//! midway, and SIGTERM while streams are in flight. The upstream is scripted to fail on
//! cue (tests/e2e/common/scripted_upstream.rs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::common::scripted_upstream::{Reply, ScriptedUpstream, StreamEnd, error_body};
use crate::common::{Backend, Sandgate, SandgateProcess, file_with, serve_args};

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

/// A gateway of the same kind has retried its own upstream already: its 503 is final,
/// unless the entry asks for retries itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chained_gateways_503_is_not_retried_unless_its_entry_asks() {
    let upstream = ScriptedUpstream::start(vec![
        Reply::status(503, "overloaded"),
        Reply::status(503, "overloaded"),
    ])
    .await;
    let base = upstream.base();
    let backend = Backend::embedded();
    let config = file_with(&format!(
        "model_list:\n  - model_name: chained\n    gateway_params: {{model: gateway_proxy/up, api_base: \"{base}\"}}\n  - model_name: asks\n    gateway_params: {{model: gateway_proxy/up, api_base: \"{base}\", num_retries: 1}}\n"
    ));
    let path = config.path().display().to_string();
    let sandgate = Sandgate::start_with(
        &backend,
        &[
            "--gateway-config",
            &path,
            "--proxy-master-key",
            MASTER_KEY,
            "--gateway-retries",
            "3",
        ],
    )
    .await;
    let chat = |model: &str| {
        sandgate
            .client
            .post(sandgate.url("/v1/chat/completions"))
            .bearer_auth(MASTER_KEY)
            .header("content-type", "application/json")
            .body(chat_body(model, false))
            .send()
    };
    let answer = chat("chained").await.expect("request");
    assert_eq!(answer.status(), 503);
    assert_eq!(upstream.bodies().len(), 1, "called once");
    // The entry's num_retries: one more call, which the script answers 503 again.
    let answer = chat("asks").await.expect("request");
    assert_eq!(answer.status(), 200);
    assert_eq!(upstream.bodies().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_twice_then_200_is_retried_with_the_same_body() {
    let upstream = ScriptedUpstream::start(vec![
        Reply::status(503, "overloaded"),
        Reply::status(503, "overloaded"),
    ])
    .await;
    let gateway = start("retry-503", &upstream.base(), &[]).await;
    let (status, body) = json_of(gateway.chat(false).await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "retry-503");
    let bodies = upstream.bodies();
    assert_eq!(bodies.len(), 3);
    assert!(bodies.iter().all(|sent| *sent == bodies[0]), "{bodies:?}");
    let logs = gateway.spend_logs().await;
    assert_eq!(logs.len(), 1, "one entry per client request: {logs:?}");
    assert_eq!(logs[0]["status"], 200);
    assert_eq!(gateway.retries("503").await, Some(2.0));
    assert_eq!(gateway.answered("200").await, Some(1.0));
    assert_eq!(gateway.answered("503").await, None, "the final status only");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_is_retried_after_what_retry_after_asks() {
    let upstream = ScriptedUpstream::start(vec![
        Reply::status_retry_after(429, "0"),
        Reply::status_retry_after(429, "1"),
    ])
    .await;
    let gateway = start("retry-429", &upstream.base(), &[]).await;
    let started = Instant::now();
    let (status, body) = json_of(gateway.chat(false).await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(upstream.bodies().len(), 3);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "`Retry-After: 1` was waited out: {:?}",
        started.elapsed()
    );
    assert_eq!(gateway.retries("429").await, Some(2.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_asking_for_a_long_wait_is_passed_on_at_once() {
    let upstream = ScriptedUpstream::start(vec![Reply::status_retry_after(429, "60")]).await;
    let gateway = start("retry-429-long", &upstream.base(), &[]).await;
    let response = gateway.chat(false).await;
    assert_eq!(response.status(), 429);
    assert_eq!(
        response.text().await.expect("body"),
        error_body(429, "slow down")
    );
    assert_eq!(upstream.bodies().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_500s_pass_the_last_one_on() {
    let upstream = ScriptedUpstream::start(vec![
        Reply::status(500, "first"),
        Reply::status(500, "second"),
        Reply::status(500, "third"),
    ])
    .await;
    let gateway = start("retry-500", &upstream.base(), &["--gateway-retries", "2"]).await;
    let response = gateway.chat(false).await;
    assert_eq!(response.status(), 500);
    assert_eq!(
        response.text().await.expect("body"),
        error_body(500, "third"),
        "the last attempt's own body"
    );
    assert_eq!(upstream.bodies().len(), 3);
    let logs = gateway.spend_logs().await;
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs[0]["status"], 500);
    assert_eq!(gateway.retries("500").await, Some(2.0));
    assert_eq!(gateway.answered("500").await, Some(1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_retries_the_upstream_is_called_once() {
    let upstream = ScriptedUpstream::start(vec![Reply::status(503, "overloaded")]).await;
    let gateway = start("no-retries", &upstream.base(), &["--gateway-retries", "0"]).await;
    let response = gateway.chat(false).await;
    assert_eq!(response.status(), 503);
    assert_eq!(
        response.text().await.expect("body"),
        error_body(503, "overloaded")
    );
    assert_eq!(upstream.bodies().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn final_statuses_are_never_retried() {
    let statuses = [400, 401, 404, 422, 501, 504];
    let upstream = ScriptedUpstream::start(
        statuses
            .iter()
            .map(|status| Reply::status(*status, "final"))
            .collect(),
    )
    .await;
    let gateway = start("final-statuses", &upstream.base(), &[]).await;
    for (calls, status) in statuses.into_iter().enumerate() {
        let response = gateway.chat(false).await;
        assert_eq!(response.status(), status);
        assert_eq!(
            response.text().await.expect("body"),
            error_body(status, "final")
        );
        assert_eq!(upstream.bodies().len(), calls + 1, "{status} was retried");
    }
}

/// The stream reset after two events: the client gets both, an error event, and a clean
/// end; the upstream is not called again.
async fn a_stream_reset_midway_ends_with_an_error_event(
    response: reqwest::Response,
    reset: &Notify,
    upstream: &ScriptedUpstream,
    model: &str,
) {
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut chunks = response.bytes_stream();
    let mut text = String::new();
    read_events(&mut chunks, &mut text, 2).await;
    // The reset comes once the client holds two events: they were relayed before it.
    reset.notify_one();
    read_to_end(&mut chunks, &mut text).await;
    let events = events(&text);
    assert_eq!(events.len(), 3, "{text}");
    for (index, event) in events[..2].iter().enumerate() {
        let event: Value = serde_json::from_str(event).expect("JSON event");
        assert_eq!(event["model"], model, "{event}");
        assert_eq!(
            event["choices"][0]["delta"]["content"],
            format!("part {index}")
        );
    }
    let error: Value = serde_json::from_str(events[2]).expect("a JSON error event");
    assert_eq!(error["error"]["type"], "upstream_error", "{error}");
    assert_openai_error(&error, "502");
    assert!(!text.contains("[DONE]"), "{text}");
    assert_eq!(
        upstream.bodies().len(),
        1,
        "a begun stream is never retried"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_reset_midway_ends_with_an_error_event_in_serve() {
    let reset = Arc::new(Notify::new());
    let upstream = ScriptedUpstream::start(vec![Reply::Stream {
        events: 2,
        end: StreamEnd::ResetOn(reset.clone()),
    }])
    .await;
    let gateway = start("reset-stream", &upstream.base(), &[]).await;
    let response = gateway.chat(true).await;
    a_stream_reset_midway_ends_with_an_error_event(response, &reset, &upstream, "reset-stream")
        .await;
    let logs = gateway.spend_logs().await;
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0]["status"], 502);
    assert_eq!(gateway.answered("502").await, Some(1.0));
}

#[tokio::test]
async fn a_stream_reset_midway_ends_with_an_error_event_through_edge_and_model_gw() {
    let reset = Arc::new(Notify::new());
    let upstream = ScriptedUpstream::start(vec![Reply::Stream {
        events: 2,
        end: StreamEnd::ResetOn(reset.clone()),
    }])
    .await;
    let apart = start_apart("reset-apart", &upstream.base()).await;
    let response = apart.chat("reset-apart", true).await;
    a_stream_reset_midway_ends_with_an_error_event(response, &reset, &upstream, "reset-apart")
        .await;
}

/// A client that leaves mid-stream ends the upstream call with it (the stream is relayed
/// as the client reads it: the client's going drops the upstream's answer), and its spend
/// log entry says 499.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_mid_stream_ends_the_upstream_call_and_is_logged_499() {
    let closed = Arc::new(Notify::new());
    let upstream = ScriptedUpstream::start(vec![Reply::Stream {
        events: 1,
        end: StreamEnd::HoldUntilClosed(closed.clone()),
    }])
    .await;
    let gateway = start("leaving", &upstream.base(), &[]).await;
    let response = gateway.chat(true).await;
    assert_eq!(response.status(), 200);
    let mut chunks = response.bytes_stream();
    let mut text = String::new();
    read_events(&mut chunks, &mut text, 1).await;
    drop(chunks);
    let ended = tokio::time::timeout(PATIENCE, closed.notified()).await;
    assert!(ended.is_ok(), "the upstream call outlived its client");
    let logs = gateway.spend_logs().await;
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs[0]["status"], 499, "{logs:?}");
    assert_eq!(gateway.answered("499").await, Some(1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_silent_midway_ends_with_a_504_error_event() {
    let never = Arc::new(Notify::new());
    let upstream = ScriptedUpstream::start(vec![Reply::Stream {
        events: 1,
        end: StreamEnd::FinishOn(never),
    }])
    .await;
    let gateway = start(
        "silent-stream",
        &upstream.base(),
        &["--gateway-read-timeout", "0.3"],
    )
    .await;
    let response = gateway.chat(true).await;
    assert_eq!(response.status(), 200);
    let mut chunks = response.bytes_stream();
    let mut text = String::new();
    read_to_end(&mut chunks, &mut text).await;
    let events = events(&text);
    assert_eq!(events.len(), 2, "{text}");
    let error: Value = serde_json::from_str(events[1]).expect("a JSON error event");
    assert_eq!(error["error"]["type"], "upstream_error", "{error}");
    assert_openai_error(&error, "504");
    assert_eq!(upstream.bodies().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_retried_then_502() {
    let closed = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        listener.local_addr().expect("address")
    };
    let gateway = start("refused", &format!("http://{closed}"), &[]).await;
    let (status, body) = json_of(gateway.chat(false).await).await;
    assert_eq!(status, 502, "{body}");
    assert_openai_error(&body, "502");
    assert_eq!(gateway.retries("connect").await, Some(2.0));
    assert_eq!(gateway.answered("502").await, Some(1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_reset_before_the_answer_is_retried_then_502() {
    let upstream = ScriptedUpstream::start(vec![
        Reply::ResetBeforeAnswer,
        Reply::ResetBeforeAnswer,
        Reply::ResetBeforeAnswer,
    ])
    .await;
    let gateway = start("reset-early", &upstream.base(), &[]).await;
    let (status, body) = json_of(gateway.chat(false).await).await;
    assert_eq!(status, 502, "{body}");
    assert_openai_error(&body, "502");
    assert_eq!(upstream.bodies().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_upstream_is_504_after_the_read_timeout_and_not_retried() {
    let upstream = ScriptedUpstream::start(vec![Reply::Silence]).await;
    let gateway = start(
        "silent",
        &upstream.base(),
        &["--gateway-read-timeout", "0.3"],
    )
    .await;
    let started = Instant::now();
    let (status, body) = json_of(gateway.chat(false).await).await;
    assert_eq!(status, 504, "{body}");
    assert_openai_error(&body, "504");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(upstream.bodies().len(), 1);
    let logs = gateway.spend_logs().await;
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0]["status"], 504);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_cut_midway_is_502_and_not_retried() {
    let upstream = ScriptedUpstream::start(vec![Reply::ResetMidBody]).await;
    let gateway = start("cut-body", &upstream.base(), &[]).await;
    let (status, body) = json_of(gateway.chat(false).await).await;
    assert_eq!(status, 502, "{body}");
    assert_openai_error(&body, "502");
    assert_eq!(upstream.bodies().len(), 1);
}

/// `sandgate serve` as a process, with a stream whose second event waits for `release`.
async fn serve_with_held_stream(
    grace: &str,
    release: Arc<Notify>,
) -> (
    SandgateProcess,
    ScriptedUpstream,
    tempfile::NamedTempFile,
    Backend,
) {
    let upstream = ScriptedUpstream::start(vec![Reply::Stream {
        events: 1,
        end: StreamEnd::FinishOn(release),
    }])
    .await;
    let backend = Backend::embedded();
    let config = config_file("held", &upstream.base());
    let mut args = serve_args(&backend);
    args.extend(
        [
            "--gateway-config",
            &config.path().display().to_string(),
            "--proxy-master-key",
            MASTER_KEY,
            "--shutdown-grace",
            grace,
        ]
        .map(str::to_owned),
    );
    let server = SandgateProcess::spawn(&args, &[]).await;
    (server, upstream, config, backend)
}

async fn start_stream(server: &SandgateProcess) -> reqwest::Response {
    let response = reqwest::Client::new()
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(MASTER_KEY)
        .header("content-type", "application/json")
        .body(chat_body("held", true))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    response
}

#[tokio::test]
async fn sigterm_lets_an_inflight_stream_finish_then_exits_zero() {
    let release = Arc::new(Notify::new());
    let (mut server, upstream, _config, _backend) =
        serve_with_held_stream("10", release.clone()).await;
    let mut chunks = start_stream(&server).await.bytes_stream();
    let mut text = String::new();
    read_events(&mut chunks, &mut text, 1).await;
    upstream.wait_for_requests(1, PATIENCE).await;

    server.signal_terminate();
    server.wait_for_log("SIGTERM received", PATIENCE).await;
    // Draining: the upstream sends the rest only now.
    release.notify_one();
    read_to_end(&mut chunks, &mut text).await;
    let events = events(&text);
    assert_eq!(events.len(), 3, "{text}");
    assert!(events[1].contains("part 1"), "{text}");
    assert_eq!(events[2], "[DONE]");
    assert_eq!(server.wait_exit(PATIENCE).await, Some(0));
    assert!(!server.log().contains("grace period over"));
}

#[tokio::test]
async fn sigterm_cuts_a_stream_held_past_the_grace_period_and_exits_zero() {
    let never = Arc::new(Notify::new());
    let (mut server, _upstream, _config, _backend) = serve_with_held_stream("1", never).await;
    let mut chunks = start_stream(&server).await.bytes_stream();
    let mut text = String::new();
    read_events(&mut chunks, &mut text, 1).await;

    let signalled = Instant::now();
    server.signal_terminate();
    assert_eq!(server.wait_exit(PATIENCE).await, Some(0));
    assert!(
        signalled.elapsed() >= Duration::from_secs(1),
        "exited before the grace period ended: {:?}",
        signalled.elapsed()
    );
    assert!(
        server.log().contains("grace period over"),
        "{}",
        server.log()
    );
    let rest = tokio::time::timeout(PATIENCE, async {
        let mut rest = String::new();
        while let Some(Ok(chunk)) = chunks.next().await {
            rest.push_str(&String::from_utf8_lossy(&chunk));
        }
        rest
    })
    .await
    .expect("the cut stream ends");
    assert!(!rest.contains("[DONE]"), "the stream was cut: {rest}");
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

#[tokio::test]
async fn a_model_gw_killed_midstream_ends_the_edges_stream_with_an_error_event() {
    let never = Arc::new(Notify::new());
    let upstream = ScriptedUpstream::start(vec![Reply::Stream {
        events: 1,
        end: StreamEnd::FinishOn(never),
    }])
    .await;
    let mut apart = start_apart("killed", &upstream.base()).await;
    let response = apart.chat("killed", true).await;
    assert_eq!(response.status(), 200);
    let mut chunks = response.bytes_stream();
    let mut text = String::new();
    read_events(&mut chunks, &mut text, 1).await;
    apart.model_gw.kill().await;
    read_to_end(&mut chunks, &mut text).await;
    let events = events(&text);
    assert_eq!(events.len(), 2, "{text}");
    let error: Value = serde_json::from_str(events[1]).expect("a JSON error event");
    assert_eq!(error["error"]["type"], "upstream_error", "{error}");
    assert_openai_error(&error, "502");
    // The cause is logged at the edge. Log lines are written by a thread of their own, so
    // the line may reach the log just after the stream's end reached the client.
    apart
        .edge
        .wait_for_log("the model gateway's stream failed", PATIENCE)
        .await;
}

#[tokio::test]
async fn sigterm_to_model_gw_lets_the_edges_inflight_stream_finish() {
    let release = Arc::new(Notify::new());
    let upstream = ScriptedUpstream::start(vec![Reply::Stream {
        events: 1,
        end: StreamEnd::FinishOn(release.clone()),
    }])
    .await;
    let mut apart = start_apart("drained", &upstream.base()).await;
    let response = apart.chat("drained", true).await;
    assert_eq!(response.status(), 200);
    let mut chunks = response.bytes_stream();
    let mut text = String::new();
    read_events(&mut chunks, &mut text, 1).await;

    apart.model_gw.signal_terminate();
    apart
        .model_gw
        .wait_for_log("SIGTERM received", PATIENCE)
        .await;
    release.notify_one();
    read_to_end(&mut chunks, &mut text).await;
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    assert_eq!(apart.model_gw.wait_exit(PATIENCE).await, Some(0));
}
