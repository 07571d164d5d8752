//! `/metrics` of the real binary: events counted by outcome, requests by route template
//! (never by path), and the reconciler's passes on the runtime API's metrics listener.

use serde_json::{Value, json};

use super::{PATIENCE, sample, scrape};
use crate::common::{Backend, SandgateProcess, base_args, serve_args};

#[tokio::test]
async fn events_are_counted_by_outcome_and_what_retention_drops() {
    let backend = Backend::embedded();
    let mut args = serve_args(&backend);
    args.extend(["--events-per-conversation".to_owned(), "2".to_owned()]);
    let server = SandgateProcess::spawn(&args, &[]).await;
    let client = reqwest::Client::new();
    let now = speedate::DateTime::now(0).expect("now").to_string();
    let mut batch: Vec<Value> = (0..4)
        .map(|n| json!({"kind": "PauseEvent", "id": format!("e{n}"), "timestamp": now, "source": "user"}))
        .collect();
    batch.push(json!({"kind": "NoSuchEvent", "id": "bad"}));
    let answer = client
        .post(server.url(&format!(
            "/api/v1/webhooks/events/{}",
            uuid::Uuid::new_v4().simple()
        )))
        .header("x-session-api-key", crate::common::WEBHOOK_KEY)
        .json(&batch)
        .send()
        .await
        .expect("request");
    assert_eq!(answer.status(), 200);
    let metrics = scrape(&client, &server.url("/metrics")).await;
    for (outcome, count) in [("stored", 4.0), ("rejected", 1.0), ("duplicate", 0.0)] {
        assert_eq!(
            sample(&metrics, "sandgate_events_total", &[("outcome", outcome)]),
            Some(count),
            "{outcome}: {metrics}"
        );
    }
    assert_eq!(
        sample(&metrics, "sandgate_events_dropped_total", &[]),
        Some(2.0),
        "{metrics}"
    );
}

#[tokio::test]
async fn the_edge_counts_requests_by_route_template_never_by_path() {
    let backend = Backend::embedded();
    let server = SandgateProcess::spawn(&serve_args(&backend), &[]).await;
    let client = reqwest::Client::new();
    let conversation = client
        .get(server.url("/api/v1/conversations/secret-looking-id-123"))
        .send()
        .await
        .expect("request");
    assert_eq!(conversation.status(), 401);
    for _ in 0..2 {
        let unknown = client
            .get(server.url("/no/such/path-456"))
            .send()
            .await
            .expect("request");
        assert_eq!(unknown.status(), 404);
    }

    let metrics = scrape(&client, &server.url("/metrics")).await;
    let route = [
        ("route", "/api/v1/conversations/{id}"),
        ("method", "GET"),
        ("status", "401"),
    ];
    assert_eq!(
        sample(&metrics, "sandgate_http_requests_total", &route),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            "sandgate_http_request_duration_seconds_count",
            &route[..2]
        ),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            "sandgate_http_requests_total",
            &[("route", "unmatched"), ("status", "404")]
        ),
        Some(2.0),
        "{metrics}"
    );
    for raw in ["secret-looking-id-123", "path-456"] {
        assert!(!metrics.contains(raw), "a raw path leaked into labels");
    }
    assert!(metrics.contains("# HELP sandgate_http_requests_total"));
    // The gRPC services of `serve` record into the same registry.
    assert!(metrics.contains("sandgate_reconcile_actions_total"));
}

#[tokio::test]
async fn the_runtime_api_serves_its_reconciler_metrics_on_the_metrics_listener() {
    let backend = Backend::embedded();
    let installer = tempfile::NamedTempFile::new().expect("temp file");
    let configs = json!({
        "count": 2,
        "configs": [{
            "name": "v1_current", "image": "ghcr.io/acme/agent:1.0", "working_dir": "/workspace",
            "command": ["/usr/local/bin/agent-server"], "environment": {},
        }]
    });
    std::fs::write(installer.path(), configs.to_string()).expect("write installer file");
    let mut args = [
        "runtime-api",
        "--grpc-listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--warm-runtimes-file",
        &installer.path().display().to_string(),
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend(base_args(&backend));
    let mut runtime_api = SandgateProcess::spawn(&args, &[]).await;
    runtime_api
        .wait_for_log("warm pools reconciled", PATIENCE)
        .await;
    let metrics_address = runtime_api
        .logged_address("metrics at http://")
        .expect("the metrics listener's address is logged");
    assert_ne!(metrics_address, runtime_api.address);

    let client = reqwest::Client::new();
    let metrics = scrape(&client, &format!("http://{metrics_address}/metrics")).await;
    assert!(
        sample(&metrics, "sandgate_reconcile_duration_seconds_count", &[])
            .is_some_and(|passes| passes >= 1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            "sandgate_reconcile_actions_total",
            &[("action", "created")]
        ),
        Some(2.0),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            "sandgate_reconcile_actions_total",
            &[("action", "culled")]
        ),
        Some(0.0),
        "{metrics}"
    );
    let warm: f64 = ["ready", "starting"]
        .iter()
        .filter_map(|state| {
            sample(
                &metrics,
                "sandgate_warm_pool_sandboxes",
                &[("pool", "v1_current"), ("state", state)],
            )
        })
        .sum();
    assert_eq!(warm, 2.0, "{metrics}");
    assert!(metrics.contains("# TYPE sandgate_reconcile_duration_seconds histogram"));
    assert_eq!(runtime_api.terminate().await, Some(0));
}
