//! The model gateway's records in every store: added models per scope, the spend log and
//! its age limit, and virtual keys with their spend.

use std::time::Duration;

use sandgate_store::admission::{BudgetScope, ScopeSpend, Settlement};
use sandgate_store::models::SpendLogRetention;
use sandgate_store::{KeyOwner, SpendLogEntry, StoredKey, StoredModel};

use crate::common::Backend;

use super::*;

fn added(name: &str, at: i64) -> StoredModel {
    StoredModel {
        model_name: name.into(),
        model: format!("gateway_proxy/{name}"),
        api_base: "http://gateway".into(),
        api_key: "sk-upstream".into(),
        added_at_ms: at,
        model_info: None,
    }
}

async fn added_models_are_kept_per_scope_in_order(backend: Backend) {
    let store = open(&backend).await;
    assert!(
        store
            .models
            .added_models("a")
            .await
            .expect("list")
            .is_empty()
    );
    store
        .models
        .add_model("a", &added("second", 2))
        .await
        .expect("add");
    store
        .models
        .add_model("a", &added("first", 1))
        .await
        .expect("add");
    store
        .models
        .add_model("b", &added("other", 3))
        .await
        .expect("add");
    let mut replaced = added("second", 2);
    replaced.api_base = "http://elsewhere".into();
    store
        .models
        .add_model("a", &replaced)
        .await
        .expect("replace");
    let listed = store.models.added_models("a").await.expect("list");
    assert_eq!(listed, vec![added("first", 1), replaced]);
    assert_eq!(
        store.models.added_models("b").await.expect("list"),
        vec![added("other", 3)]
    );
}

async fn the_spend_log_lists_newest_first(backend: Backend) {
    let store = open(&backend).await;
    assert!(
        store
            .spend_log
            .spend_logs(10)
            .await
            .expect("list")
            .is_empty()
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_millis() as i64;
    let entry = |index: u64| SpendLogEntry {
        request_id: format!("r{index}"),
        started_at_ms: now,
        model: "m".into(),
        prompt_tokens: Some(index),
        metadata: Some(serde_json::json!({"team": index})),
        status: 200,
        ..SpendLogEntry::default()
    };
    // One entry, then a batch: both keep their order.
    store
        .spend_log
        .append_spend_logs(&[entry(0)], SpendLogRetention::default())
        .await
        .expect("append");
    store
        .spend_log
        .append_spend_logs(
            &(1..5).map(entry).collect::<Vec<_>>(),
            SpendLogRetention::default(),
        )
        .await
        .expect("append");
    let listed = store.spend_log.spend_logs(3).await.expect("list");
    let ids: Vec<_> = listed
        .iter()
        .map(|entry| entry.request_id.as_str())
        .collect();
    assert_eq!(ids, ["r4", "r3", "r2"]);
    assert_eq!(listed[0].prompt_tokens, Some(4));
    assert_eq!(listed[0].metadata, Some(serde_json::json!({"team": 4})));
    // One named by its lookup alone, among others.
    assert_eq!(
        store
            .models
            .added_model("a", "missing")
            .await
            .expect("lookup"),
        None
    );
}

async fn the_spend_log_drops_what_is_past_its_age(backend: Backend) {
    let store = open(&backend).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_millis() as i64;
    let entry = |index: i64, started_at_ms: i64| SpendLogEntry {
        request_id: format!("r{index}"),
        started_at_ms,
        status: 200,
        ..SpendLogEntry::default()
    };
    let keep_an_hour = SpendLogRetention {
        max_entries: 1000,
        max_age_ms: 3_600_000,
    };
    store
        .spend_log
        .append_spend_logs(&[entry(0, now - 7_200_000)], SpendLogRetention::default())
        .await
        .expect("append");
    // Appended later (on Redis an entry's age is when it was added): the first goes once
    // it is past the age, which the next append trims.
    store
        .spend_log
        .append_spend_logs(&[entry(1, now)], keep_an_hour)
        .await
        .expect("append");
    let listed = store.spend_log.spend_logs(10).await.expect("list");
    assert!(listed.iter().any(|entry| entry.request_id == "r1"));
    let no_age = SpendLogRetention {
        max_entries: 1000,
        max_age_ms: 0,
    };
    tokio::time::sleep(Duration::from_millis(2)).await;
    store
        .spend_log
        .append_spend_logs(&[entry(2, now + 10_000)], no_age)
        .await
        .expect("append");
    let listed: Vec<String> = store
        .spend_log
        .spend_logs(10)
        .await
        .expect("list")
        .into_iter()
        .map(|entry| entry.request_id)
        .collect();
    assert!(!listed.contains(&"r0".to_owned()), "{listed:?}");
    assert!(!listed.contains(&"r1".to_owned()), "{listed:?}");
}

fn key(token: &str, alias: &str, at: i64) -> StoredKey {
    StoredKey {
        token: token.into(),
        key_name: "sk-...abcd".into(),
        key_alias: Some(alias.into()),
        models: vec!["gpt".into()],
        max_budget: Some(1.0),
        created_at_ms: at,
        updated_at_ms: at,
        ..StoredKey::default()
    }
}

async fn virtual_keys_and_their_spend_round_trip(backend: Backend) {
    let store = open(&backend).await;
    let keys = &store.keys;
    assert!(
        keys.put_key(&key("t2", "second", 2), true)
            .await
            .expect("put")
    );
    assert!(
        keys.put_key(&key("t1", "first", 1), true)
            .await
            .expect("put")
    );
    // Created once: a second create of the same token is refused; an update is not.
    assert!(
        !keys
            .put_key(&key("t1", "again", 3), true)
            .await
            .expect("put")
    );
    let mut changed = key("t1", "first", 1);
    changed.max_budget = Some(2.0);
    assert!(keys.put_key(&changed, false).await.expect("put"));
    assert_eq!(
        keys.get_key("t1").await.expect("get"),
        Some(changed.clone())
    );
    let listed: Vec<String> = keys
        .list_keys()
        .await
        .expect("list")
        .into_iter()
        .map(|key| key.token)
        .collect();
    assert_eq!(listed, ["t1", "t2"]);

    // Spend counts per window and per session, in one read with the key: settled as a
    // call settles it, to its key's window and to its session.
    let spend = |window, amount, session: Option<&str>| {
        let mut spend = vec![ScopeSpend {
            scope: BudgetScope::Key("t1".into()),
            window,
            amount,
            tokens: 0,
        }];
        spend.extend(session.map(|session| ScopeSpend {
            scope: BudgetScope::Session {
                token: "t1".into(),
                session: session.into(),
            },
            window: 0,
            amount,
            tokens: 0,
        }));
        spend
    };
    let settle = |spend: Vec<Vec<ScopeSpend>>| Settlement {
        spend: spend.concat(),
        consumed: Vec::new(),
        releases: Vec::new(),
        now_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("time")
            .as_millis() as i64,
    };
    let (read, counters) = keys
        .key_for_call("t1", Some("s1"))
        .await
        .expect("read")
        .expect("the key");
    assert_eq!(read, changed);
    assert_eq!((counters.in_window(0), counters.session), (0.0, 0.0));
    keys.settle(&settle(vec![
        spend(0, 0.25, Some("s1")),
        spend(0, 0.5, None),
    ]))
    .await
    .expect("add");
    let (_, counters) = keys
        .key_for_call("t1", Some("s1"))
        .await
        .expect("read")
        .expect("the key");
    assert_eq!((counters.in_window(0), counters.session), (0.75, 0.25));
    let (_, counters) = keys
        .key_for_call("t1", Some("s2"))
        .await
        .expect("read")
        .expect("the key");
    assert_eq!(counters.session, 0.0);
    // A new window starts from nothing.
    keys.settle(&settle(vec![spend(1, 0.125, Some("s1"))]))
        .await
        .expect("add");
    let (_, counters) = keys
        .key_for_call("t1", Some("s1"))
        .await
        .expect("read")
        .expect("the key");
    assert_eq!(
        (
            counters.in_window(0),
            counters.in_window(1),
            counters.session
        ),
        (0.0, 0.125, 0.375)
    );

    // Deleted: gone with its spend; spend for it afterwards is dropped.
    assert_eq!(
        keys.delete_keys(&["t1".into(), "missing".into()])
            .await
            .expect("delete"),
        ["t1"]
    );
    assert_eq!(keys.key_for_call("t1", None).await.expect("read"), None);
    keys.settle(&settle(vec![spend(1, 1.0, None)]))
        .await
        .expect("add");
    assert!(
        keys.put_key(&key("t1", "back", 4), true)
            .await
            .expect("put")
    );
    let (_, counters) = keys
        .key_for_call("t1", None)
        .await
        .expect("read")
        .expect("the key");
    assert_eq!(counters.in_window(1), 0.0);
}

/// The tokens of `owner`'s keys, as the store's index finds them.
async fn owned(store: &sandgate_store::Store, owner: KeyOwner) -> Vec<String> {
    store
        .keys
        .keys_of(&owner)
        .await
        .expect("keys of")
        .into_iter()
        .map(|key| key.token)
        .collect()
}

async fn keys_are_found_by_their_user_team_and_alias(backend: Backend) {
    let store = open(&backend).await;
    let owned_by = |token: &str, alias: &str, at, user: &str, team: &str| StoredKey {
        user_id: Some(user.into()),
        team_id: Some(team.into()),
        ..key(token, alias, at)
    };
    for key in [
        owned_by("k3", "c", 3, "ann", "red"),
        owned_by("k1", "a", 1, "ann", "red"),
        owned_by("k2", "b", 2, "bob", "red"),
        // Ids that contain the index's separators find their own keys only.
        owned_by("k4", "d", 4, "ann:red", "red:x"),
        owned_by("k5", "e", 5, "ann\0red", "r\0"),
    ] {
        assert!(store.keys.put_key(&key, true).await.expect("put"));
    }
    assert_eq!(
        owned(&store, KeyOwner::Team("red".into())).await,
        ["k1", "k2", "k3"]
    );
    assert_eq!(
        owned(&store, KeyOwner::User("ann".into())).await,
        ["k1", "k3"]
    );
    assert_eq!(
        owned(&store, KeyOwner::User("ann:red".into())).await,
        ["k4"]
    );
    assert_eq!(owned(&store, KeyOwner::Alias("b".into())).await, ["k2"]);
    assert!(
        owned(&store, KeyOwner::Team("blue".into()))
            .await
            .is_empty()
    );

    // A key that changes team, user and alias leaves the old ones' lists.
    let moved = StoredKey {
        team_id: Some("blue".into()),
        user_id: None,
        key_alias: Some("z".into()),
        ..owned_by("k1", "a", 1, "ann", "red")
    };
    assert!(store.keys.put_key(&moved, false).await.expect("update"));
    assert_eq!(
        owned(&store, KeyOwner::Team("red".into())).await,
        ["k2", "k3"]
    );
    assert_eq!(owned(&store, KeyOwner::Team("blue".into())).await, ["k1"]);
    assert_eq!(owned(&store, KeyOwner::User("ann".into())).await, ["k3"]);
    assert!(owned(&store, KeyOwner::Alias("a".into())).await.is_empty());
    assert_eq!(owned(&store, KeyOwner::Alias("z".into())).await, ["k1"]);
    // A refused create changes nothing.
    assert!(
        !store
            .keys
            .put_key(&owned_by("k1", "a", 1, "ann", "green"), true)
            .await
            .expect("put")
    );
    assert!(
        owned(&store, KeyOwner::Team("green".into()))
            .await
            .is_empty()
    );

    // Deleted keys leave every list.
    store
        .keys
        .delete_keys(&["k3".into(), "k1".into()])
        .await
        .expect("delete");
    assert_eq!(owned(&store, KeyOwner::Team("red".into())).await, ["k2"]);
    assert!(
        owned(&store, KeyOwner::Team("blue".into()))
            .await
            .is_empty()
    );
    assert!(owned(&store, KeyOwner::User("ann".into())).await.is_empty());
}

crate::on_both_backends!(
    keys_are_found_by_their_user_team_and_alias,
    added_models_are_kept_per_scope_in_order,
    the_spend_log_lists_newest_first,
    the_spend_log_drops_what_is_past_its_age,
    virtual_keys_and_their_spend_round_trip,
);
