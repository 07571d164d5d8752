//! Idle pause (`RUNTIME_IDLE_SECONDS`), on the local driver with a 2-second idle period:
//! a sandbox nobody hears from is paused and resumes; one whose conversation sends
//! webhooks, or makes gateway calls with its session, keeps running; and so does one whose
//! LLM stream lasts longer than the idle period. Every wait polls a status with a
//! deadline; the sleeps only pace the activity.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::common::scripted_upstream::{Reply, ScriptedUpstream, StreamEnd};
use crate::common::{Backend, RUNTIME_KEY, Sandgate, conversation, file_with, new_id};

const MASTER_KEY: &str = "sk-master-key-for-idle-tests";
const IDLE: Duration = Duration::from_secs(2);
/// The longest any wait may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(30);
/// How often the active conversations show activity: well within the idle period.
const PULSE: Duration = Duration::from_millis(300);

struct Idle {
    sandgate: Sandgate,
    _config: tempfile::NamedTempFile,
    _backend: Backend,
}

/// Sandgate with a 2-second idle period, a fast reconciler, and a gateway entry `model`
/// routed to `upstream`.
async fn start(backend: Backend, upstream: &ScriptedUpstream) -> Idle {
    let config = file_with(&format!(
        "model_list:\n  - model_name: model\n    gateway_params: {{model: openai/up-model, api_base: \"{}/v1\", api_key: sk-upstream}}\n",
        upstream.base()
    ));
    let path = config.path().display().to_string();
    let sandgate = Sandgate::start_with(
        &backend,
        &[
            "--runtime-idle-seconds",
            "2",
            "--reconcile-interval",
            "0.2",
            "--local-sandbox-start-seconds",
            "0.01",
            "--gateway-config",
            &path,
            "--proxy-master-key",
            MASTER_KEY,
        ],
    )
    .await;
    Idle {
        sandgate,
        _config: config,
        _backend: backend,
    }
}

impl Idle {
    async fn runtime(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self
            .sandgate
            .client
            .request(method, self.sandgate.url(path))
            .header("x-api-key", RUNTIME_KEY);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request");
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        response.json().await.expect("JSON")
    }

    /// Starts a sandbox for `session`; its runtime id and session key.
    async fn start_sandbox(&self, session: &str) -> (String, String) {
        let started = self
            .runtime(
                reqwest::Method::POST,
                "/start",
                Some(json!({
                    "image": "ghcr.io/acme/agent:1.0",
                    "command": ["/usr/local/bin/agent-server"],
                    "working_dir": "/workspace",
                    "environment": {},
                    "session_id": session,
                })),
            )
            .await;
        (
            started["runtime_id"].as_str().expect("id").to_owned(),
            started["session_api_key"].as_str().expect("key").to_owned(),
        )
    }

    async fn status(&self, session: &str) -> String {
        let got = self
            .runtime(reqwest::Method::GET, &format!("/sessions/{session}"), None)
            .await;
        got["status"].as_str().expect("status").to_owned()
    }

    /// Polls until the session's sandbox is in `wanted`; fails past the patience.
    async fn until(&self, session: &str, wanted: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let status = self.status(session).await;
            if status == wanted {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{session} still {status}, want {wanted}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The `count`th webhook delivery of conversation `id` from the sandbox whose key is
    /// `key` (each later than the one before).
    async fn webhook(&self, key: &str, id: &str, count: u32) {
        let updated_at = format!("2026-03-01T12:{:02}:{:02}Z", count / 60 % 60, count % 60);
        let response = self
            .sandgate
            .deliver(key, conversation(id, &updated_at, "running").to_string())
            .await;
        assert_eq!(response.status(), StatusCode::OK);
    }

    /// A gateway call carrying `session` in the gateway's session header.
    async fn chat(&self, session: &str, stream: bool) -> reqwest::Response {
        self.sandgate
            .client
            .post(self.sandgate.url("/v1/chat/completions"))
            .bearer_auth(MASTER_KEY)
            .header("x-litellm-session-id", session)
            .json(&json!({"model": "model", "messages": [{"role": "user", "content": "hi"}], "stream": stream}))
            .send()
            .await
            .expect("request")
    }
}

/// An idle sandbox is paused (not before its idle period), and resumes as usual.
async fn an_idle_sandbox_is_paused_and_resumes(backend: Backend) {
    let upstream = ScriptedUpstream::start(Vec::new()).await;
    let idle = start(backend, &upstream).await;
    let asked = Instant::now();
    idle.start_sandbox("idle-alone").await;
    idle.until("idle-alone", "running").await;
    idle.until("idle-alone", "paused").await;
    assert!(
        asked.elapsed() >= IDLE,
        "paused after {:?}",
        asked.elapsed()
    );

    let got = idle
        .runtime(reqwest::Method::GET, "/sessions/idle-alone", None)
        .await;
    idle.runtime(
        reqwest::Method::POST,
        "/resume",
        Some(json!({ "runtime_id": got["runtime_id"] })),
    )
    .await;
    idle.until("idle-alone", "running").await;
}

/// Webhooks from a sandbox, and gateway calls with its session, keep it running past the
/// idle period, while a silent one beside them is paused.
async fn activity_keeps_a_sandbox_running(backend: Backend) {
    let upstream = ScriptedUpstream::start(Vec::new()).await;
    let idle = start(backend, &upstream).await;
    let (_, webhook_key) = idle.start_sandbox("idle-webhooks").await;
    idle.start_sandbox("idle-gateway").await;
    idle.start_sandbox("idle-silent").await;
    for session in ["idle-webhooks", "idle-gateway", "idle-silent"] {
        idle.until(session, "running").await;
    }
    let running_since = Instant::now();
    let conversation_id = new_id();
    let deadline = running_since + PATIENCE;
    // Activity for at least three idle periods, and until the silent one is paused.
    for count in 0.. {
        idle.webhook(&webhook_key, &conversation_id, count).await;
        let answer = idle.chat("idle-gateway", false).await;
        assert_eq!(answer.status(), StatusCode::OK);
        let silent = idle.status("idle-silent").await;
        if silent == "paused" && running_since.elapsed() >= IDLE * 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the silent sandbox is still {silent}"
        );
        tokio::time::sleep(PULSE).await;
    }
    assert_eq!(idle.status("idle-webhooks").await, "running");
    assert_eq!(idle.status("idle-gateway").await, "running");
}

/// A stream in progress longer than the idle period is activity: its sandbox runs until
/// well after it, while a silent one is paused.
async fn a_long_stream_keeps_its_sandbox_running(backend: Backend) {
    let release = Arc::new(Notify::new());
    let upstream = ScriptedUpstream::start(vec![Reply::Stream {
        events: 1,
        end: StreamEnd::FinishOn(release.clone()),
    }])
    .await;
    let idle = start(backend, &upstream).await;
    idle.start_sandbox("stream-long").await;
    idle.start_sandbox("stream-silent").await;
    idle.until("stream-long", "running").await;
    idle.until("stream-silent", "running").await;
    let streaming_since = Instant::now();
    let answer = idle.chat("stream-long", true).await;
    assert_eq!(answer.status(), StatusCode::OK);
    let mut chunks = answer.bytes_stream();
    let first = tokio::time::timeout(PATIENCE, chunks.next()).await;
    assert!(matches!(first, Ok(Some(Ok(_)))), "no first event");
    idle.until("stream-silent", "paused").await;
    let deadline = Instant::now() + PATIENCE;
    while streaming_since.elapsed() < IDLE * 3 {
        assert_eq!(idle.status("stream-long").await, "running");
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(idle.status("stream-long").await, "running");
    release.notify_one();
    let ended = tokio::time::timeout(PATIENCE, async {
        while let Some(chunk) = chunks.next().await {
            chunk.expect("chunk");
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream did not end");
    // Once over, the idle period runs again: the sandbox pauses.
    idle.until("stream-long", "paused").await;
}

mod embedded {
    use crate::common::Backend;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_sandbox_is_paused_and_resumes() {
        super::an_idle_sandbox_is_paused_and_resumes(Backend::embedded()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn activity_keeps_a_sandbox_running() {
        super::activity_keeps_a_sandbox_running(Backend::embedded()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_long_stream_keeps_its_sandbox_running() {
        super::a_long_stream_keeps_its_sandbox_running(Backend::embedded()).await;
    }
}

mod redis {
    use crate::common::Backend;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_sandbox_is_paused_and_resumes() {
        super::an_idle_sandbox_is_paused_and_resumes(Backend::redis().await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn activity_keeps_a_sandbox_running() {
        super::activity_keeps_a_sandbox_running(Backend::redis().await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_long_stream_keeps_its_sandbox_running() {
        super::a_long_stream_keeps_its_sandbox_running(Backend::redis().await).await;
    }
}
