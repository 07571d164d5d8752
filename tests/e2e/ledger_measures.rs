//! The ledger's other measures (issue 52): tokens read from and written to the provider's
//! cache, as the answer reports them; the sandbox's time at the operator's prices per
//! sandbox-hour, scaled by its resource factor; and the rollup by day, everything counted
//! each day.

use serde_json::{Value, json};

use crate::admin::{login, start};
use crate::common::scripted_upstream::{Reply, ScriptedUpstream, UPSTREAM_MODEL};
use crate::common::{Backend, RUNTIME_KEY, Sandgate, file_with};
use crate::gateway_keys::{chat, generate, send};
use crate::model_gateway::MASTER_KEY;

async fn read(sandgate: &Sandgate, token: &str, path: &str) -> Value {
    let (status, body) = send(sandgate.client.get(sandgate.url(path)).bearer_auth(token)).await;
    assert_eq!(status, 200, "{path}: {body}");
    body
}

/// An answer whose usage reports cache reads (OpenAI's form) and Anthropic's cache write.
fn cached_answer() -> Reply {
    Reply::Answer {
        status: 200,
        headers: Vec::new(),
        body: json!({"id": "c1", "object": "chat.completion", "model": UPSTREAM_MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110,
                "prompt_tokens_details": {"cached_tokens": 60},
                "cache_creation_input_tokens": 25}})
        .to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_tokens_sandbox_cost_and_days_are_counted() {
    let upstream = ScriptedUpstream::start(vec![cached_answer(), cached_answer()]).await;
    let config = file_with(&format!(
        "model_list:\n  - model_name: chat\n    litellm_params: {{model: openai/{UPSTREAM_MODEL}, api_base: \"{}/v1\", api_key: k}}\n",
        upstream.base()
    ));
    let path = config.path().display().to_string();
    // 3.6 an hour running, 0.36 paused: a millisecond costs 1e-6, and 1e-7, at factor 1.
    let sandgate = start(
        &Backend::embedded(),
        None,
        &[
            "--gateway-config",
            &path,
            "--proxy-master-key",
            MASTER_KEY,
            "--sandbox-hour-price",
            "3.6",
            "--sandbox-paused-hour-price",
            "0.36",
        ],
    )
    .await;
    let token = login(&sandgate).await;
    let id = crate::common::new_id().replace('-', "");
    let (key, _) = generate(&sandgate, &json!({})).await;
    for _ in 0..2 {
        let (status, body) = chat(&sandgate, &key, "chat", Some(&id)).await;
        assert_eq!(status, 200, "{body}");
    }
    let runtime = |path: &str, body: Value| {
        sandgate
            .client
            .post(sandgate.url(path))
            .header("x-api-key", RUNTIME_KEY)
            .json(&body)
    };
    let (status, started) = send(runtime(
        "/start",
        json!({"image": "ghcr.io/acme/agent:1", "command": ["agent"], "working_dir": "/workspace",
               "environment": {}, "session_id": id, "resource_factor": 2}),
    ))
    .await;
    assert_eq!(status, 200, "{started}");
    let runtime_id = started["runtime_id"].clone();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let (status, body) = send(runtime("/pause", json!({"runtime_id": runtime_id}))).await;
    assert_eq!(status, 200, "{body}");
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let (status, body) = send(runtime("/stop", json!({"runtime_id": runtime_id}))).await;
    assert_eq!(status, 200, "{body}");

    // Both calls counted (just after each ends).
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let ledger = loop {
        let ledger = read(
            &sandgate,
            &token,
            &format!("/api/ledger/conversations/{id}"),
        )
        .await;
        if ledger["total"]["calls"] == 2 || tokio::time::Instant::now() > deadline {
            break ledger;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let total = &ledger["total"];
    assert_eq!(total["cache_read_tokens"], 120, "{ledger}");
    assert_eq!(total["cache_write_tokens"], 50, "{ledger}");
    assert_eq!(
        ledger["by_model"]["chat"]["cache_read_tokens"], 120,
        "{ledger}"
    );
    // The sandbox's time at its prices, twice over for its resource factor.
    let running = total["running_ms"].as_f64().expect("running");
    let paused = total["paused_ms"].as_f64().expect("paused");
    // (Running may be 0: a sandbox paused before it was seen running ran no time.)
    assert!(paused > 0.0, "{ledger}");
    let cost = total["sandbox_cost"].as_f64().expect("cost");
    let expected = 2.0 * (running * 1e-6 + paused * 1e-7);
    assert!(
        (cost - expected).abs() < 1e-9,
        "{cost} against {expected}: {ledger}"
    );

    // The rollup by day: today's row holds every count of the day.
    let rollup = read(&sandgate, &token, "/api/ledger/rollup?by=day").await;
    let rows = rollup["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{rollup}");
    let today = &rows[0];
    assert_eq!(
        today["id"].as_str().map(str::len),
        Some(10),
        "a date: {rollup}"
    );
    for measure in [
        "calls",
        "cache_read_tokens",
        "running_ms",
        "paused_ms",
        "sandbox_cost",
    ] {
        assert_eq!(today[measure], total[measure], "{measure}: {rollup}");
    }
    let csv = sandgate
        .client
        .get(sandgate.url("/api/ledger/rollup?by=day&format=csv"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("csv")
        .text()
        .await
        .expect("text");
    assert!(
        csv.lines().count() == 2 && csv.contains(",120,50,"),
        "{csv}"
    );
}
