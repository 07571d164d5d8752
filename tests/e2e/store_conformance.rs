//! One conformance suite for every store backend: the same calls, the same answers.

use std::collections::BTreeMap;

use std::time::Duration;

use sandgate_store::models::SpendLogRetention;
use sandgate_store::{
    IndexKey, KeySpend, Launch, PutWarmConfig, Restarts, SandboxSpec, SandboxState, SpendLogEntry,
    Store, StoredChallenge, StoredConversation, StoredKey, StoredModel, StoredProfile,
    StoredSandbox, StoredWarmConfig, SweepIndex, Timeline,
};
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::common::Backend;

pub async fn open(backend: &Backend) -> Store {
    let backend = match backend {
        Backend::Embedded(dir) => sandgate_store::Backend::Embedded {
            data_dir: dir.path().to_path_buf(),
        },
        Backend::Redis(redis) => sandgate_store::Backend::Redis {
            url: redis.url(),
            tls: redis.tls(),
            min_replicas_ack: 0,
        },
    };
    Store::open(&backend).await.expect("store opens")
}

fn record(
    id: Uuid,
    version: u64,
    parent: Option<Uuid>,
    tags: &[(&str, &str)],
) -> StoredConversation {
    StoredConversation {
        id,
        version,
        owner: "static:abc".into(),
        execution_status: "running".into(),
        updated_at: Some(1),
        received_at: 2,
        deleted: false,
        parent_id: parent,
        tags: tags
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect::<BTreeMap<_, _>>(),
        model: Some("gpt".into()),
        lifecycle: Vec::new(),
        record: RawValue::from_string(format!(r#"{{"id":"{id}","v":{version}}}"#)).expect("raw"),
    }
}

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

async fn session_keys_and_profiles_round_trip(backend: Backend) {
    let store = open(&backend).await;
    assert_eq!(
        store
            .session_keys
            .sandbox_for_key("ab12")
            .await
            .expect("get"),
        None
    );
    store
        .session_keys
        .put_session_key("ab12", "sandbox-1")
        .await
        .expect("put");
    assert_eq!(
        store
            .session_keys
            .sandbox_for_key("ab12")
            .await
            .expect("get")
            .as_deref(),
        Some("sandbox-1")
    );

    let profile = StoredProfile {
        name: "p".into(),
        preserve_existing_api_key: true,
        model: "m".into(),
        base_url: "https://b".into(),
        extra_headers: BTreeMap::from([("x-a".to_owned(), "1".to_owned())]),
    };
    store
        .profiles
        .put_profile("static:abc", &profile)
        .await
        .expect("put");
    assert_eq!(
        store
            .profiles
            .get_profile("static:abc", "p")
            .await
            .expect("get"),
        Some(profile)
    );
    assert_eq!(
        store
            .profiles
            .get_profile("static:other", "p")
            .await
            .expect("get"),
        None
    );
    store.health.ping().await.expect("ping");
}

async fn a_challenge_is_taken_once(backend: Backend) {
    let store = open(&backend).await;
    let record = StoredChallenge {
        salt: "abc".into(),
        iterations: 1000,
        expires_at_ms: 42,
    };
    let challenges = &store.challenges;
    challenges
        .put_challenge("c1", &record, Duration::from_secs(300))
        .await
        .expect("put");
    assert_eq!(challenges.take_challenge("c2").await.expect("take"), None);
    assert_eq!(
        challenges.take_challenge("c1").await.expect("take"),
        Some(record.clone())
    );
    assert_eq!(challenges.take_challenge("c1").await.expect("take"), None);

    // The store forgets a challenge after its time to live. Waiting it out is the
    // behaviour under test, not a synchronisation.
    challenges
        .put_challenge("short", &record, Duration::from_millis(1))
        .await
        .expect("put");
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        challenges.take_challenge("short").await.expect("take"),
        None
    );
}

async fn concurrent_takes_of_one_challenge_have_one_winner(backend: Backend) {
    let store = open(&backend).await;
    let record = StoredChallenge {
        salt: "abc".into(),
        iterations: 1000,
        expires_at_ms: 42,
    };
    store
        .challenges
        .put_challenge("race", &record, Duration::from_secs(300))
        .await
        .expect("put");
    let takes = (0..20).map(|_| {
        let challenges = store.challenges.clone();
        tokio::spawn(async move { challenges.take_challenge("race").await.expect("take") })
    });
    let winners = futures::future::join_all(takes)
        .await
        .into_iter()
        .filter(|taken| taken.as_ref().expect("task").is_some())
        .count();
    assert_eq!(winners, 1);
}

fn warm(image: &str) -> StoredWarmConfig {
    StoredWarmConfig {
        image: image.into(),
        working_dir: "/workspace".into(),
        command: vec!["server".into()],
        environment: [("A".to_owned(), "1".to_owned())].into(),
        count: Some(2),
        ..StoredWarmConfig::default()
    }
}

async fn warm_configs_keep_images_distinct(backend: Backend) {
    let store = open(&backend).await;
    let configs = &store.warm_configs;
    let save = |name: &'static str, image: &'static str| async move {
        configs
            .put_warm_config(name, &warm(image))
            .await
            .expect("put")
    };
    let empty = configs.warm_configs().await.expect("list");
    assert!(empty.configs.is_empty());
    let v0 = configs.warm_config_version().await.expect("version");

    assert_eq!(save("b", "img:b").await, PutWarmConfig::Saved);
    assert_eq!(save("a", "img:a").await, PutWarmConfig::Saved);
    let v1 = configs.warm_config_version().await.expect("version");
    assert_ne!(v0, v1, "a save changes the version");
    let listed = configs.warm_configs().await.expect("list");
    assert_eq!(listed.version, v1);
    assert_eq!(
        listed.configs,
        [
            ("a".to_owned(), warm("img:a")),
            ("b".to_owned(), warm("img:b"))
        ]
    );

    // Another name with a taken image is refused, naming the holder; nothing changes.
    assert_eq!(
        save("c", "img:a").await,
        PutWarmConfig::ImageTaken { by: "a".into() }
    );
    assert_eq!(configs.warm_config_version().await.expect("version"), v1);
    // The same name may keep or change its image; the old image is then free.
    assert_eq!(save("a", "img:a").await, PutWarmConfig::Saved);
    assert_eq!(save("a", "img:a2").await, PutWarmConfig::Saved);
    assert_eq!(save("c", "img:a").await, PutWarmConfig::Saved);

    // Deleting frees the name and the image.
    assert!(configs.delete_warm_config("c").await.expect("delete"));
    assert!(!configs.delete_warm_config("c").await.expect("delete"));
    assert_eq!(save("d", "img:a").await, PutWarmConfig::Saved);
    let names: Vec<String> = configs
        .warm_configs()
        .await
        .expect("list")
        .configs
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(names, ["a", "b", "d"]);
}

async fn concurrent_saves_of_one_image_have_one_winner(backend: Backend) {
    let store = open(&backend).await;
    let saves = (0..20).map(|n| {
        let configs = store.warm_configs.clone();
        tokio::spawn(async move {
            configs
                .put_warm_config(&format!("n{n}"), &warm("img:contended"))
                .await
                .expect("put")
        })
    });
    let saved = futures::future::join_all(saves)
        .await
        .into_iter()
        .filter(|outcome| *outcome.as_ref().expect("task") == PutWarmConfig::Saved)
        .count();
    assert_eq!(saved, 1);
    assert_eq!(
        store
            .warm_configs
            .warm_configs()
            .await
            .expect("list")
            .configs
            .len(),
        1
    );
}

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

    // Spend counts per window and per session, in one read with the key.
    let spend = |window, amount, session: Option<&str>| KeySpend {
        token: "t1".into(),
        window,
        amount,
        session: session.map(str::to_owned),
    };
    let (read, counters) = keys
        .key_for_call("t1", Some("s1"))
        .await
        .expect("read")
        .expect("the key");
    assert_eq!(read, changed);
    assert_eq!((counters.in_window(0), counters.session), (0.0, 0.0));
    keys.add_key_spend(&[spend(0, 0.25, Some("s1")), spend(0, 0.5, None)])
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
    keys.add_key_spend(&[spend(1, 0.125, Some("s1"))])
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
    keys.add_key_spend(&[spend(1, 1.0, None)])
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

async fn rate_limit_counts_restart_with_each_window(backend: Backend) {
    let store = open(&backend).await;
    let window = Duration::from_millis(400);
    for expected in 1..=3 {
        let hit = store
            .rate_limits
            .hit("login:10.0.0.1", window)
            .await
            .expect("hit");
        assert_eq!(hit.count, expected);
        assert!(
            hit.resets_in <= window && hit.resets_in > Duration::ZERO,
            "{hit:?}"
        );
    }
    let other = store
        .rate_limits
        .hit("login:10.0.0.2", window)
        .await
        .expect("hit");
    assert_eq!(other.count, 1, "each key counts apart");
    // The window is the thing under test: it has to pass.
    tokio::time::sleep(window + Duration::from_millis(100)).await;
    let hit = store
        .rate_limits
        .hit("login:10.0.0.1", window)
        .await
        .expect("hit");
    assert_eq!(hit.count, 1, "a new window");
}

fn sandbox(id: &str, session: Option<&str>, state: SandboxState) -> StoredSandbox {
    StoredSandbox {
        runtime_id: id.into(),
        version: 1,
        session_id: session.map(Into::into),
        pool: Some("v1_current".into()),
        claim_key: "claim".into(),
        spec: SandboxSpec::default(),
        state,
        status_detail: None,
        key_sha256: "00".into(),
        key_nonce: "nonce".into(),
        created_at_ms: 100,
        changed_at_ms: 100,
        // Kept and read back as written, like every other field.
        restarts: Restarts {
            count: 2,
            reasons: vec!["OOMKilled (exit code 137)".into()],
        },
        slot_failures: 3,
        personalised: true,
        active_at_ms: 50,
        timeline: session.map(|_| Timeline {
            launch: Launch::Cold,
            cold_reason: Some("pool_empty".into()),
            started_at_ms: 60,
            running_at_ms: Some(70),
            alive_at_ms: Some(80),
            first_webhook_at_ms: Some(90),
            first_llm_call_at_ms: None,
        }),
    }
}

/// `record` changed by `change`, as the next version.
fn next(record: &StoredSandbox, change: impl FnOnce(&mut StoredSandbox)) -> StoredSandbox {
    let mut next = record.clone();
    change(&mut next);
    next.version += 1;
    next
}

async fn put(store: &Store, previous: Option<&StoredSandbox>, next: &StoredSandbox) {
    assert!(
        store
            .sandboxes
            .put_sandbox(previous, next, None)
            .await
            .expect("put"),
        "{} written",
        next.runtime_id
    );
}

/// The ids a sweep index lists up to `until_ms`, at most `limit`.
async fn swept(store: &Store, index: SweepIndex, until_ms: i64, limit: usize) -> Vec<String> {
    store
        .sandboxes
        .swept_sandboxes(index, until_ms, limit)
        .await
        .expect("swept")
        .into_iter()
        .map(|record| record.runtime_id)
        .collect()
}

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

crate::on_both_backends!(
    a_holder_past_its_lease_writes_nothing,
    sweep_indexes_follow_each_record,
    rate_limit_counts_restart_with_each_window,
    added_models_are_kept_per_scope_in_order,
    the_spend_log_lists_newest_first,
    the_spend_log_drops_what_is_past_its_age,
    virtual_keys_and_their_spend_round_trip,
    a_challenge_is_taken_once,
    concurrent_takes_of_one_challenge_have_one_winner,
    warm_configs_keep_images_distinct,
    concurrent_saves_of_one_image_have_one_winner,
    compare_and_swap_writes_only_over_the_expected_version,
    concurrent_swaps_on_one_version_have_one_winner,
    indexes_list_members_in_id_order_and_page,
    scans_read_heads_and_tenant_indexes_hold_their_own,
    session_keys_and_profiles_round_trip,
);

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
