//! What the gateway records of a call whatever becomes of it (issue 41): a client that
//! leaves once its answer's last event arrived completed its call (not 499), and a call
//! refused before it went upstream leaves its spend log entry, with the reason, under the
//! entry that routed it.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::common::scripted_upstream::{Reply, ScriptedUpstream, StreamEnd};
use crate::common::{Backend, Sandgate, file_with};
use crate::model_gateway::MASTER_KEY;

/// `sandgate serve` in-process, its gateway's one entry (`model`) at `base`.
async fn start(model: &str, base: &str) -> (Sandgate, tempfile::NamedTempFile) {
    let config = file_with(&format!(
        "model_list:\n  - model_name: {model}\n    gateway_params: {{model: openai/up-model, api_base: \"{base}/v1\", api_key: sk-upstream}}\n"
    ));
    let path = config.path().display().to_string();
    let sandgate = Sandgate::start_with(
        &Backend::embedded(),
        &["--gateway-config", &path, "--proxy-master-key", MASTER_KEY],
    )
    .await;
    (sandgate, config)
}

/// The spend log once it holds an entry (with a deadline).
async fn spend_logs(sandgate: &Sandgate) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let logs: Vec<Value> = sandgate
            .client
            .get(sandgate.url("/spend/logs"))
            .bearer_auth(MASTER_KEY)
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("JSON");
        if !logs.is_empty() {
            return logs;
        }
        assert!(tokio::time::Instant::now() < deadline, "no spend log entry");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `sandgate_gateway_requests_total` of `model` and `status` (every model name here is
/// used by one test only: the recorder is the test process's).
async fn answered(sandgate: &Sandgate, model: &str, status: u16) -> Option<f64> {
    let exposition = sandgate
        .client
        .get(sandgate.url("/metrics"))
        .send()
        .await
        .expect("scrape")
        .text()
        .await
        .expect("exposition");
    let model = format!("model=\"{model}\"");
    let status = format!("status=\"{status}\"");
    exposition.lines().find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let labels = series
            .strip_prefix("sandgate_gateway_requests_total")?
            .strip_prefix('{')?;
        (labels.contains(&model) && labels.contains(&status))
            .then(|| value.parse().ok())
            .flatten()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_after_the_last_event_completed_its_call() {
    let closed = Arc::new(Notify::new());
    let upstream = ScriptedUpstream::start(vec![Reply::Stream {
        events: 1,
        end: StreamEnd::DoneThenHoldUntilClosed(closed.clone()),
    }])
    .await;
    let (sandgate, _config) = start("leaving-at-the-end", &upstream.base()).await;
    let response = sandgate
        .client
        .post(sandgate.url("/v1/chat/completions"))
        .bearer_auth(MASTER_KEY)
        .json(&json!({"model": "leaving-at-the-end", "messages": [{"role": "user", "content": "hi"}], "stream": true}))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    // As Codex does: read to the last event, then close, the upstream's stream still open.
    let mut chunks = response.bytes_stream();
    let mut text = String::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        while !text.contains("data: [DONE]") {
            let chunk = chunks.next().await.expect("a chunk").expect("chunk");
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(read.is_ok(), "the last event did not arrive: {text}");
    drop(chunks);
    let ended = tokio::time::timeout(Duration::from_secs(10), closed.notified()).await;
    assert!(ended.is_ok(), "the upstream call outlived its client");
    let logs = spend_logs(&sandgate).await;
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs[0]["status"], 200, "{logs:?}");
    assert_eq!(
        answered(&sandgate, "leaving-at-the-end", 200).await,
        Some(1.0)
    );
    assert_eq!(answered(&sandgate, "leaving-at-the-end", 499).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_call_is_in_the_spend_log_with_its_reason_under_its_entry() {
    let upstream = ScriptedUpstream::start(Vec::new()).await;
    let (sandgate, _config) = start("refusing", &upstream.base()).await;
    // A server tool cannot be translated for an OpenAI-compatible upstream: refused once
    // routed.
    let response = sandgate
        .client
        .post(sandgate.url("/v1/messages"))
        .bearer_auth(MASTER_KEY)
        .header("x-litellm-session-id", "session-41")
        .json(&json!({
            "model": "refusing", "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}],
        }))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 400);
    // A caller without a key leaves no entry (it cannot fill the log), only its metric.
    let anonymous = sandgate
        .client
        .post(sandgate.url("/v1/messages"))
        .json(&json!({"model": "refusing", "messages": []}))
        .send()
        .await
        .expect("request");
    assert_eq!(anonymous.status(), 401);
    let logs = spend_logs(&sandgate).await;
    assert_eq!(logs.len(), 1, "{logs:?}");
    let entry = &logs[0];
    assert_eq!(entry["status"], 400, "{entry}");
    assert_eq!(entry["model"], "refusing", "{entry}");
    assert_eq!(entry["upstream_model"], "up-model", "{entry}");
    assert_eq!(entry["session_id"], "session-41", "{entry}");
    assert_eq!(entry["call_type"], "anthropic_messages", "{entry}");
    let error = &entry["metadata"]["error_information"];
    assert_eq!(error["error_code"], "400", "{entry}");
    assert!(
        error["error_message"]
            .as_str()
            .is_some_and(|message| message.contains("tools[0].type")),
        "{entry}"
    );
    assert_eq!(answered(&sandgate, "refusing", 400).await, Some(1.0));
    assert!(upstream.bodies().is_empty());
}
