//! Conversations in every store: compare-and-swap, its indexes and their pages, the heads
//! scans read, and a Redis catalog of an older version upgraded on connect.

use sandgate_store::{IndexKey, StoredConversation};
use uuid::Uuid;

use crate::common::Backend;

use super::*;

async fn compare_and_swap_writes_only_over_the_expected_version(backend: Backend) {
    let store = open(&backend).await;
    let id = Uuid::new_v4();
    assert!(store.conversations.get(id).await.expect("get").is_none());
    assert!(
        store
            .conversations
            .compare_and_swap(0, &record(id, 1, None, &[]))
            .await
            .expect("cas")
    );
    assert!(
        !store
            .conversations
            .compare_and_swap(0, &record(id, 1, None, &[]))
            .await
            .expect("cas"),
        "already there"
    );
    assert!(
        !store
            .conversations
            .compare_and_swap(5, &record(id, 6, None, &[]))
            .await
            .expect("cas"),
        "wrong version"
    );
    assert!(
        store
            .conversations
            .compare_and_swap(1, &record(id, 2, None, &[]))
            .await
            .expect("cas")
    );
    let stored = store
        .conversations
        .get(id)
        .await
        .expect("get")
        .expect("stored");
    assert_eq!(stored.version, 2);
    assert_eq!(stored.record.get(), record(id, 2, None, &[]).record.get());
    assert_eq!(stored.model.as_deref(), Some("gpt"));
}

async fn concurrent_swaps_on_one_version_have_one_winner(backend: Backend) {
    let store = open(&backend).await;
    let id = Uuid::new_v4();
    assert!(
        store
            .conversations
            .compare_and_swap(0, &record(id, 1, None, &[]))
            .await
            .expect("cas")
    );
    let racers = (0..20).map(|_| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .conversations
                .compare_and_swap(1, &record(id, 2, None, &[]))
                .await
                .expect("cas")
        })
    });
    let wins = futures::future::join_all(racers)
        .await
        .into_iter()
        .filter(|won| *won.as_ref().expect("task"))
        .count();
    assert_eq!(wins, 1);
}

async fn indexes_list_members_in_id_order_and_page(backend: Backend) {
    let store = open(&backend).await;
    let parent = Uuid::new_v4();
    let mut children: Vec<Uuid> = (0..5).map(|_| Uuid::new_v4()).collect();
    for child in &children {
        assert!(
            store
                .conversations
                .compare_and_swap(0, &record(*child, 1, Some(parent), &[("team", "a")]))
                .await
                .expect("cas")
        );
    }
    children.sort();
    let by_parent = IndexKey::Parent(parent);
    let first = store
        .conversations
        .scan(&by_parent, None, 3)
        .await
        .expect("scan");
    let second = store
        .conversations
        .scan(&by_parent, Some(first[2].id), 3)
        .await
        .expect("scan");
    let listed: Vec<Uuid> = first
        .iter()
        .chain(&second)
        .map(|stored| stored.id)
        .collect();
    assert_eq!(listed, children);
    let tagged = store
        .conversations
        .scan(&IndexKey::Tag("team".into(), "a".into()), None, 10)
        .await
        .expect("scan");
    assert_eq!(tagged.len(), 5);
    let owned = store
        .conversations
        .scan(&IndexKey::Owner("static:abc".into()), None, 10)
        .await
        .expect("scan");
    assert_eq!(owned.len(), 5);
    assert!(
        store
            .conversations
            .scan(&IndexKey::Tag("team".into(), "b".into()), None, 10)
            .await
            .expect("scan")
            .is_empty()
    );

    // The child moves to no parent; its writer drops the entry it left.
    assert!(
        store
            .conversations
            .compare_and_swap(1, &record(children[0], 2, None, &[("team", "a")]))
            .await
            .expect("cas")
    );
    store
        .conversations
        .drop_stale_entries(children[0], std::slice::from_ref(&by_parent))
        .await
        .expect("drop stale entries");
    let remaining = store
        .conversations
        .scan(&by_parent, None, 10)
        .await
        .expect("scan");
    assert_eq!(remaining.len(), 4);
    assert!(remaining.iter().all(|stored| stored.id != children[0]));
}

/// Scans read heads (what the index entries are re-checked against, and the record's
/// size), never the records; the records of a page are read by id. Per-tenant indexes
/// hold only their tenant's records.
async fn scans_read_heads_and_tenant_indexes_hold_their_own(backend: Backend) {
    let store = open(&backend).await;
    let parent = Uuid::new_v4();
    let mine = record(Uuid::new_v4(), 1, Some(parent), &[("team", "a")]);
    let theirs = StoredConversation {
        owner: "static:other".into(),
        ..record(Uuid::new_v4(), 1, Some(parent), &[("team", "a")])
    };
    for stored in [&mine, &theirs] {
        assert!(
            store
                .conversations
                .compare_and_swap(0, stored)
                .await
                .expect("cas")
        );
    }
    let heads = store
        .conversations
        .scan(
            &IndexKey::OwnerParent("static:abc".into(), parent),
            None,
            10,
        )
        .await
        .expect("scan");
    assert_eq!(heads, [mine.head()]);
    assert_eq!(heads[0].size, mine.record.get().len());
    let heads = store
        .conversations
        .scan(
            &IndexKey::OwnerTag("static:other".into(), "team".into(), "a".into()),
            None,
            10,
        )
        .await
        .expect("scan");
    assert_eq!(heads, [theirs.head()]);
    assert_eq!(
        store
            .conversations
            .scan(&IndexKey::Parent(parent), None, 10)
            .await
            .expect("scan")
            .len(),
        2,
        "the runtime API's index holds both"
    );
    let read = store
        .conversations
        .get_many(&[theirs.id, Uuid::new_v4(), mine.id])
        .await
        .expect("get many");
    let read: Vec<Uuid> = read.iter().map(|stored| stored.id).collect();
    assert_eq!(
        read,
        [theirs.id, mine.id],
        "in the order asked, absent ones left out"
    );
}

/// A catalog an older version wrote (records without heads, no per-tenant index entries)
/// is upgraded when a store connects: tenant queries find its records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_catalogs_of_older_versions_are_upgraded_on_connect() {
    let backend = Backend::redis().await;
    let Backend::Redis(redis) = &backend else {
        unreachable!("a Redis backend")
    };
    drop(open(&backend).await);
    let mut connection = redis.connection().await;
    let old = record(Uuid::new_v4(), 3, Some(Uuid::new_v4()), &[("team", "a")]);
    ::redis::pipe()
        .hset(format!("sandgate:conv:{{{}}}", old.id), "v", old.version)
        .hset(
            format!("sandgate:conv:{{{}}}", old.id),
            "d",
            serde_json::to_vec(&old).expect("json"),
        )
        .zadd("sandgate:idx:all", old.id.to_string(), 0)
        .del("sandgate:catalog-layout")
        .query_async::<()>(&mut connection)
        .await
        .expect("raw write");
    let store = open(&backend).await;
    let tagged = IndexKey::OwnerTag("static:abc".into(), "team".into(), "a".into());
    let heads = store
        .conversations
        .scan(&tagged, None, 10)
        .await
        .expect("scan");
    assert_eq!(heads, [old.head()]);
    let head: Option<Vec<u8>> = ::redis::cmd("HGET")
        .arg(format!("sandgate:conv:{{{}}}", old.id))
        .arg("h")
        .query_async(&mut connection)
        .await
        .expect("HGET");
    assert!(head.is_some(), "the record has its head now");
}

crate::on_both_backends!(
    compare_and_swap_writes_only_over_the_expected_version,
    concurrent_swaps_on_one_version_have_one_winner,
    indexes_list_members_in_id_order_and_page,
    scans_read_heads_and_tenant_indexes_hold_their_own,
);
