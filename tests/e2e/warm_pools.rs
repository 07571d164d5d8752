//! Warm pools and the sandbox lifecycle on the local driver, driven pass by pass on a
//! clock the test moves: convergence, spec changes, removal, claims, pause and resume,
//! cleanup, and one reconciler at a time across replicas.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sandgate_proto::sandboxes::v1::ListPoolsRequest;
use sandgate_proto::sandboxes::v1::sandboxes_server::Sandboxes as _;
use sandgate_runtime_api::Authenticator;
use sandgate_runtime_api::admin::installer::InstallerFile;
use sandgate_runtime_api::admin::source::WarmConfigSource;
use sandgate_runtime_api::sandboxes::driver::{
    DriverError, LocalDriver, Observed, SandboxDriver, SandboxKeys,
};
use sandgate_runtime_api::sandboxes::reconciler::Pass;
use sandgate_runtime_api::sandboxes::{
    Reconciler, SandboxError, SandboxOptions, Sandboxes, SandboxesService,
};
use sandgate_store::{
    Fence, SandboxSpec, SandboxState, SandboxStore, Store, StoreResult, StoredSandbox,
    StoredWarmConfig, SweepIndex,
};
use serde_json::json;

use crate::common::{Backend, RUNTIME_KEY, TestClock};

const START_MS: i64 = 2_000;
const DAY_MS: i64 = 86_400_000;
pub(crate) const IMAGE: &str = "ghcr.io/acme/agent:1.0";

fn installer(count: i64) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    let text = json!({
        "count": count,
        "configs": [{
            "name": "v1_current", "image": IMAGE, "working_dir": "/workspace",
            "command": ["/usr/local/bin/agent-server", "--port", "8000"],
            "environment": {"OH_WEBHOOKS_0_BASE_URL": "http://app-a/hooks", "LOG_LEVEL": "info"},
        }]
    });
    std::fs::write(file.path(), text.to_string()).expect("write installer file");
    file
}

/// What a start for the installer default asks for.
fn default_spec() -> SandboxSpec {
    SandboxSpec {
        image: IMAGE.into(),
        command: vec![
            "/usr/local/bin/agent-server".into(),
            "--port".into(),
            "8000".into(),
        ],
        working_dir: "/workspace".into(),
        environment: BTreeMap::from([
            ("OH_WEBHOOKS_0_BASE_URL".into(), "http://app-a/hooks".into()),
            ("LOG_LEVEL".into(), "info".into()),
        ]),
        ..SandboxSpec::default()
    }
}

pub(crate) fn saved(image: &str, count: i64) -> StoredWarmConfig {
    let spec = default_spec();
    StoredWarmConfig {
        image: image.into(),
        working_dir: spec.working_dir,
        command: spec.command,
        environment: spec.environment,
        count: Some(count),
        ..StoredWarmConfig::default()
    }
}

/// One replica: the store, the sandboxes over it, its reconciler and service.
pub(crate) struct Replica {
    pub(crate) store: Store,
    pub(crate) sandboxes: Arc<Sandboxes>,
    pub(crate) reconciler: Reconciler,
    pub(crate) service: SandboxesService,
}

pub(crate) struct Fixture {
    pub(crate) clock: Arc<TestClock>,
    file: tempfile::NamedTempFile,
    pub(crate) backend: Backend,
}

impl Fixture {
    pub(crate) fn new(backend: Backend, count: i64) -> Self {
        Self {
            clock: Arc::new(TestClock::at(START_MS)),
            file: installer(count),
            backend,
        }
    }

    pub(crate) async fn replica(&self) -> Replica {
        let store = crate::store_conformance::open(&self.backend).await;
        self.replica_on(store)
    }

    fn replica_on(&self, store: Store) -> Replica {
        let driver = Arc::new(LocalDriver::new(Duration::from_secs(2), self.clock.clone()));
        self.replica_with(store, driver)
    }

    pub(crate) fn replica_with(&self, store: Store, driver: Arc<dyn SandboxDriver>) -> Replica {
        let configs = Arc::new(WarmConfigSource::new(
            store.clone(),
            InstallerFile::open(Some(self.file.path().to_path_buf())).expect("installer"),
            false,
        ));
        let sandboxes = Arc::new(Sandboxes::new(
            store.clone(),
            driver,
            b"a session key secret of 32 bytes",
            self.clock.clone(),
            SandboxOptions {
                base_url: "runtime.example.com".into(),
                ..SandboxOptions::default()
            },
            configs,
        ));
        let auth = Arc::new(Authenticator::new(
            &[],
            &[RUNTIME_KEY.to_owned()],
            store.session_keys.clone(),
        ));
        Replica {
            reconciler: Reconciler::new(sandboxes.clone()),
            service: SandboxesService::new(sandboxes.clone(), auth),
            sandboxes,
            store,
        }
    }
}

impl Replica {
    pub(crate) async fn pass(&self) -> Pass {
        self.reconciler.pass().await.expect("pass")
    }

    /// Warm (unclaimed) sandboxes by pool, with their states.
    pub(crate) async fn warm(&self) -> Vec<StoredSandbox> {
        let mut warm: Vec<_> = self
            .store
            .sandboxes
            .sandboxes()
            .await
            .expect("sandboxes")
            .into_iter()
            .filter(|record| record.session_id.is_none())
            .collect();
        warm.sort_by(|a, b| a.runtime_id.cmp(&b.runtime_id));
        warm
    }

    /// `(name, image, target, ready, starting, failed)` of every pool.
    pub(crate) async fn pools(&self) -> Vec<(String, String, i64, i64, i64, i64)> {
        let mut request = tonic::Request::new(ListPoolsRequest {});
        request
            .metadata_mut()
            .insert("x-api-key", RUNTIME_KEY.parse().expect("metadata"));
        self.service
            .list_pools(request)
            .await
            .expect("pools")
            .into_inner()
            .pools
            .into_iter()
            .map(|pool| {
                (
                    pool.name,
                    pool.image,
                    pool.target,
                    pool.ready,
                    pool.starting,
                    pool.failed,
                )
            })
            .collect()
    }
}

fn pool(
    name: &str,
    image: &str,
    target: i64,
    ready: i64,
    starting: i64,
) -> (String, String, i64, i64, i64, i64) {
    (name.into(), image.into(), target, ready, starting, 0)
}

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

async fn an_exhausted_pool_cold_starts_and_refills(backend: Backend) {
    let fixture = Fixture::new(backend, 1);
    let replica = fixture.replica().await;
    replica.pass().await;
    fixture.clock.advance(2_000);

    let (first, claimed) = replica
        .sandboxes
        .start(default_spec(), "conv-a".into())
        .await
        .expect("start");
    assert!(claimed, "the warm sandbox is claimed");
    assert_eq!(first.state, SandboxState::Running);
    assert_eq!(first.pool.as_deref(), Some("v1_current"));

    let (second, claimed) = replica
        .sandboxes
        .start(default_spec(), "conv-b".into())
        .await
        .expect("start");
    assert!(!claimed, "the pool is empty: a cold start");
    assert_eq!(second.state, SandboxState::Starting);
    assert_eq!(second.pool, None);

    let pass = replica.pass().await;
    assert_eq!(pass.created, 1, "the pool refills");
    assert_eq!(replica.pools().await, [pool("v1_current", IMAGE, 1, 0, 1)]);

    // A start for a session that already has a sandbox answers that sandbox.
    let (again, claimed) = replica
        .sandboxes
        .start(default_spec(), "conv-a".into())
        .await
        .expect("start");
    assert!(!claimed);
    assert_eq!(again.runtime_id, first.runtime_id);
}

async fn a_claim_needs_an_exact_match_less_the_per_deployment_keys(backend: Backend) {
    let fixture = Fixture::new(backend, 1);
    let replica = fixture.replica().await;
    replica.pass().await;

    let mut other_deployment = default_spec();
    other_deployment
        .environment
        .insert("OH_WEBHOOKS_0_BASE_URL".into(), "http://app-b/hooks".into());
    other_deployment
        .environment
        .insert("OH_ALLOW_CORS_ORIGINS_0".into(), "https://app-b".into());
    let mut extra_key = default_spec();
    extra_key.environment.insert("DEBUG".into(), "1".into());
    let mut other_command = default_spec();
    other_command.command.push("--verbose".into());
    let mut other_dir = default_spec();
    other_dir.working_dir = "/home/agent".into();

    for (session, spec) in [
        ("c1", &extra_key),
        ("c2", &other_command),
        ("c3", &other_dir),
    ] {
        let (_, claimed) = replica
            .sandboxes
            .start(spec.clone(), session.into())
            .await
            .expect("start");
        assert!(!claimed, "{session}: a different spec cold-starts");
    }
    // Still warm and starting: a starting sandbox is claimed rather than cold-starting.
    let (sandbox, claimed) = replica
        .sandboxes
        .start(other_deployment, "c4".into())
        .await
        .expect("start");
    assert!(claimed, "only per-deployment keys differ: claimed");
    assert_eq!(sandbox.pool.as_deref(), Some("v1_current"));
}

async fn pause_resume_and_the_session_key(backend: Backend) {
    let fixture = Fixture::new(backend, 0);
    let replica = fixture.replica().await;
    let (sandbox, _) = replica
        .sandboxes
        .start(default_spec(), "conv-p".into())
        .await
        .expect("start");
    let id = sandbox.runtime_id.clone();
    let first_key = replica.sandboxes.view(sandbox.clone()).session_api_key;
    assert_eq!(first_key.len(), 64);
    assert_eq!(
        replica
            .store
            .session_keys
            .sandbox_for_key(&sandgate_runtime_api::auth::session_key_digest(&first_key))
            .await
            .expect("key"),
        Some(id.clone())
    );

    // Only a paused (or failed) sandbox resumes.
    let refused = replica.sandboxes.resume(&id).await.expect_err("starting");
    assert!(matches!(refused, SandboxError::Conflict(_)), "{refused:?}");

    let paused = replica.sandboxes.pause(&id).await.expect("pause");
    assert_eq!(paused.state, SandboxState::Paused);
    assert_eq!(
        replica.sandboxes.pause(&id).await.expect("again").state,
        SandboxState::Paused
    );

    let resumed = replica.sandboxes.resume(&id).await.expect("resume");
    assert_eq!(resumed.state, SandboxState::Starting);
    let second_key = replica.sandboxes.view(resumed).session_api_key;
    assert_ne!(second_key, first_key, "a resume rotates the key");
    let digest = sandgate_runtime_api::auth::session_key_digest;
    assert_eq!(
        replica
            .store
            .session_keys
            .sandbox_for_key(&digest(&first_key))
            .await
            .expect("key"),
        None
    );
    assert_eq!(
        replica
            .store
            .session_keys
            .sandbox_for_key(&digest(&second_key))
            .await
            .expect("key"),
        Some(id.clone())
    );

    let refused = replica.sandboxes.resume(&id).await.expect_err("not paused");
    assert!(matches!(refused, SandboxError::Conflict(_)));

    let stopped = replica.sandboxes.stop(&id).await.expect("stop");
    assert_eq!(stopped.state, SandboxState::Stopped);
    assert_eq!(
        replica
            .store
            .session_keys
            .sandbox_for_key(&digest(&second_key))
            .await
            .expect("key"),
        None
    );
    assert!(matches!(
        replica.sandboxes.pause(&id).await,
        Err(SandboxError::Conflict(_))
    ));
    assert!(matches!(
        replica.sandboxes.pause("nope").await,
        Err(SandboxError::NotFound(_))
    ));
}

async fn a_paused_conversation_resumes_on_its_original_image(backend: Backend) {
    let fixture = Fixture::new(backend, 1);
    let replica = fixture.replica().await;
    replica.pass().await;
    let (sandbox, claimed) = replica
        .sandboxes
        .start(default_spec(), "conv-r".into())
        .await
        .expect("start");
    assert!(claimed);
    replica
        .sandboxes
        .pause(&sandbox.runtime_id)
        .await
        .expect("pause");

    replica
        .store
        .warm_configs
        .put_warm_config("v1_current", &saved("ghcr.io/acme/agent:3.0", 1))
        .await
        .expect("save");
    replica.pass().await;
    assert!(
        replica
            .warm()
            .await
            .iter()
            .all(|record| record.spec.image == "ghcr.io/acme/agent:3.0")
    );

    let resumed = replica
        .sandboxes
        .resume(&sandbox.runtime_id)
        .await
        .expect("resume");
    assert_eq!(resumed.spec.image, IMAGE);
    assert_eq!(resumed.runtime_id, sandbox.runtime_id);
}

async fn idle_paused_sandboxes_are_deleted_and_stopped_ones_forgotten(backend: Backend) {
    let fixture = Fixture::new(backend, 0);
    let replica = fixture.replica().await;
    let (idle, _) = replica
        .sandboxes
        .start(default_spec(), "idle".into())
        .await
        .expect("start");
    let (busy, _) = replica
        .sandboxes
        .start(default_spec(), "busy".into())
        .await
        .expect("start");
    replica
        .sandboxes
        .pause(&idle.runtime_id)
        .await
        .expect("pause");

    fixture.clock.advance(10 * DAY_MS - 1);
    assert_eq!(replica.pass().await.retired, 0, "not yet ten days");
    fixture.clock.advance(1);
    assert_eq!(replica.pass().await.retired, 1);
    let listed = replica.sandboxes.list().await.expect("list");
    let state_of = |id: &str| listed.iter().find(|r| r.runtime_id == id).map(|r| r.state);
    assert_eq!(state_of(&idle.runtime_id), Some(SandboxState::Stopped));
    assert_eq!(
        state_of(&busy.runtime_id),
        Some(SandboxState::Running),
        "running ones stay"
    );

    // Stopped sandboxes are listed for an hour, then forgotten.
    fixture.clock.advance(3_600_000);
    assert_eq!(replica.pass().await.retired, 1);
    let listed = replica.sandboxes.list().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].runtime_id, busy.runtime_id);
    assert!(
        replica
            .sandboxes
            .session("idle")
            .await
            .expect("read")
            .is_none()
    );
}

async fn one_reconciler_acts_at_a_time(backend: Backend) {
    let fixture = Fixture::new(backend, 3);
    let first = fixture.replica().await;
    // Two replicas: on Redis each with its own connection; the embedded store serves one
    // process, whose reconcilers share it.
    let second = match &fixture.backend {
        Backend::Redis(_) => fixture.replica().await,
        Backend::Embedded(_) => fixture.replica_on(first.store.clone()),
    };
    let mut holder = None;
    for _ in 0..10 {
        let (a, b) = tokio::join!(first.pass(), second.pass());
        assert!(a.acted ^ b.acted, "exactly one acts: {a:?} {b:?}");
        let acted = if a.acted { "first" } else { "second" };
        assert_eq!(
            *holder.get_or_insert(acted),
            acted,
            "the holder keeps its lease"
        );
    }
    assert_eq!(first.warm().await.len(), 3, "never both filled the pool");
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

/// A store of sandboxes that counts the records its callers read.
struct CountingReads {
    inner: Arc<dyn SandboxStore>,
    records_read: std::sync::atomic::AtomicUsize,
}

impl CountingReads {
    fn counted<T>(&self, records: StoreResult<Vec<T>>) -> StoreResult<Vec<T>> {
        if let Ok(records) = &records {
            self.records_read
                .fetch_add(records.len(), std::sync::atomic::Ordering::SeqCst);
        }
        records
    }

    fn take(&self) -> usize {
        self.records_read
            .swap(0, std::sync::atomic::Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl SandboxStore for CountingReads {
    async fn sandboxes(&self) -> StoreResult<Vec<StoredSandbox>> {
        self.counted(self.inner.sandboxes().await)
    }

    async fn sandbox(&self, runtime_id: &str) -> StoreResult<Option<StoredSandbox>> {
        let found = self.inner.sandbox(runtime_id).await?;
        self.counted(Ok(found.into_iter().collect()))
            .map(|found| found.into_iter().next())
    }

    async fn sandbox_for_session(&self, session_id: &str) -> StoreResult<Option<StoredSandbox>> {
        let found = self.inner.sandbox_for_session(session_id).await?;
        self.counted(Ok(found.into_iter().collect()))
            .map(|found| found.into_iter().next())
    }

    async fn swept_sandboxes(
        &self,
        index: SweepIndex,
        until_ms: i64,
        limit: usize,
    ) -> StoreResult<Vec<StoredSandbox>> {
        self.counted(self.inner.swept_sandboxes(index, until_ms, limit).await)
    }

    async fn reindex_sandboxes(&self) -> StoreResult<usize> {
        self.inner.reindex_sandboxes().await
    }

    async fn warm_sandboxes(
        &self,
        claim_key: &str,
        limit: usize,
    ) -> StoreResult<Vec<StoredSandbox>> {
        self.counted(self.inner.warm_sandboxes(claim_key, limit).await)
    }

    async fn put_sandbox(
        &self,
        previous: Option<&StoredSandbox>,
        next: &StoredSandbox,
        fence: Option<&Fence>,
    ) -> StoreResult<bool> {
        self.inner.put_sandbox(previous, next, fence).await
    }

    async fn delete_sandbox(
        &self,
        current: &StoredSandbox,
        fence: Option<&Fence>,
    ) -> StoreResult<bool> {
        self.inner.delete_sandbox(current, fence).await
    }

    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> StoreResult<Option<u64>> {
        self.inner.acquire_lease(name, holder, ttl).await
    }

    async fn release_lease(&self, name: &str, holder: &str) -> StoreResult<()> {
        self.inner.release_lease(name, holder).await
    }
}

/// Sandboxes started and stopped stay listed for the stopped retention, but a pass does
/// not read them until that is over: its cost follows the pools, not the history.
async fn a_pass_reads_the_pools_not_the_stopped_history(backend: Backend) {
    let fixture = Fixture::new(backend, 2);
    let mut store = crate::store_conformance::open(&fixture.backend).await;
    let counting = Arc::new(CountingReads {
        inner: store.sandboxes.clone(),
        records_read: 0.into(),
    });
    store.sandboxes = counting.clone();
    let replica = fixture.replica_on(store);
    replica.pass().await;
    fixture.clock.advance(2_000);
    for session in 0..40 {
        let (started, _) = replica
            .sandboxes
            .start(default_spec(), format!("conv-{session}"))
            .await
            .expect("start");
        replica
            .sandboxes
            .stop(&started.runtime_id)
            .await
            .expect("stop");
        if session % 10 == 0 {
            replica.pass().await;
        }
    }
    replica.pass().await;
    assert_eq!(replica.sandboxes.list().await.expect("list").len(), 40);

    counting.take();
    let pass = replica.pass().await;
    assert_eq!((pass.created, pass.culled, pass.retired), (0, 0, 0));
    assert_eq!(
        counting.take(),
        2,
        "a pass reads the pool's two warm sandboxes, none of the 40 stopped ones"
    );

    fixture.clock.advance(3_600_000);
    let pass = replica.pass().await;
    assert_eq!(pass.retired, 40, "forgotten after the retention");
    assert!(replica.sandboxes.list().await.expect("list").is_empty());
}

/// A warm sandbox written by a release without the sweep indexes (still running beside
/// this one during an upgrade) is seen by the pass of a reconciler that takes the lease:
/// here culled, its image being an old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_unindexed_warm_sandboxes_are_reconciled_after_an_upgrade() {
    let backend = Backend::redis().await;
    let fixture = Fixture::new(backend, 1);
    let replica = fixture.replica().await;
    replica.pass().await;
    let mut old = replica.warm().await.pop().expect("a warm sandbox");
    let Backend::Redis(redis) = &fixture.backend else {
        unreachable!("a Redis backend")
    };
    let mut connection = redis.connection().await;
    old.runtime_id = "written-by-an-older-release".into();
    old.spec.image = "ghcr.io/acme/agent:0.9".into();
    ::redis::pipe()
        .hset(
            "sandgate:{sandboxes}:records",
            &old.runtime_id,
            serde_json::to_vec(&old).expect("json"),
        )
        .hset(
            "sandgate:{sandboxes}:versions",
            &old.runtime_id,
            old.version,
        )
        // The first replica is gone, and its lease has lapsed.
        .del("sandgate:{sandboxes}:lease:reconciler")
        .query_async::<()>(&mut connection)
        .await
        .expect("raw write");

    let upgraded = fixture.replica().await;
    let pass = upgraded.pass().await;
    assert!(pass.acted);
    assert_eq!(
        pass.culled, 1,
        "the older release's sandbox is culled: {pass:?}"
    );
    assert!(
        upgraded
            .warm()
            .await
            .iter()
            .all(|record| record.runtime_id != old.runtime_id)
    );
}

crate::on_both_backends!(
    a_pass_reads_the_pools_not_the_stopped_history,
    a_cull_that_loses_a_race_still_culls,
    pools_converge_within_one_pass,
    a_changed_image_replaces_warm_sandboxes_and_spares_claimed_ones,
    a_removed_configuration_culls_its_pool,
    an_exhausted_pool_cold_starts_and_refills,
    a_claim_needs_an_exact_match_less_the_per_deployment_keys,
    pause_resume_and_the_session_key,
    a_paused_conversation_resumes_on_its_original_image,
    idle_paused_sandboxes_are_deleted_and_stopped_ones_forgotten,
    one_reconciler_acts_at_a_time,
);
