//! The pools over REST: `/pools` lists every effective configuration, and a saved
//! configuration fills its pool at once, not at the next interval.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use super::{call, start_body};
use crate::common::{Backend, Sandgate};

async fn the_pools_endpoint_lists_every_effective_configuration(backend: Backend) {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    let text = json!({"count": 2, "configs": [
        {"name": "v1_current", "image": "ghcr.io/acme/agent:1.0", "working_dir": "/workspace",
         "command": ["/agent"], "environment": {}},
        {"name": "big", "image": "ghcr.io/acme/big:1.0", "working_dir": "/workspace",
         "command": ["/agent"], "environment": {}, "count": 0},
    ]});
    std::fs::write(file.path(), text.to_string()).expect("write");
    let path = file.path().display().to_string();
    let sandgate = Sandgate::start_with(&backend, &["--warm-runtimes-file", &path]).await;
    let response = sandgate
        .client
        .get(sandgate.url("/api/warm-runtime-pools"))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let (status, body) = call(
        &sandgate,
        reqwest::Method::GET,
        "/api/warm-runtime-pools",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let pools = body["pools"].as_array().expect("pools");
    let names: Vec<_> = pools
        .iter()
        .map(|pool| (pool["name"].clone(), pool["target"].clone()))
        .collect();
    assert_eq!(
        names,
        [(json!("big"), json!(0)), (json!("v1_current"), json!(2))]
    );
    for pool in pools {
        let counted =
            pool["ready"].as_i64().expect("ready") + pool["starting"].as_i64().expect("starting");
        assert!(
            counted <= pool["target"].as_i64().expect("target"),
            "{pool}"
        );
        assert_eq!(pool["failed"], 0);
        let state = pool["state"].as_str().unwrap_or_default();
        assert!(matches!(state, "ready" | "filling"), "{pool}");
    }
    // A pool of 0 holds its target.
    assert_eq!(pools[0]["state"], "ready");
}

/// A save wakes the reconciler at once: the pool fills long before the (hour-long)
/// interval. Waits for the pool's status with a deadline, never a fixed sleep.
async fn a_saved_configuration_fills_its_pool_at_once(backend: Backend) {
    let sandgate = crate::admin::start(
        &backend,
        None,
        &[
            "--reconcile-interval",
            "3600",
            "--local-sandbox-start-seconds",
            "0.01",
        ],
    )
    .await;
    let token = crate::admin::login(&sandgate).await;
    let mut config = start_body("");
    let object = config.as_object_mut().expect("object");
    object.remove("session_id");
    object.remove("resource_factor");
    object.insert("count".into(), json!(3));
    let (status, body) = crate::admin::put(&sandgate, &token, "custom", &config).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let pools = sandgate.first_pool_ready(3, Duration::from_secs(20)).await;
    assert_eq!(pools["pools"][0]["name"], "custom");
    // A start with the saved spec now claims one of them.
    let (_, started) = call(
        &sandgate,
        reqwest::Method::POST,
        "/start",
        Some(start_body("conv-claim")),
    )
    .await;
    assert_eq!(started["warm"], true, "{started}");
    assert_eq!(started["pool"], "custom");
}

crate::on_both_backends!(
    a_saved_configuration_fills_its_pool_at_once,
    the_pools_endpoint_lists_every_effective_configuration,
);
