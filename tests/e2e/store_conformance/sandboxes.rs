//! Sandboxes in every store: the sweep indexes following each record (and repaired from
//! the records older writers left), and the reconciler's lease, whose holder past it
//! writes nothing.

use std::time::Duration;

use sandgate_store::{SandboxState, StoredSandbox, SweepIndex};
use tokio::sync::watch;

use crate::common::Backend;

use super::*;

async fn sweep_indexes_follow_each_record(backend: Backend) {
    let store = open(&backend).await;
    let warm = sandbox("warm", None, SandboxState::Starting);
    let busy = sandbox("busy", Some("session-1"), SandboxState::Running);
    put(&store, None, &warm).await;
    put(&store, None, &busy).await;
    // Read back as written, its start's timeline with it.
    assert_eq!(
        store
            .sandboxes
            .sandbox("busy")
            .await
            .expect("read")
            .as_ref(),
        Some(&busy)
    );
    assert_eq!(
        swept(&store, SweepIndex::Pooled, i64::MAX, 10).await,
        ["warm"]
    );
    assert!(
        swept(&store, SweepIndex::Paused, i64::MAX, 10)
            .await
            .is_empty()
    );
    assert!(
        swept(&store, SweepIndex::Stopped, i64::MAX, 10)
            .await
            .is_empty()
    );

    // A claimed, running sandbox waits in the running index by its last activity, or
    // by when it started running when it has shown none since.
    assert_eq!(swept(&store, SweepIndex::Running, 100, 10).await, ["busy"]);
    let active = next(&busy, |record| record.active_at_ms = 150);
    put(&store, Some(&busy), &active).await;
    assert!(
        swept(&store, SweepIndex::Running, 149, 10).await.is_empty(),
        "activity moves it later"
    );
    assert_eq!(swept(&store, SweepIndex::Running, 150, 10).await, ["busy"]);
    let busy = active;

    let paused = next(&busy, |record| {
        record.state = SandboxState::Paused;
        record.changed_at_ms = 200;
    });
    put(&store, Some(&busy), &paused).await;
    assert!(
        swept(&store, SweepIndex::Running, i64::MAX, 10)
            .await
            .is_empty(),
        "paused, it leaves the running index"
    );
    assert!(
        swept(&store, SweepIndex::Paused, 199, 10).await.is_empty(),
        "listed only once paused for long enough"
    );
    assert_eq!(swept(&store, SweepIndex::Paused, 200, 10).await, ["busy"]);

    let stopped = next(&paused, |record| {
        record.state = SandboxState::Stopped;
        record.changed_at_ms = 300;
    });
    put(&store, Some(&paused), &stopped).await;
    assert!(
        swept(&store, SweepIndex::Paused, i64::MAX, 10)
            .await
            .is_empty()
    );
    assert_eq!(swept(&store, SweepIndex::Stopped, 300, 10).await, ["busy"]);

    let claimed = next(&warm, |record| {
        record.session_id = Some("session-2".into());
        record.state = SandboxState::Running;
    });
    put(&store, Some(&warm), &claimed).await;
    assert!(
        swept(&store, SweepIndex::Pooled, i64::MAX, 10)
            .await
            .is_empty(),
        "a claim leaves the pool"
    );

    // Oldest first, at most the limit.
    for (id, at) in [("c", 600), ("a", 400), ("b", 500)] {
        let record = sandbox(id, Some(id), SandboxState::Stopped);
        put(
            &store,
            None,
            &StoredSandbox {
                changed_at_ms: at,
                ..record
            },
        )
        .await;
    }
    assert_eq!(
        swept(&store, SweepIndex::Stopped, i64::MAX, 3).await,
        ["busy", "a", "b"]
    );
    assert_eq!(
        swept(&store, SweepIndex::Stopped, 500, 10).await,
        ["busy", "a", "b"]
    );

    assert!(
        store
            .sandboxes
            .delete_sandbox(&stopped, None)
            .await
            .expect("delete")
    );
    assert_eq!(
        swept(&store, SweepIndex::Stopped, i64::MAX, 10).await,
        ["a", "b", "c"]
    );
    assert_eq!(
        store.sandboxes.reindex_sandboxes().await.expect("reindex"),
        0,
        "nothing to repair where every write kept the indexes"
    );
}

/// A lease's writes carry its fencing token: a holder that was paused past its lease,
/// while another took it over, writes nothing once it wakes; the token stays while a
/// holder renews and grows each time the lease passes on.
async fn a_holder_past_its_lease_writes_nothing(backend: Backend) {
    use sandgate_store::{Fence, StoreError};

    let store = open(&backend).await;
    let ttl = Duration::from_secs(60);
    let lease = "reconcile";
    let first = store
        .sandboxes
        .acquire_lease(lease, "paused-holder", ttl)
        .await
        .expect("acquire")
        .expect("free");
    assert_eq!(
        store
            .sandboxes
            .acquire_lease(lease, "paused-holder", ttl)
            .await
            .expect("renew"),
        Some(first),
        "a renewal keeps the token"
    );
    assert_eq!(
        store
            .sandboxes
            .acquire_lease(lease, "other", ttl)
            .await
            .expect("acquire"),
        None,
        "held"
    );
    let stale = Fence {
        lease: lease.to_owned(),
        token: first,
    };
    let record = sandbox("fenced", Some("fenced"), SandboxState::Running);
    assert!(
        store
            .sandboxes
            .put_sandbox(None, &record, Some(&stale))
            .await
            .expect("a write under the lease")
    );

    // The holder stops renewing (paused); the lease lapses and passes on.
    store
        .sandboxes
        .release_lease(lease, "paused-holder")
        .await
        .expect("release");
    let second = store
        .sandboxes
        .acquire_lease(lease, "new-holder", ttl)
        .await
        .expect("acquire")
        .expect("free again");
    assert!(second > first, "{second} after {first}");

    let stopped = next(&record, |record| record.state = SandboxState::Stopped);
    for refused in [
        store
            .sandboxes
            .put_sandbox(Some(&record), &stopped, Some(&stale))
            .await,
        store.sandboxes.delete_sandbox(&record, Some(&stale)).await,
    ] {
        assert!(
            matches!(refused, Err(StoreError::Fenced(ref name)) if name == lease),
            "{refused:?}"
        );
    }
    // Nor anywhere else: sandboxes the new holder has not written yet (on a cluster, in
    // every bucket, each of which learnt the new token when the lease passed).
    for number in 0..64 {
        let elsewhere = sandbox(&format!("elsewhere-{number}"), None, SandboxState::Starting);
        let refused = store
            .sandboxes
            .put_sandbox(None, &elsewhere, Some(&stale))
            .await;
        assert!(
            matches!(refused, Err(StoreError::Fenced(_))),
            "{number}: {refused:?}"
        );
    }
    let current = Fence {
        lease: lease.to_owned(),
        token: second,
    };
    assert!(
        store
            .sandboxes
            .put_sandbox(Some(&record), &stopped, Some(&current))
            .await
            .expect("the new holder writes")
    );
    // The old holder back: a new token, larger again.
    store
        .sandboxes
        .release_lease(lease, "new-holder")
        .await
        .expect("release");
    let third = store
        .sandboxes
        .acquire_lease(lease, "paused-holder", ttl)
        .await
        .expect("acquire")
        .expect("free");
    assert!(third > second);
}

/// Records written by a release without the sweep indexes (during a rolling upgrade, its
/// replicas beside this one's) are put in place by a reindex, and members left behind by
/// such writers are dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_reindex_repairs_what_older_writers_left() {
    let backend = Backend::redis().await;
    let store = open(&backend).await;
    let Backend::Redis(redis) = &backend else {
        unreachable!("a Redis backend")
    };
    let mut connection = redis.connection().await;
    // As a writer without the indexes leaves them: a warm sandbox and a paused one in no
    // index, a claimed one still in the pool's, and a deleted one still listed.
    let unindexed = [
        sandbox("warm", None, SandboxState::Running),
        StoredSandbox {
            changed_at_ms: 700,
            ..sandbox("paused", Some("session-1"), SandboxState::Paused)
        },
        sandbox("claimed", Some("session-2"), SandboxState::Running),
    ];
    for record in &unindexed {
        ::redis::pipe()
            .hset(
                "sandgate:{sandboxes}:records",
                &record.runtime_id,
                serde_json::to_vec(record).expect("json"),
            )
            .hset("sandgate:{sandboxes}:versions", &record.runtime_id, 1)
            .query_async::<()>(&mut connection)
            .await
            .expect("raw write");
    }
    ::redis::pipe()
        .zadd("sandgate:{sandboxes}:sweep:pooled", "claimed", 100)
        .zadd("sandgate:{sandboxes}:sweep:stopped", "deleted", 100)
        .query_async::<()>(&mut connection)
        .await
        .expect("raw write");

    assert_eq!(
        swept(&store, SweepIndex::Pooled, i64::MAX, 10).await,
        ["claimed"],
        "a stale member, which its reader skips"
    );
    assert_eq!(
        store.sandboxes.reindex_sandboxes().await.expect("reindex"),
        4,
        "three added (the claimed one to the running index), one dropped"
    );
    assert_eq!(
        swept(&store, SweepIndex::Running, i64::MAX, 10).await,
        ["claimed"]
    );
    assert_eq!(
        swept(&store, SweepIndex::Pooled, i64::MAX, 10).await,
        ["warm"]
    );
    assert_eq!(swept(&store, SweepIndex::Paused, 700, 10).await, ["paused"]);
    assert!(
        swept(&store, SweepIndex::Stopped, i64::MAX, 10)
            .await
            .is_empty()
    );
    let left: usize = ::redis::cmd("ZCARD")
        .arg("sandgate:{sandboxes}:sweep:stopped")
        .query_async(&mut connection)
        .await
        .expect("ZCARD");
    assert_eq!(
        left, 0,
        "a member whose record is gone is dropped by its reader"
    );
    assert_eq!(
        store.sandboxes.reindex_sandboxes().await.expect("reindex"),
        0
    );
}

/// Waits (10 s at most) for the address index's generation to pass `after`: to be
/// known at all, with `None` (Redis subscribes first).
async fn generation_past(changes: &mut watch::Receiver<Option<u64>>, after: Option<u64>) -> u64 {
    tokio::time::timeout(
        Duration::from_secs(10),
        changes.wait_for(|generation| generation.is_some() && *generation > after),
    )
    .await
    .expect("the address index's generation did not move")
    .expect("followed")
    .expect("known")
}

/// A live sandbox is found by its source address (how the model gateway knows a call
/// comes from it); a stopped one is not, and an address given to another sandbox is that
/// one's, whatever the first writes afterwards. Every write that changes what an address
/// answers moves the index's generation (what lets the gateway keep what it read); the
/// others do not.
async fn a_live_sandbox_is_found_by_its_source_address(backend: Backend) {
    let store = open(&backend).await;
    let mut changes = store.sandboxes.address_changes();
    let mut seen = generation_past(&mut changes, None).await;
    let at = |address: &str| {
        let store = store.clone();
        let address = address.to_owned();
        async move {
            store
                .sandboxes
                .sandbox_at_address(&address)
                .await
                .expect("lookup")
                .map(|record| record.runtime_id)
        }
    };
    let first = StoredSandbox {
        source_address: Some("10.1.0.7".into()),
        ..sandbox("first", Some("session-a"), SandboxState::Starting)
    };
    put(&store, None, &first).await;
    seen = generation_past(&mut changes, Some(seen)).await;
    assert_eq!(at("10.1.0.7").await.as_deref(), Some("first"));
    assert_eq!(at("10.1.0.8").await, None);
    let running = next(&first, |record| record.state = SandboxState::Running);
    put(&store, Some(&first), &running).await;
    assert_eq!(at("10.1.0.7").await.as_deref(), Some("first"));
    // Stopped: out of the index, and its address goes to the next pod.
    let stopped = next(&running, |record| record.state = SandboxState::Stopped);
    put(&store, Some(&running), &stopped).await;
    seen = generation_past(&mut changes, Some(seen)).await;
    assert_eq!(at("10.1.0.7").await, None);
    let second = StoredSandbox {
        source_address: Some("10.1.0.7".into()),
        ..sandbox("second", Some("session-b"), SandboxState::Running)
    };
    put(&store, None, &second).await;
    seen = generation_past(&mut changes, Some(seen)).await;
    let again = next(&stopped, |record| record.changed_at_ms += 1);
    put(&store, Some(&stopped), &again).await;
    assert!(
        store
            .sandboxes
            .delete_sandbox(&again, None)
            .await
            .expect("delete"),
        "deleted"
    );
    assert_eq!(at("10.1.0.7").await.as_deref(), Some("second"));
    // A session given to a pooled sandbox (a claim) changes what its address answers.
    let claimed = next(&second, |record| {
        record.session_id = Some("session-c".into())
    });
    put(&store, Some(&second), &claimed).await;
    seen = generation_past(&mut changes, Some(seen)).await;
    // A new address moves the entry.
    let moved = next(&claimed, |record| {
        record.source_address = Some("10.1.0.9".into())
    });
    put(&store, Some(&claimed), &moved).await;
    seen = generation_past(&mut changes, Some(seen)).await;
    assert_eq!(at("10.1.0.7").await, None);
    assert_eq!(at("10.1.0.9").await.as_deref(), Some("second"));
    // Writes that change no address's answer did not move it (on Redis, a notification
    // would be published before the next one).
    assert_eq!(
        *changes.borrow(),
        Some(seen),
        "moved by a write of no address"
    );
    assert!(
        store
            .sandboxes
            .delete_sandbox(&moved, None)
            .await
            .expect("delete"),
        "deleted"
    );
    generation_past(&mut changes, Some(seen)).await;
    assert_eq!(at("10.1.0.9").await, None);
}

crate::on_both_backends!(
    a_holder_past_its_lease_writes_nothing,
    a_live_sandbox_is_found_by_its_source_address,
    sweep_indexes_follow_each_record,
);
