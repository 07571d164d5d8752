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
    // The last two calls, so that the log's bound keeps their entries: a short `user` and
    // session id, kept whole (the control: the entry carries them), and 1 MB of each,
    // kept cut to 256 characters.
    let long = "u".repeat(1 << 20);
    for (user, session) in [
        ("alice", "conversation-1".to_owned()),
        (long.as_str(), "s".repeat(4096)),
    ] {
        let (status, _) = send(
            post(
                &sandgate,
                "/v1/chat/completions",
                MASTER_KEY,
                &json!({"model": "gpt", "user": user, "messages": []}),
            )
            .header("x-gateway-session-id", session),
        )
        .await;
        assert_eq!(status, 200);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let logs = loop {
        let (_, logs) = send(
            sandgate
                .client
                .get(sandgate.url("/spend/logs?limit=100"))
                .bearer_auth(MASTER_KEY),
        )
        .await;
        let logs = logs.as_array().cloned().unwrap_or_default();
        let written = |user: &str| {
            logs.iter().any(|entry| {
                entry["user"]
                    .as_str()
                    .is_some_and(|kept| kept.starts_with(user))
            })
        };
        if written("alice") && written("u") {
            break logs;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the last calls' entries were never logged: {logs:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(logs.len(), 5, "the spend log keeps its bound: {logs:?}");
    for entry in &logs {
        assert!(entry.to_string().len() < 4096, "{entry}");
    }
    let entry_of = |user: &str| {
        logs.iter()
            .find(|entry| {
                entry["user"]
                    .as_str()
                    .is_some_and(|kept| kept.starts_with(user))
            })
            .expect("logged")
    };
    let short = entry_of("alice");
    assert_eq!(short["user"], "alice", "{short}");
    assert_eq!(short["session_id"], "conversation-1", "{short}");
    let cut = entry_of("u");
    assert_eq!(cut["user"], "u".repeat(256), "the 1 MB user is kept cut");
    assert_eq!(
        cut["session_id"],
        "s".repeat(256),
        "the long session id is kept cut"
    );

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
    // The added entries are read once and kept. The control: that read is counted, so a
    // lookup that read them again would be.
    let before = crate::model_gateway::hgetall_calls(&backend).await;
    let (status, _) = chat(&sandgate, MASTER_KEY, "added-0", None).await;
    assert_eq!(status, 200);
    let reads = crate::model_gateway::hgetall_calls(&backend).await;
    assert!(
        reads > before,
        "the first call's read of the added entries was not counted ({before} then {reads})"
    );
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
