//! SIGTERM while streams are in flight: `serve` and `model-gw` drain them within the
//! grace period, cut them past it, and exit zero; a killed `model-gw` ends the edge's
//! stream with an error event.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::Value;
use tokio::sync::Notify;

use super::{
    MASTER_KEY, PATIENCE, assert_openai_error, chat_body, config_file, events, read_events,
    read_to_end, start_apart,
};
use crate::common::scripted_upstream::{Reply, ScriptedUpstream, StreamEnd};
use crate::common::{Backend, SandgateProcess, serve_args};

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
