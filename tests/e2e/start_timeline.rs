//! A start's timeline on the real `sandgate` binary with the process driver: a cold start
//! and a warm claim each carry, on the runtime's answer, when the start began, when it was
//! seen running, when its agent-server answered `GET /alive`, its first webhook and its
//! first LLM call through the gateway, in that order; each phase lands in
//! `sandgate_sandbox_start_phase_seconds` by launch; and one sandbox's webhook or call
//! never marks another's timeline.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::scripted_upstream::ScriptedUpstream;
use crate::common::{SandgateProcess, conversation, file_with, new_id};
use crate::observability::{sample, scrape};
use crate::process_sandboxes::{call, pool_ready, serve_with, serving};

const MASTER_KEY: &str = "sk-master-key-for-timeline-tests";
/// The longest any wait may take before the test fails (a process starts in seconds).
const PATIENCE: Duration = Duration::from_secs(60);
const PHASES: [&str; 5] = [
    "started_at_ms",
    "running_at_ms",
    "alive_at_ms",
    "first_webhook_at_ms",
    "first_llm_call_at_ms",
];

/// A sandbox of `image` that answers `GET /alive` (a file of that name in the directory it
/// serves) on the port it is told.
fn sandbox(image: &str, session: &str) -> Value {
    json!({
        "image": image,
        "command": serving("echo ok > alive &&"),
        "working_dir": "/workspace",
        "environment": {},
        "session_id": session,
    })
}

/// Polls the session until its timeline has `phase`; the timeline.
async fn until_phase(sandgate: &SandgateProcess, session: &str, phase: &str) -> Value {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let (_, runtime) = call(sandgate, &format!("/sessions/{session}"), None).await;
        let timeline = &runtime["timeline"];
        if timeline[phase].is_i64() {
            return timeline.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{session} has no {phase}: {runtime}\n{}",
            sandgate.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Posts a conversation webhook with the sandbox's session key.
async fn webhook(sandgate: &SandgateProcess, key: &str) {
    let body = conversation(&new_id(), "2026-03-01T12:00:00Z", "running");
    let status = reqwest::Client::new()
        .post(sandgate.url("/api/v1/webhooks/conversations"))
        .header("x-session-api-key", key)
        .json(&body)
        .send()
        .await
        .expect("webhook")
        .status();
    assert_eq!(status, 200);
}

/// A gateway call carrying `session` in the gateway's session header.
async fn chat(sandgate: &SandgateProcess, session: &str) {
    let response = reqwest::Client::new()
        .post(sandgate.url("/v1/chat/completions"))
        .bearer_auth(MASTER_KEY)
        .header("x-litellm-session-id", session)
        .json(&json!({"model": "model", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .expect("chat");
    assert_eq!(response.status(), 200);
}

/// Starts `body`; the answer.
async fn start(sandgate: &SandgateProcess, body: Value) -> Value {
    let (status, started) = call(sandgate, "/start", Some(body)).await;
    assert_eq!(status, 200, "{started}");
    started
}

/// The phases of a timeline, in order: each present, none before the one before it.
fn assert_ordered(timeline: &Value) {
    let mut previous = i64::MIN;
    for phase in PHASES {
        let at = timeline[phase]
            .as_i64()
            .unwrap_or_else(|| panic!("no {phase}: {timeline}"));
        assert!(
            at >= previous,
            "{phase} before the phase before: {timeline}"
        );
        previous = at;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_s_phases_are_timed_in_order_warm_and_cold() {
    let upstream = ScriptedUpstream::start(Vec::new()).await;
    let gateway = file_with(&format!(
        "model_list:\n  - model_name: model\n    gateway_params: {{model: openai/up-model, api_base: \"{}/v1\", api_key: sk-upstream}}\n",
        upstream.base()
    ));
    let data = tempfile::tempdir().expect("data dir");
    let pool = sandbox("local/timed", "unused");
    let warm_runtimes = json!({"count": 1, "configs": [{
        "name": "timed", "image": pool["image"], "working_dir": pool["working_dir"],
        "command": pool["command"], "environment": pool["environment"],
    }]});
    let file = data.path().join("warm-runtimes.json");
    std::fs::write(&file, warm_runtimes.to_string()).expect("write");
    let mut sandgate = serve_with(
        data.path(),
        "8000",
        &[
            "--warm-runtimes-file",
            file.to_str().expect("utf-8"),
            "--gateway-config",
            gateway.path().to_str().expect("utf-8"),
            "--proxy-master-key",
            MASTER_KEY,
            // Idle pause off: the timeline is kept all the same.
            "--runtime-idle-seconds",
            "0",
        ],
    )
    .await;

    // A cold start (no pool runs its image), and a warm claim of the pool's sandbox.
    let cold = start(&sandgate, sandbox("local/cold", "timeline-cold")).await;
    assert_eq!(cold["warm"], false, "{cold}");
    assert_eq!(cold["timeline"]["launch"], "cold", "{cold}");
    assert_eq!(cold["timeline"]["cold_reason"], "no_pool", "{cold}");
    assert!(cold["timeline"]["first_webhook_at_ms"].is_null(), "{cold}");
    pool_ready(&sandgate, PATIENCE).await;
    let warm = start(&sandgate, sandbox("local/timed", "timeline-warm")).await;
    assert_eq!(warm["warm"], true, "{warm}");
    assert_eq!(warm["timeline"]["launch"], "warm", "{warm}");
    assert!(warm["timeline"]["cold_reason"].is_null(), "{warm}");
    // Claimed running: it ran from the claim.
    assert_eq!(
        warm["timeline"]["running_at_ms"], warm["timeline"]["started_at_ms"],
        "{warm}"
    );

    // Each agent-server answers its probe without a client asking.
    let cold_alive = until_phase(&sandgate, "timeline-cold", "alive_at_ms").await;
    until_phase(&sandgate, "timeline-warm", "alive_at_ms").await;

    // The cold sandbox's webhook and call mark its timeline, not the warm one's.
    webhook(&sandgate, cold["session_api_key"].as_str().expect("key")).await;
    chat(&sandgate, "timeline-cold").await;
    let cold_timed = until_phase(&sandgate, "timeline-cold", "first_llm_call_at_ms").await;
    assert_eq!(cold_timed["started_at_ms"], cold_alive["started_at_ms"]);
    let (_, untouched) = call(&sandgate, "/sessions/timeline-warm", None).await;
    assert!(
        untouched["timeline"]["first_webhook_at_ms"].is_null()
            && untouched["timeline"]["first_llm_call_at_ms"].is_null(),
        "{untouched}"
    );

    // The warm one's, later, leave the cold one's first webhook and call as they were.
    webhook(&sandgate, warm["session_api_key"].as_str().expect("key")).await;
    chat(&sandgate, "timeline-warm").await;
    webhook(&sandgate, cold["session_api_key"].as_str().expect("key")).await;
    // (A webhook's mark is written before it is answered; a call's, in the background.)
    let warm_timed = until_phase(&sandgate, "timeline-warm", "first_llm_call_at_ms").await;
    let (_, cold_now) = call(&sandgate, "/sessions/timeline-cold", None).await;
    assert_eq!(cold_now["timeline"], cold_timed, "{cold_now}");

    assert_ordered(&cold_timed);
    assert_ordered(&warm_timed);
    assert!(
        warm_timed["first_webhook_at_ms"].as_i64() > cold_timed["first_webhook_at_ms"].as_i64(),
        "{warm_timed} {cold_timed}"
    );

    // Each phase of each launch in the histogram.
    let metrics = scrape(&reqwest::Client::new(), &sandgate.url("/metrics")).await;
    for launch in ["warm", "cold"] {
        for phase in ["running", "alive", "first_webhook", "first_llm_call"] {
            assert_eq!(
                sample(
                    &metrics,
                    "sandgate_sandbox_start_phase_seconds_count",
                    &[("phase", phase), ("launch", launch)]
                ),
                Some(1.0),
                "{phase} {launch}: {metrics}"
            );
        }
    }
    sandgate.terminate().await;
}
