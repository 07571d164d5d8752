//! Streams that break midway: reset, left by the client, or silent past the read
//! timeout. The client gets what was relayed, then an error event and a clean end.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::Notify;

use super::{assert_openai_error, events, read_events, read_to_end, start, start_apart};
use crate::common::scripted_upstream::{Reply, ScriptedUpstream, StreamEnd};

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

/// A client that leaves mid-stream does not end the upstream call: what the upstream
/// generates is charged, so the gateway reads it to its end (without keeping it), and the
/// call's spend log entry says 499 once it has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_mid_stream_is_logged_499_once_the_upstream_call_ended() {
    let finish = Arc::new(Notify::new());
    let upstream = ScriptedUpstream::start(vec![Reply::Stream {
        events: 1,
        end: StreamEnd::FinishOn(finish.clone()),
    }])
    .await;
    let gateway = start("leaving", &upstream.base(), &[]).await;
    let response = gateway.chat(true).await;
    assert_eq!(response.status(), 200);
    let mut chunks = response.bytes_stream();
    let mut text = String::new();
    read_events(&mut chunks, &mut text, 1).await;
    drop(chunks);
    finish.notify_one();
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
