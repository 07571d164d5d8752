//! The orphan sweep on a cluster: the workloads no record names deleted, never a Secret
//! read, and a sweep that would delete most of the namespace refused.

use sandgate_runtime_api::sandboxes::driver::SandboxDriver;
use sandgate_runtime_api::sandboxes::kubernetes::KubernetesDriver;

use crate::common::fake_kube::{DEPLOYMENTS, FakeKube};
use sandgate_runtime_api::ambient::Clock;

use super::*;

/// A replica whose reconciler drives the fake cluster, its clock `since_made_ms` past the
/// time the fake stamps on the objects it creates (2026-01-01T00:00:xx).
async fn sweeping(
    since_made_ms: i64,
) -> (
    FakeKube,
    std::sync::Arc<KubernetesDriver>,
    crate::warm_pools::Replica,
    crate::warm_pools::Fixture,
) {
    let fake = FakeKube::start().await;
    let driver = std::sync::Arc::new(KubernetesDriver::with_client(fake.client(), options()));
    let fixture = crate::warm_pools::Fixture::new(crate::common::Backend::embedded(), 0);
    let replica = fixture.replica_with(
        crate::store_conformance::open(&fixture.backend).await,
        driver.clone(),
    );
    let made_ms = 1_767_225_600_000;
    fixture
        .clock
        .advance(made_ms + since_made_ms - fixture.clock.now_ms());
    (fake, driver, replica, fixture)
}

/// The reconciler's orphan sweep: Sandgate's workloads that no record names are deleted
/// once older than the grace period; a sandbox with a record, and a young orphan (a start
/// that may still be writing), are left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orphan_sweep_deletes_workloads_no_record_names() {
    let (fake, driver, replica, fixture) = sweeping(5 * 60_000).await;

    let (kept, _) = replica
        .sandboxes
        .start(sandbox("unused", None).spec, "conv-kept".into())
        .await
        .expect("start");
    driver
        .create(&sandbox("0rphan", None), &keys(KEY))
        .await
        .expect("an orphan's objects");

    // Five minutes old: too young to be called an orphan.
    let pass = replica.reconciler.pass().await.expect("pass");
    assert_eq!(pass.orphans, 0);
    assert!(
        fake.object(DEPLOYMENTS, NAMESPACE, "sandbox-0rphan")
            .is_some()
    );

    // An hour on, the next sweep deletes every object of the orphan, and only those.
    fixture.clock.advance(3_600_000);
    let pass = replica.reconciler.pass().await.expect("pass");
    assert_eq!(pass.orphans, 1, "{pass:?}");
    for (resource, found) in objects_of(&fake, "0rphan") {
        assert!(found.is_none(), "{resource} of the orphan is left");
    }
    for (resource, found) in objects_of(&fake, &kept.runtime_id) {
        assert!(
            found.is_some(),
            "{resource} of a recorded sandbox was swept"
        );
    }
    never_read_a_secret(&fake);
}

/// A sweep that would delete most of what the platform runs deletes nothing: a Sandgate
/// pointed at an empty (or another installation's) store must not empty the namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orphan_sweep_refuses_to_delete_most_of_the_namespace() {
    let (fake, driver, replica, _fixture) = sweeping(3_600_000).await;
    let orphans = sandgate_runtime_api::sandboxes::reconciler::ORPHAN_SWEEP_GUARD + 1;
    for i in 0..orphans {
        driver
            .create(&sandbox(&format!("0rphan{i}"), None), &keys(KEY))
            .await
            .expect("an orphan's objects");
    }
    let pass = replica.reconciler.pass().await.expect("pass");
    assert_eq!(pass.orphans, 0);
    assert_eq!(fake.names(DEPLOYMENTS, NAMESPACE).len(), orphans);
}
