//! What only a Redis deployment has: a cluster's records spread over every master, and
//! writes that survive a flushed script cache.

use sandgate_store::{IndexKey, SandboxState, StoredSandbox, SweepIndex};
use uuid::Uuid;

use crate::common::Backend;

use super::*;

/// On a cluster, conversations' indexes and sandboxes are spread over every master (in
/// buckets), and read back whole and in order across them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_spreads_indexes_and_sandboxes_over_every_master() {
    let backend = Backend::redis_cluster().await;
    let store = open(&backend).await;
    let Backend::Redis(redis) = &backend else {
        unreachable!("a Redis backend")
    };
    let mut ids: Vec<Uuid> = (0..64).map(|_| Uuid::new_v4()).collect();
    for id in &ids {
        let written = store
            .conversations
            .compare_and_swap(0, &record(*id, 1, None, &[("team", "a")]))
            .await;
        assert!(written.expect("cas"));
    }
    for number in 0..64 {
        let warm = StoredSandbox {
            created_at_ms: 1_000 + number,
            ..sandbox(&format!("warm-{number}"), None, SandboxState::Running)
        };
        put(&store, None, &warm).await;
    }
    for mut connection in redis.node_connections().await {
        for pattern in [
            // (Where an index's buckets land depends on its name: the index of all
            // conversations, the hottest, has some on every master of this cluster.)
            "sandgate:idx:{*:all}",
            "sandgate:{sandboxes:*}:records",
            "sandgate:{sandboxes:*}:warm:claim",
            "sandgate:{sandboxes:*}:sweep:pooled",
        ] {
            let keys: Vec<String> = ::redis::cmd("KEYS")
                .arg(pattern)
                .query_async(&mut connection)
                .await
                .expect("keys");
            assert!(!keys.is_empty(), "a master without {pattern}");
        }
    }

    ids.sort();
    for index in [IndexKey::All, IndexKey::Tag("team".into(), "a".into())] {
        let mut listed = Vec::new();
        let mut after = None;
        loop {
            let page = store
                .conversations
                .scan(&index, after, 10)
                .await
                .expect("scan");
            let Some(last) = page.last() else { break };
            assert!(page.len() <= 10);
            after = Some(last.id);
            listed.extend(page.iter().map(|record| record.id));
        }
        assert_eq!(listed, ids, "{index:?}");
    }

    assert_eq!(store.sandboxes.sandboxes().await.expect("all").len(), 64);
    assert_eq!(
        swept(&store, SweepIndex::Pooled, i64::MAX, 4).await,
        ["warm-0", "warm-1", "warm-2", "warm-3"],
        "the oldest of every bucket first"
    );
    let candidates = store
        .sandboxes
        .warm_sandboxes("claim", 8)
        .await
        .expect("warm");
    let mut distinct: Vec<&str> = candidates.iter().map(|r| r.runtime_id.as_str()).collect();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 8, "{distinct:?}");

    let claimed = &candidates[0];
    let running = next(claimed, |record| {
        record.session_id = Some("session-x".into())
    });
    put(&store, Some(claimed), &running).await;
    let found = store
        .sandboxes
        .sandbox_for_session("session-x")
        .await
        .expect("by session");
    assert_eq!(
        found.map(|record| record.runtime_id),
        Some(running.runtime_id)
    );
}

/// A Redis that forgot its scripts (restarted, failed over, `SCRIPT FLUSH`) still takes
/// every scripted write: the store loads the script again instead of failing until it
/// restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_writes_survive_a_flushed_script_cache() {
    let backend = Backend::redis().await;
    let store = open(&backend).await;
    let Backend::Redis(redis) = &backend else {
        unreachable!("a Redis backend")
    };
    let id = Uuid::new_v4();
    let flush = || async {
        let mut connection = redis.connection().await;
        ::redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async::<()>(&mut connection)
            .await
            .expect("SCRIPT FLUSH");
    };
    flush().await;
    assert!(
        store
            .conversations
            .compare_and_swap(0, &record(id, 1, None, &[("team", "a")]))
            .await
            .expect("the swap after a flush")
    );
    flush().await;
    assert!(
        store
            .conversations
            .compare_and_swap(1, &record(id, 2, None, &[]))
            .await
            .expect("the swap after another flush")
    );
    assert_eq!(
        store
            .conversations
            .get(id)
            .await
            .expect("get")
            .map(|record| record.version),
        Some(2)
    );
}

/// Keys written before the index of keys by owner existed are indexed when a replica of
/// this version connects, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_written_before_the_owner_index_are_found_by_owner() {
    let backend = Backend::redis().await;
    let Backend::Redis(redis) = &backend else {
        unreachable!("a Redis backend")
    };
    // As an earlier version left them: the records, no index, no mark.
    let record = serde_json::json!({
        "token": "t-old", "key_name": "sk-...old", "team_id": "red",
        "created_at_ms": 1, "updated_at_ms": 1,
    });
    let mut connection = redis.connection().await;
    ::redis::cmd("HSET")
        .arg("sandgate:{gateway-keys}:records")
        .arg("t-old")
        .arg(record.to_string())
        .query_async::<()>(&mut connection)
        .await
        .expect("HSET");
    let store = open(&backend).await;
    let red = store
        .keys
        .keys_of(&sandgate_store::KeyOwner::Team("red".into()))
        .await
        .expect("keys of");
    assert_eq!(
        red.iter().map(|key| key.token.as_str()).collect::<Vec<_>>(),
        ["t-old"]
    );
    // Indexed once: a key written behind the index's back later is not listed, which
    // shows the index (not a read of every key) answers.
    ::redis::cmd("HSET")
        .arg("sandgate:{gateway-keys}:records")
        .arg("t-late")
        .arg(record.to_string().replace("t-old", "t-late"))
        .query_async::<()>(&mut connection)
        .await
        .expect("HSET");
    let reopened = open(&backend).await;
    let red = reopened
        .keys
        .keys_of(&sandgate_store::KeyOwner::Team("red".into()))
        .await
        .expect("keys of");
    assert_eq!(red.len(), 1);
}

/// On one Redis, each thread that calls the store opens a connection of its own on its
/// runtime at its first command (a call served on one thread is then not driven by
/// another's): two threads, each with a runtime, read through one store, and the server
/// counts two more clients while they live.
#[test]
fn each_thread_calls_one_redis_on_a_connection_of_its_own() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (backend, store) = runtime.block_on(async {
        let backend = Backend::redis().await;
        let store = open(&backend).await;
        (backend, store)
    });
    let Backend::Redis(redis) = &backend else {
        unreachable!("a Redis backend")
    };
    // One connection counts, both times: one opened and closed for each count could
    // still be listed, closing, at the next.
    let mut counter = runtime.block_on(redis.connection());
    let mut clients = || {
        runtime.block_on(async {
            let listed: String = ::redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut counter)
                .await
                .expect("client list");
            listed.lines().count()
        })
    };
    let before = clients();
    let read = std::sync::Arc::new(std::sync::Barrier::new(3));
    let counted = std::sync::Arc::new(std::sync::Barrier::new(3));
    // Nothing asserted while a thread waits (a failure would leave the others waiting).
    let (during, reads) = std::thread::scope(|scope| {
        let readers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("runtime");
                    let found = runtime.block_on(store.conversations.get(Uuid::new_v4()));
                    // Its runtime runs (opening, then driving, its connection) until the
                    // clients are counted.
                    let (read, counted) = (read.clone(), counted.clone());
                    runtime.block_on(async {
                        tokio::task::spawn_blocking(move || {
                            read.wait();
                            counted.wait();
                        })
                        .await
                        .expect("waited");
                    });
                    found.map(|found| found.is_none())
                })
            })
            .collect();
        // This runtime drives the connection opened at start, which a thread's first
        // command takes while its own opens.
        let waiting = read.clone();
        runtime.block_on(async {
            tokio::task::spawn_blocking(move || waiting.wait())
                .await
                .expect("waited");
        });
        // A thread's connection opens beside its first command: counted until both are.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut during = clients();
        while during < before + 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
            during = clients();
        }
        counted.wait();
        let reads: Vec<_> = readers
            .into_iter()
            .map(|reader| reader.join().expect("a reader"))
            .collect();
        (during, reads)
    });
    for read in reads {
        assert!(read.expect("a read"), "an unknown conversation found");
    }
    assert_eq!(during, before + 2);
}
