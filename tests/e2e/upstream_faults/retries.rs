//! The retry policy: which upstream statuses and connection faults are retried, how
//! often, after what wait, and what the client gets once the retries are spent.

use std::time::{Duration, Instant};

use super::{MASTER_KEY, assert_openai_error, chat_body, json_of, start};
use crate::common::scripted_upstream::{Reply, ScriptedUpstream, error_body};
use crate::common::{Backend, Sandgate, file_with};

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
