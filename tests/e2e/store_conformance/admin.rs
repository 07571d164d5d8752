//! Runtime management's records in every store: session keys and LLM profiles, login
//! challenges taken once, warm configurations, and rate limit windows.

use std::collections::BTreeMap;

use std::time::Duration;

use sandgate_store::{PutWarmConfig, StoredChallenge, StoredProfile, StoredWarmConfig};

use crate::common::Backend;

use super::*;

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
    let count = |key: &'static str| {
        let store = &store;
        async move { store.rate_limits.count(key).await.expect("count") }
    };
    assert_eq!(count("login:10.0.0.1").await, 3, "read without counting");
    assert_eq!(count("login:10.0.0.1").await, 3);
    assert_eq!(count("login:never-hit").await, 0);
    // The window is the thing under test: it has to pass.
    tokio::time::sleep(window + Duration::from_millis(100)).await;
    assert_eq!(count("login:10.0.0.1").await, 0, "its window has passed");
    let hit = store
        .rate_limits
        .hit("login:10.0.0.1", window)
        .await
        .expect("hit");
    assert_eq!(hit.count, 1, "a new window");
}

/// A start under quotas of at most 3 held and 3 starts a minute, `held` shown held.
async fn admit_start(
    store: &sandgate_store::Store,
    key: &str,
    session: &str,
    held: &[String],
) -> sandgate_store::StartAdmission {
    store
        .rate_limits
        .admit_start(&sandgate_store::StartQuota {
            key,
            session,
            held,
            max_runtimes: Some(3),
            start_rate: Some((3, Duration::from_secs(60))),
            pending_for: Duration::from_secs(30),
        })
        .await
        .expect("admit")
}

async fn start_quotas_count_held_pending_and_recent_starts(backend: Backend) {
    use sandgate_store::StartAdmission::{Admitted, MaxRuntimes, StartRate};
    let store = open(&backend).await;
    let held = ["a".to_owned()];
    assert_eq!(admit_start(&store, "default", "b", &held).await, Admitted);
    assert_eq!(admit_start(&store, "default", "c", &held).await, Admitted);
    // a held, b and c pending: three.
    assert_eq!(
        admit_start(&store, "default", "d", &held).await,
        MaxRuntimes { holding: 3 }
    );
    // b shown held too counts once.
    let both = ["a".to_owned(), "b".to_owned()];
    assert_eq!(
        admit_start(&store, "default", "d", &both).await,
        MaxRuntimes { holding: 3 }
    );
    store
        .rate_limits
        .release_start("default", "c")
        .await
        .expect("release");
    // The refused starts took no place in the rate: the third start of the minute passes,
    // and a fourth, with room held, is past the rate.
    assert_eq!(admit_start(&store, "default", "d", &held).await, Admitted);
    store
        .rate_limits
        .release_start("default", "d")
        .await
        .expect("release");
    assert_eq!(admit_start(&store, "default", "e", &held).await, StartRate);
    // Another key counts apart.
    assert_eq!(admit_start(&store, "other", "e", &[]).await, Admitted);
}

crate::on_both_backends!(
    session_keys_and_profiles_round_trip,
    a_challenge_is_taken_once,
    concurrent_takes_of_one_challenge_have_one_winner,
    warm_configs_keep_images_distinct,
    concurrent_saves_of_one_image_have_one_winner,
    rate_limit_counts_restart_with_each_window,
    start_quotas_count_held_pending_and_recent_starts,
);
