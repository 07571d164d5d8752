//! The runtime API key's quotas (issue 40) through the app server's own runtime API client,
//! unchanged (`tests/real_clients/runtime_client_quota_drive.py`): `MAX_RUNTIMES` refuses
//! a start or a resume past the sandboxes the key may hold, a paused sandbox holding
//! none, and `SANDBOX_START_RATE` a burst of starts; the client takes both refusals as it
//! takes a failed start or resume. The key's entry shows `max_runtimes`.

use serde_json::Value;

use crate::common::{Backend, REAL_CLIENTS, RUNTIME_KEY, Sandgate, Steps, tool};

const IMAGE: &str = "ghcr.io/acme/agent:quota";

async fn api_keys(sandgate: &Sandgate) -> Value {
    let token = crate::admin::login(sandgate).await;
    sandgate
        .client
        .get(sandgate.url("/api/admin/api-keys"))
        .bearer_auth(token)
        .send()
        .await
        .expect("api keys")
        .json()
        .await
        .expect("JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_server_s_client_is_refused_past_max_runtimes_and_the_start_rate() {
    let held = crate::admin::start(&Backend::embedded(), None, &["--max-runtimes", "2"]).await;
    let rated =
        crate::admin::start(&Backend::embedded(), None, &["--sandbox-start-rate", "2"]).await;
    let steps = Steps::run(
        tool("app-server/bin/python", REAL_CLIENTS),
        "tests/real_clients/runtime_client_quota_drive.py",
        &[
            "--url",
            &held.url(""),
            "--rate-url",
            &rated.url(""),
            "--api-key",
            RUNTIME_KEY,
            "--image",
            IMAGE,
        ],
        String::new,
    )
    .await;
    let step = |name: &str| steps.get(name);
    // A sandbox the client holds is starting or running: never in error, nor missing.
    let holds =
        |status: &Value| ["STARTING", "RUNNING"].contains(&status.as_str().unwrap_or("none"));

    let two = &step("two_started")["statuses"];
    assert!(
        two.as_array()
            .is_some_and(|statuses| statuses.len() == 2 && statuses.iter().all(holds)),
        "{two}"
    );

    let refused = step("third_refused")["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        refused.contains("429") && refused.contains("Failed to start sandbox"),
        "the client reports the refusal as a failed start: {refused}"
    );
    assert_eq!(step("pause_first")["ok"], true);
    let third = &step("third_after_pause")["status"];
    assert!(holds(third), "a paused sandbox holds none: {third}");
    assert_eq!(
        step("resume_refused")["ok"],
        false,
        "the client's failed resume"
    );
    assert_eq!(step("still_paused")["status"], "PAUSED");
    assert_eq!(step("delete_third")["ok"], true);
    assert_eq!(step("resume_after_delete")["ok"], true);
    let resumed = &step("resumed")["status"];
    assert!(holds(resumed), "resumed once room was made: {resumed}");

    let rate = step("rate_refused")["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(rate.contains("429"), "{rate}");

    // The key's entry says what it may hold.
    let keys = api_keys(&held).await;
    assert_eq!(keys[0]["max_runtimes"], 2, "{keys}");
    let keys = api_keys(&rated).await;
    assert_eq!(keys[0]["max_runtimes"], Value::Null, "{keys}");
}

/// The attack of the issue: one key fires 60 starts at once. Exactly `MAX_RUNTIMES` of
/// them start; the rest are refused with 429, never 500, and start nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_sixty_concurrent_starts_holds_max_runtimes_exactly() {
    let sandgate = Sandgate::start_with(&Backend::embedded(), &["--max-runtimes", "10"]).await;
    let starts = (0..60).map(|n| {
        sandgate
            .client
            .post(sandgate.url("/start"))
            .header("x-api-key", RUNTIME_KEY)
            .json(&serde_json::json!({
                "image": IMAGE, "command": ["agent"], "working_dir": "/workspace",
                "environment": {}, "session_id": format!("burst-{n}"),
            }))
            .send()
    });
    let mut statuses: Vec<u16> = futures::future::join_all(starts)
        .await
        .into_iter()
        .map(|response| response.expect("answer").status().as_u16())
        .collect();
    statuses.sort_unstable();
    assert_eq!(statuses.iter().filter(|status| **status == 200).count(), 10);
    assert_eq!(
        statuses.iter().filter(|status| **status == 429).count(),
        50,
        "{statuses:?}"
    );
    let listed: Value = sandgate
        .client
        .get(sandgate.url("/list"))
        .header("x-api-key", RUNTIME_KEY)
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("JSON");
    assert_eq!(listed["runtimes"].as_array().map(Vec::len), Some(10));
}
