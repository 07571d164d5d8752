//! Bookkeeping a client can inflate is bounded: long user fields, many added entries,
//! long names, and lookups of models nobody routes.

use std::time::Duration;

use serde_json::json;

use super::{add, allowing_loopback, model};
use crate::common::{Backend, file_with};
use crate::gateway_keys::{chat, post, send};
use crate::model_gateway::{FakeUpstream, MASTER_KEY};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookkeeping_a_client_can_inflate_is_bounded() {
    let backend = Backend::embedded();
    let upstream = FakeUpstream::start().await;
    let config = file_with(&format!(
        "model_list:\n  - model_name: gpt\n    litellm_params: {{model: openai/gpt, api_base: \"{}/v1\", api_key: k}}\n",
        upstream.base()
    ));
    let path = config.path().display().to_string();
    let sandgate = allowing_loopback(
        &backend,
        &[
            "--gateway-config",
            &path,
            "--spend-log-max-entries",
            "5",
            "--metrics-api-key",
            "sk-metrics-key-for-tests",
        ],
    )
    .await;
    // A 1 MB `user` and session id are kept cut.
    let long = "u".repeat(1 << 20);
    let (status, _) = send(
        post(
            &sandgate,
            "/v1/chat/completions",
            MASTER_KEY,
            &json!({"model": "gpt", "user": long, "messages": []}),
        )
        .header("x-gateway-session-id", "s".repeat(4096)),
    )
    .await;
    assert_eq!(status, 200);
    // Models added at runtime share one metrics label, however many.
    for index in 0..20 {
        let (status, body) = add(
            &sandgate,
            &model(
                &format!("added-{index}"),
                &format!("{}/v1", upstream.base()),
            ),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let (status, _) = chat(&sandgate, MASTER_KEY, &format!("added-{index}"), None).await;
        assert_eq!(status, 200);
    }
    // Oversized added entries are refused.
    let (status, _) = add(
        &sandgate,
        &model(&"n".repeat(4096), &format!("{}/v1", upstream.base())),
    )
    .await;
    assert_eq!(status, 400);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let logs = loop {
        let (_, logs) = send(
            sandgate
                .client
                .get(sandgate.url("/spend/logs?limit=100"))
                .bearer_auth(MASTER_KEY),
        )
        .await;
        let logs = logs.as_array().cloned().unwrap_or_default();
        if logs.iter().any(|entry| entry["model"] == "added-19")
            || tokio::time::Instant::now() > deadline
        {
            break logs;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(
        logs.len() <= 5,
        "the spend log keeps {} entries",
        logs.len()
    );
    for entry in &logs {
        assert!(entry.to_string().len() < 4096, "{entry}");
    }

    // `/metrics` asks for its key, and counts the added models under one label.
    let open = sandgate
        .client
        .get(sandgate.url("/metrics"))
        .send()
        .await
        .expect("metrics");
    assert_eq!(open.status(), 401);
    let metrics = sandgate
        .client
        .get(sandgate.url("/metrics"))
        .bearer_auth("sk-metrics-key-for-tests")
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(metrics.contains("model=\"(added)\""), "{metrics}");
    assert!(
        !metrics.contains("added-7"),
        "an added name made its own series"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_model_costs_one_lookup_not_a_read_of_every_added_entry() {
    let backend = Backend::redis().await;
    let upstream = FakeUpstream::start().await;
    let sandgate = allowing_loopback(&backend, &[]).await;
    for index in 0..5 {
        let (status, body) = add(
            &sandgate,
            &model(
                &format!("added-{index}"),
                &format!("{}/v1", upstream.base()),
            ),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    // The added entries are read once and kept.
    let (status, _) = chat(&sandgate, MASTER_KEY, "added-0", None).await;
    assert_eq!(status, 200);
    let reads = crate::model_gateway::hgetall_calls(&backend).await;
    for _ in 0..20 {
        let (status, _) = chat(&sandgate, MASTER_KEY, "nobody-routes-this", None).await;
        assert_eq!(status, 404);
    }
    let more = crate::model_gateway::hgetall_calls(&backend).await - reads;
    assert!(
        more < 5,
        "20 unknown names read every added entry {more} times"
    );
}
