//! The real OpenHands agent-server, unchanged, posting its webhooks to the real `sandgate`
//! binary: one conversation through create, four turns, pause, resume and delete, every
//! post answered 2xx and the record, its lifecycle and events read back. (How fast the
//! webhooks are answered is `benches/webhook_load.rs`'s: the turns' time, set beside a
//! receiver's run a moment earlier, measured the machine's load, not Sandgate.)
//!
//! Both releases the platform meets: 1.34.0 (what `openhands-ai` 1.11.0 pins) and 1.58.2.
//! `scripts/install-real-clients` installs them into `.tools/` (`scripts/test` runs it);
//! the driver is `tests/real_clients/agent_server_drive.py`.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

use crate::common::{
    Backend, REAL_CLIENTS, RUNTIME_KEY, SandgateProcess, WEBHOOK_KEY, driver_report, repository,
    serve_args, tool,
};

/// The python of the venv that holds `release` of the agent-server.
fn python(release: &str) -> PathBuf {
    tool(&format!("agent-server-{release}/bin/python"), REAL_CLIENTS)
}

/// Runs the driver against `webhook_base`; its report. With `record_url` (Sandgate's
/// record of a conversation, `{id}` for its id) the driver deletes the conversation only
/// once the record shows the resume.
async fn drive(release: &str, webhook_base: &str, record_url: Option<&str>) -> Value {
    let mut command = Command::new(python(release));
    command
        .arg(repository("tests/real_clients/agent_server_drive.py"))
        .args(["--webhook-base", webhook_base, "--session-key", WEBHOOK_KEY]);
    if let Some(record_url) = record_url {
        command.args(["--record-url", record_url, "--record-key", RUNTIME_KEY]);
    }
    driver_report(command).await
}

/// `sandgate_http_requests_total` samples of one route: `(method, status, count)`.
fn requests_of(metrics: &str, route: &str) -> Vec<(String, String, f64)> {
    let label = |line: &str, name: &str| {
        let start = line.find(&format!("{name}=\""))? + name.len() + 2;
        let end = start + line[start..].find('"')?;
        Some(line[start..end].to_owned())
    };
    metrics
        .lines()
        .filter(|line| line.starts_with("sandgate_http_requests_total{"))
        .filter(|line| label(line, "route").as_deref() == Some(route))
        .filter_map(|line| {
            let count = line.rsplit(' ').next()?.parse().ok()?;
            Some((label(line, "method")?, label(line, "status")?, count))
        })
        .collect()
}

async fn one_conversation(release: &str) {
    let _turn = crate::common::real_agent_server_turn().await;
    let backend = Backend::embedded();
    let sandgate = SandgateProcess::spawn(&serve_args(&backend), &[]).await;
    let report = drive(
        release,
        &sandgate.url("/api/v1/webhooks"),
        Some(&sandgate.url("/api/v1/conversations/{id}")),
    )
    .await;

    assert_eq!(report["agent_server_version"], release, "{report}");
    assert_eq!(
        report["webhook_failures"],
        serde_json::json!([]),
        "the agent-server logged failed webhooks: {report}"
    );

    // Every post the agent-server made was answered 2xx, events batches included.
    let client = reqwest::Client::new();
    let metrics = client
        .get(sandgate.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    for route in [
        "/api/v1/webhooks/conversations",
        "/api/v1/webhooks/events/{conversation_id}",
    ] {
        let answers = requests_of(&metrics, route);
        assert!(
            answers.iter().any(|(_, _, count)| *count > 0.0),
            "no request on {route}:\n{metrics}"
        );
        for (method, status, count) in &answers {
            assert!(
                status.starts_with('2'),
                "{count} {method} {route} answered {status}"
            );
        }
    }

    let id = report["conversation_id"].as_str().expect("conversation id");
    let record: Value = sandgate
        .conversation(&client, id)
        .await
        .json()
        .await
        .expect("the record");
    let lifecycle: Vec<&str> = record["sandgate"]["lifecycle"]
        .as_array()
        .unwrap_or_else(|| panic!("no lifecycle in {record}"))
        .iter()
        .filter_map(|step| step["kind"].as_str())
        .collect();
    assert_eq!(
        lifecycle,
        ["start", "pause", "resume", "delete"],
        "{record}"
    );
    let event_count = record["sandgate"]["event_count"].as_u64().unwrap_or(0);
    assert!(event_count > 0, "no event counted on {record}");

    let events: Value = client
        .get(sandgate.url(&format!(
            "/api/v1/conversations/{id}/events?limit=100&order=asc"
        )))
        .header("x-api-key", RUNTIME_KEY)
        .send()
        .await
        .expect("events")
        .json()
        .await
        .expect("JSON");
    let items = events["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items in {events}"));
    assert_eq!(items.len() as u64, event_count, "{events}");
    // The user's four messages (and the one queued before the pause) are there, in order.
    let user_messages = items
        .iter()
        .filter(|event| event["kind"] == "MessageEvent" && event["source"] == "user")
        .count();
    assert_eq!(user_messages, 5, "{events}");
    let stamps: Vec<&str> = items
        .iter()
        .filter_map(|event| event["timestamp"].as_str())
        .collect();
    assert!(
        stamps.windows(2).all(|pair| pair[0] <= pair[1]),
        "events out of order: {stamps:?}"
    );
    // The LLM key the agent was created with is never stored in clear.
    assert!(
        !events.to_string().contains("sk-fake-llm-key"),
        "an LLM key in the stored events"
    );
    assert!(
        no_error_logged(&sandgate.log()),
        "Sandgate logged an error:\n{}",
        sandgate.log()
    );
}

/// Whether Sandgate's log is free of errors.
fn no_error_logged(log: &str) -> bool {
    !log.lines().any(|line| line.contains("ERROR"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_server_1_34_0_runs_a_conversation_against_sandgate() {
    tokio::time::timeout(Duration::from_secs(600), one_conversation("1.34.0"))
        .await
        .expect("the run finished");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_server_1_58_2_runs_a_conversation_against_sandgate() {
    tokio::time::timeout(Duration::from_secs(600), one_conversation("1.58.2"))
        .await
        .expect("the run finished");
}
