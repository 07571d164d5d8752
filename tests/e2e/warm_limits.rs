//! Runaway admin input: a warm configuration's `count` is bounded, per pool and in total,
//! and a reconciler pass starts nothing more once its configurations changed or the
//! process is stopping.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sandgate_runtime_api::sandboxes::driver::{
    DriverError, LocalDriver, Observed, SandboxDriver, SandboxKeys,
};
use sandgate_runtime_api::sandboxes::reconciler::Reconciler;
use sandgate_store::StoredSandbox;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

use crate::common::{ADMIN_PASSWORD, Backend, SandgateProcess, admin_args, serve_args};
use crate::warm_pools::{Fixture, IMAGE, saved};

/// Sandbox launches the reconciler runs at once (`CONCURRENT_LAUNCHES`).
const IN_FLIGHT: usize = 16;

async fn put_config(
    server: &SandgateProcess,
    token: &str,
    name: &str,
    count: Value,
) -> (u16, Value) {
    let response = reqwest::Client::new()
        .put(server.url(&format!("/api/admin/warm-runtime-configs/{name}")))
        .bearer_auth(token)
        .json(&json!({
            "image": format!("ghcr.io/acme/{name}:1"), "working_dir": "/workspace",
            "command": ["agent"], "environment": {}, "count": count,
        }))
        .send()
        .await
        .expect("put");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON"))
}

#[tokio::test]
async fn a_count_past_the_limits_is_refused_at_the_field() {
    let backend = Backend::embedded();
    let mut args = serve_args(&backend);
    args.extend(admin_args());
    args.extend(["--warm-pools-max-total".to_owned(), "150".to_owned()]);
    let server = SandgateProcess::spawn(&args, &[]).await;
    let token = server
        .admin_token(&reqwest::Client::new(), ADMIN_PASSWORD)
        .await;
    for count in [
        json!(1_000_000),
        json!(4_611_686_018_427_387_904_i64),
        json!(101),
    ] {
        let (status, answer) = put_config(&server, &token, "huge", count.clone()).await;
        assert_eq!(status, 422, "{count}: {answer}");
        assert_eq!(
            answer["detail"][0]["loc"],
            json!(["body", "count"]),
            "{answer}"
        );
        assert_eq!(answer["detail"][0]["type"], "less_than_equal", "{answer}");
    }
    let (status, _) = put_config(&server, &token, "first", json!(100)).await;
    assert_eq!(status, 200);
    // Saved configurations take over from the installer's (none here): 50 more fit.
    let (status, answer) = put_config(&server, &token, "second", json!(51)).await;
    assert_eq!(status, 422, "{answer}");
    assert!(
        answer["detail"][0]["msg"]
            .as_str()
            .is_some_and(|msg| msg.contains("WARM_POOLS_MAX_TOTAL")),
        "{answer}"
    );
    let (status, _) = put_config(&server, &token, "second", json!(50)).await;
    assert_eq!(status, 200);
    // Saving a configuration again counts it once.
    let (status, _) = put_config(&server, &token, "first", json!(100)).await;
    assert_eq!(status, 200);
}

/// A driver whose launches wait at a gate the test opens, counting them.
struct GatedDriver {
    local: LocalDriver,
    gate: Semaphore,
    started: watch::Sender<usize>,
    created: AtomicUsize,
}

#[async_trait::async_trait]
impl SandboxDriver for GatedDriver {
    async fn create(&self, sandbox: &StoredSandbox, key: &SandboxKeys) -> Result<(), DriverError> {
        self.started.send_modify(|started| *started += 1);
        self.gate.acquire().await.expect("gate").forget();
        self.created.fetch_add(1, Ordering::SeqCst);
        self.local.create(sandbox, key).await
    }

    async fn pause(&self, sandbox: &StoredSandbox) -> Result<(), DriverError> {
        self.local.pause(sandbox).await
    }

    async fn resume(&self, sandbox: &StoredSandbox, key: &SandboxKeys) -> Result<(), DriverError> {
        self.local.resume(sandbox, key).await
    }

    async fn delete(&self, runtime_id: &str) -> Result<(), DriverError> {
        self.local.delete(runtime_id).await
    }

    async fn observe(
        &self,
        sandboxes: &[StoredSandbox],
    ) -> Result<std::collections::HashMap<String, Observed>, DriverError> {
        self.local.observe(sandboxes).await
    }
}

fn gated(fixture: &Fixture) -> Arc<GatedDriver> {
    Arc::new(GatedDriver {
        local: LocalDriver::new(Duration::from_secs(2), fixture.clock.clone()),
        gate: Semaphore::new(0),
        started: watch::Sender::new(0),
        created: AtomicUsize::new(0),
    })
}

async fn launches_under_way(driver: &GatedDriver) {
    driver
        .started
        .subscribe()
        .wait_for(|started| *started == IN_FLIGHT)
        .await
        .expect("launches");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_starts_nothing_more_once_its_configuration_changed() {
    let fixture = Fixture::new(Backend::embedded(), 100);
    let store = crate::store_conformance::open(&fixture.backend).await;
    let driver = gated(&fixture);
    let replica = Arc::new(fixture.replica_with(store, driver.clone()));
    let pass = tokio::spawn({
        let replica = replica.clone();
        async move { replica.reconciler.pass().await.expect("pass") }
    });
    launches_under_way(&driver).await;
    // The admin shrinks the pool while the pass is filling it.
    replica
        .store
        .warm_configs
        .put_warm_config("v1_current", &saved(IMAGE, 1))
        .await
        .expect("save");
    driver.gate.add_permits(1_000);
    pass.await.expect("pass task");
    assert_eq!(driver.created.load(Ordering::SeqCst), IN_FLIGHT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_reconciler_starts_nothing_more() {
    let fixture = Fixture::new(Backend::embedded(), 100);
    let store = crate::store_conformance::open(&fixture.backend).await;
    let driver = gated(&fixture);
    let replica = fixture.replica_with(store, driver.clone());
    let stop = CancellationToken::new();
    let reconciler = Reconciler::new(replica.sandboxes.clone());
    let running = tokio::spawn(reconciler.run(stop.clone()));
    launches_under_way(&driver).await;
    stop.cancel();
    driver.gate.add_permits(1_000);
    tokio::time::timeout(Duration::from_secs(20), running)
        .await
        .expect("the reconciler stops")
        .expect("run task");
    assert_eq!(driver.created.load(Ordering::SeqCst), IN_FLIGHT);
}
