//! Pools follow their configurations: a pool converges within one pass, a changed image
//! replaces warm sandboxes (and spares claimed ones), a removed configuration culls its
//! pool, and a cull survives losing a race with another writer.

use std::sync::Arc;
use std::time::Duration;

use sandgate_runtime_api::sandboxes::driver::{
    DriverError, LocalDriver, Observed, SandboxDriver, SandboxKeys,
};
use sandgate_store::{SandboxState, Store, StoredSandbox};

use super::{Fixture, IMAGE, default_spec, pool, saved};
use crate::common::Backend;

async fn pools_converge_within_one_pass(backend: Backend) {
    let fixture = Fixture::new(backend, 2);
    let replica = fixture.replica().await;
    assert_eq!(replica.pools().await, [pool("v1_current", IMAGE, 2, 0, 0)]);

    let first = replica.pass().await;
    assert_eq!((first.acted, first.created, first.culled), (true, 2, 0));
    assert_eq!(replica.pools().await, [pool("v1_current", IMAGE, 2, 0, 2)]);

    // Started sandboxes become ready after the local driver's start time.
    fixture.clock.advance(2_000);
    assert_eq!(replica.pools().await, [pool("v1_current", IMAGE, 2, 2, 0)]);
    let steady = replica.pass().await;
    assert_eq!(
        (steady.created, steady.culled),
        (0, 0),
        "a full pool is left alone"
    );
    let warm = replica.warm().await;
    assert_eq!(warm.len(), 2);
    assert!(
        warm.iter()
            .all(|record| record.state == SandboxState::Running
                && record.pool.as_deref() == Some("v1_current")
                && record.spec.image == IMAGE)
    );
}

async fn a_changed_image_replaces_warm_sandboxes_and_spares_claimed_ones(backend: Backend) {
    let fixture = Fixture::new(backend, 2);
    let replica = fixture.replica().await;
    replica.pass().await;
    fixture.clock.advance(2_000);
    let (claimed, was_warm) = replica
        .sandboxes
        .start(default_spec(), "conv-1".into())
        .await
        .expect("start");
    assert!(was_warm);
    replica.pass().await;
    let before: Vec<_> = replica
        .warm()
        .await
        .into_iter()
        .map(|r| r.runtime_id)
        .collect();

    // Saving a configuration takes pool management over (no overlay): `v1_current` is
    // now the saved one, on a new image.
    replica
        .store
        .warm_configs
        .put_warm_config("v1_current", &saved("ghcr.io/acme/agent:2.0", 2))
        .await
        .expect("save");
    let pass = replica.pass().await;
    assert_eq!((pass.created, pass.culled), (2, 2));
    let after = replica.warm().await;
    assert!(
        after
            .iter()
            .all(|record| record.spec.image == "ghcr.io/acme/agent:2.0")
    );
    assert!(
        after
            .iter()
            .all(|record| !before.contains(&record.runtime_id))
    );

    let still = replica
        .store
        .sandboxes
        .sandbox(&claimed.runtime_id)
        .await
        .expect("read")
        .expect("the claimed sandbox is untouched");
    assert_eq!(still.spec.image, IMAGE);
    assert_eq!(still.session_id.as_deref(), Some("conv-1"));
}

async fn a_removed_configuration_culls_its_pool(backend: Backend) {
    let fixture = Fixture::new(backend, 1);
    let replica = fixture.replica().await;
    replica
        .store
        .warm_configs
        .put_warm_config("custom", &saved("ghcr.io/acme/custom:1", 2))
        .await
        .expect("save");
    replica.pass().await;
    assert_eq!(
        replica.pools().await,
        [pool("custom", "ghcr.io/acme/custom:1", 2, 0, 2)]
    );

    // Deleting the last saved configuration hands pools back to the installer's file.
    assert!(
        replica
            .store
            .warm_configs
            .delete_warm_config("custom")
            .await
            .expect("delete")
    );
    let pass = replica.pass().await;
    assert_eq!((pass.created, pass.culled), (1, 2));
    let warm = replica.warm().await;
    assert_eq!(warm.len(), 1);
    assert_eq!(warm[0].pool.as_deref(), Some("v1_current"));
}

/// A driver that, while the reconciler deletes a sandbox, writes that sandbox's record
/// behind its back once (as a concurrent status read does), to show that a cull survives
/// losing its compare-and-swap.
struct MeddlingDriver {
    local: LocalDriver,
    store: Store,
    meddled: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl SandboxDriver for MeddlingDriver {
    async fn create(&self, sandbox: &StoredSandbox, key: &SandboxKeys) -> Result<(), DriverError> {
        self.local.create(sandbox, key).await
    }

    async fn pause(&self, sandbox: &StoredSandbox) -> Result<(), DriverError> {
        self.local.pause(sandbox).await
    }

    async fn resume(&self, sandbox: &StoredSandbox, key: &SandboxKeys) -> Result<(), DriverError> {
        self.local.resume(sandbox, key).await
    }

    async fn delete(&self, runtime_id: &str) -> Result<(), DriverError> {
        if !self.meddled.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let stored = self
                .store
                .sandboxes
                .sandbox(runtime_id)
                .await
                .expect("read");
            let stored = stored.expect("still stored");
            let mut bumped = stored.clone();
            bumped.status_detail = Some("seen by another reader".into());
            bumped.version += 1;
            assert!(
                self.store
                    .sandboxes
                    .put_sandbox(Some(&stored), &bumped, None)
                    .await
                    .expect("write")
            );
        }
        self.local.delete(runtime_id).await
    }

    async fn observe(
        &self,
        sandboxes: &[StoredSandbox],
    ) -> Result<std::collections::HashMap<String, Observed>, DriverError> {
        self.local.observe(sandboxes).await
    }
}

async fn a_cull_that_loses_a_race_still_culls(backend: Backend) {
    let fixture = Fixture::new(backend, 2);
    let store = crate::store_conformance::open(&fixture.backend).await;
    let driver = Arc::new(MeddlingDriver {
        local: LocalDriver::new(Duration::from_secs(2), fixture.clock.clone()),
        store: store.clone(),
        meddled: false.into(),
    });
    let replica = fixture.replica_with(store, driver);
    replica.pass().await;
    replica
        .store
        .warm_configs
        .put_warm_config("v1_current", &saved("ghcr.io/acme/agent:2.0", 2))
        .await
        .expect("save");
    let pass = replica.pass().await;
    assert_eq!((pass.created, pass.culled), (2, 2));
    let warm = replica.warm().await;
    assert_eq!(
        warm.len(),
        2,
        "no sandbox on the old image is left: {warm:?}"
    );
    assert!(
        warm.iter()
            .all(|record| record.spec.image == "ghcr.io/acme/agent:2.0")
    );
}

crate::on_both_backends!(
    a_cull_that_loses_a_race_still_culls,
    pools_converge_within_one_pass,
    a_changed_image_replaces_warm_sandboxes_and_spares_claimed_ones,
    a_removed_configuration_culls_its_pool,
);
