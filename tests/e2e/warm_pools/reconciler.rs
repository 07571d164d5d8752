//! The reconciler across replicas and releases: one acts at a time, a pass reads the
//! pools rather than the stopped history, and records an older release wrote without the
//! sweep indexes are still reconciled.

use std::sync::Arc;
use std::time::Duration;

use sandgate_store::{Fence, SandboxStore, StoreResult, StoredSandbox, SweepIndex};

use super::{Fixture, default_spec};
use crate::common::Backend;

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

    async fn sandbox_at_address(&self, address: &str) -> StoreResult<Option<StoredSandbox>> {
        let found = self.inner.sandbox_at_address(address).await?;
        self.counted(Ok(found.into_iter().collect()))
            .map(|found| found.into_iter().next())
    }

    fn address_changes(&self) -> tokio::sync::watch::Receiver<Option<u64>> {
        self.inner.address_changes()
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
    one_reconciler_acts_at_a_time,
);
