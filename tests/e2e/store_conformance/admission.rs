//! Admission of the gateway's calls in every store: holds against budgets and parallel
//! limits, the minute's requests and tokens, settlement, and (on Redis, where replicas
//! share holds) a hold whose lease has passed.

use sandgate_store::admission::{
    Admission, BudgetScope, Consume, Refusal, Release, ScopeLimits, ScopeSpend, Settlement,
};
use sandgate_store::{KeyStore, StoredKey};

use crate::common::Backend;

use super::*;

/// A minute's start, far from its end: the counts of one minute in every call below.
const NOW: i64 = 1_800_000_000_000;

fn scope(scope: BudgetScope) -> ScopeLimits {
    ScopeLimits {
        scope,
        window: 0,
        max_budget: None,
        max_parallel_requests: None,
        rpm_limit: None,
        tpm_limit: None,
    }
}

fn admission(hold: &str, amount: f64, scopes: &[ScopeLimits]) -> Admission {
    Admission {
        hold: hold.into(),
        scopes: scopes.to_vec(),
        amount,
        most: amount,
        lease_ms: 60_000,
        now_ms: NOW,
    }
}

fn settlement(spend: Vec<ScopeSpend>, releases: Vec<Release>) -> Settlement {
    Settlement {
        spend,
        releases,
        now_ms: NOW,
        ..Settlement::default()
    }
}

async fn put_key(keys: &dyn KeyStore, token: &str) {
    let key = StoredKey {
        token: token.into(),
        key_name: "sk-...".into(),
        created_at_ms: 1,
        updated_at_ms: 1,
        ..StoredKey::default()
    };
    assert!(keys.put_key(&key, true).await.expect("put"));
}

async fn calls_are_held_against_budgets_and_settled(backend: Backend) {
    let store = open(&backend).await;
    let keys = store.keys.as_ref();
    put_key(keys, "k1").await;
    let team = ScopeLimits {
        max_budget: Some(1.0),
        ..scope(BudgetScope::Team("t:1".into()))
    };
    let key = ScopeLimits {
        max_budget: Some(10.0),
        window: 3,
        ..scope(BudgetScope::Key("k1".into()))
    };
    let both = [key.clone(), team.clone()];
    // Admitted while spend and holds are below the budget: the first hold (0.6) leaves
    // room, the second (0.6 again) crosses it, the third finds none.
    assert_eq!(
        keys.admit(&admission("a", 0.6, &both))
            .await
            .expect("admit"),
        None
    );
    assert_eq!(
        keys.admit(&admission("b", 0.6, &both))
            .await
            .expect("admit"),
        None
    );
    match keys
        .admit(&admission("c", 0.6, &both))
        .await
        .expect("admit")
    {
        Some(Refusal::Budget {
            scope,
            spent,
            reserved,
            max_budget,
        }) => {
            assert_eq!(scope, BudgetScope::Team("t:1".into()));
            assert_eq!((spent, max_budget), (0.0, 1.0));
            assert!((reserved - 1.2).abs() < 1e-9, "{reserved}");
        }
        other => panic!("not refused by the team's budget: {other:?}"),
    }
    // A refused call holds nothing: releasing `a` leaves `b`'s 0.6, room for one more.
    let release = |hold: &str| Release {
        hold: hold.into(),
        scopes: vec![key.scope.clone(), team.scope.clone()],
    };
    keys.settle(&settlement(Vec::new(), vec![release("a")]))
        .await
        .expect("settle");
    assert_eq!(
        keys.admit(&admission("d", 0.6, &both))
            .await
            .expect("admit"),
        None
    );
    // Spend settled is counted before holds go: 0.5 spent by `b` and `d` each, their holds
    // released, the team has spent its budget.
    let spend = |scope: &ScopeLimits, amount| ScopeSpend {
        scope: scope.scope.clone(),
        window: scope.window,
        amount,
        tokens: 0,
    };
    keys.settle(&settlement(
        vec![spend(&key, 1.0), spend(&team, 1.0)],
        vec![release("b"), release("d")],
    ))
    .await
    .expect("settle");
    match keys
        .admit(&admission("e", 0.1, &both))
        .await
        .expect("admit")
    {
        Some(Refusal::Budget {
            spent, reserved, ..
        }) => assert_eq!((spent, reserved), (1.0, 0.0)),
        other => panic!("not refused once spent: {other:?}"),
    }
    // The key's spend is its `/key/info` counter; another window starts from nothing.
    let (_, counters) = keys
        .key_for_call("k1", None)
        .await
        .expect("read")
        .expect("the key");
    assert_eq!(counters.in_window(3), 1.0);
    let next_window = ScopeLimits {
        window: 4,
        max_budget: Some(0.5),
        ..key.clone()
    };
    assert_eq!(
        keys.admit(&admission("f", 0.1, &[next_window]))
            .await
            .expect("admit"),
        None
    );
    // Spend of a deleted key (and its sessions) is dropped; a team's outlives the key.
    keys.delete_keys(&["k1".into()]).await.expect("delete");
    let session = ScopeLimits {
        max_budget: Some(0.5),
        ..scope(BudgetScope::Session {
            token: "k1".into(),
            session: "s".into(),
        })
    };
    let other_team = ScopeLimits {
        max_budget: Some(0.5),
        ..scope(BudgetScope::Team("t:2".into()))
    };
    keys.settle(&settlement(
        vec![spend(&session, 9.0), spend(&other_team, 0.5)],
        Vec::new(),
    ))
    .await
    .expect("settle");
    assert_eq!(
        keys.admit(&admission("g", 0.1, &[session]))
            .await
            .expect("admit"),
        None
    );
    assert!(matches!(
        keys.admit(&admission("h", 0.1, std::slice::from_ref(&other_team))).await.expect("admit"),
        Some(Refusal::Budget { spent, .. }) if spent == 0.5
    ));

    // What `/team/info` and `/user/info` show is what the admission judges: each scope's
    // counter, in its window; one never written, or of another window, spent nothing.
    let read = |scopes: Vec<(BudgetScope, u64)>| async move {
        keys.budget_spend(&scopes).await.expect("read the counters")
    };
    let user = BudgetScope::User("u:1".into());
    assert_eq!(
        read(vec![
            (BudgetScope::Team("t:1".into()), 0),
            (other_team.scope.clone(), 0),
            (user.clone(), 0),
            (BudgetScope::Key("k2".into()), 3),
        ])
        .await,
        [1.0, 0.5, 0.0, 0.0]
    );
    // A scope's spend set (LiteLLM's `/user/update` with `spend`) is what later calls add
    // to, and what the admission judges.
    keys.set_budget_spend(&user, 0, 2.5).await.expect("set");
    let user_limits = ScopeLimits {
        max_budget: Some(3.0),
        ..scope(user.clone())
    };
    keys.settle(&settlement(vec![spend(&user_limits, 0.25)], Vec::new()))
        .await
        .expect("settle");
    assert_eq!(read(vec![(user.clone(), 0), (user, 1)]).await, [2.75, 0.0]);
    assert_eq!(
        keys.admit(&admission("i", 0.3, std::slice::from_ref(&user_limits)))
            .await
            .expect("admit"),
        None
    );
    assert!(matches!(
        keys.admit(&admission("j", 0.1, &[user_limits])).await.expect("admit"),
        Some(Refusal::Budget { spent, reserved, .. }) if spent == 2.75 && reserved == 0.3
    ));
}

async fn parallel_requests_and_tokens_are_limited(backend: Backend) {
    let store = open(&backend).await;
    let keys = store.keys.as_ref();
    let user = ScopeLimits {
        max_parallel_requests: Some(2),
        rpm_limit: Some(3),
        tpm_limit: Some(100),
        ..scope(BudgetScope::User("u".into()))
    };
    let limits = [user.clone()];
    assert_eq!(
        keys.admit(&admission("a", 0.0, &limits))
            .await
            .expect("admit"),
        None
    );
    assert_eq!(
        keys.admit(&admission("b", 0.0, &limits))
            .await
            .expect("admit"),
        None
    );
    assert_eq!(
        keys.admit(&admission("c", 0.0, &limits))
            .await
            .expect("admit"),
        Some(Refusal::Rate {
            scope: user.scope.clone(),
            in_flight: 2,
            requests: 2,
            tokens: 0,
        })
    );
    let done = |hold: &str, tokens| {
        settlement(
            vec![ScopeSpend {
                scope: user.scope.clone(),
                window: 0,
                amount: 0.0,
                tokens,
            }],
            vec![Release {
                hold: hold.into(),
                scopes: vec![user.scope.clone()],
            }],
        )
    };
    keys.settle(&done("a", 40)).await.expect("settle");
    assert_eq!(
        keys.admit(&admission("d", 0.0, &limits))
            .await
            .expect("admit"),
        None
    );
    // The minute's third call: no fourth, even with a call settled.
    keys.settle(&done("b", 70)).await.expect("settle");
    assert_eq!(
        keys.admit(&admission("e", 0.0, &limits))
            .await
            .expect("admit"),
        Some(Refusal::Rate {
            scope: user.scope.clone(),
            in_flight: 1,
            requests: 3,
            tokens: 110,
        })
    );
    // The next minute starts from nothing but the calls in flight.
    let mut later = admission("f", 0.0, &limits);
    later.now_ms = NOW + 60_000;
    assert_eq!(keys.admit(&later).await.expect("admit"), None);
}

/// Calls settle on their own, many at once: every settlement counts, in what a call's
/// read of its key serves and in what the admission judges (the embedded store keeps
/// both in memory, which must follow the writes in the order they were applied).
async fn settlements_made_at_once_all_count(backend: Backend) {
    let store = open(&backend).await;
    put_key(store.keys.as_ref(), "k1").await;
    // Spent exactly once every settlement counts: then refused.
    let key = ScopeLimits {
        max_budget: Some(50.0),
        ..scope(BudgetScope::Key("k1".into()))
    };
    let settles: Vec<_> = (0..200)
        .map(|_| {
            let (keys, scope) = (store.keys.clone(), key.scope.clone());
            tokio::spawn(async move {
                let spend = ScopeSpend {
                    scope,
                    window: 0,
                    amount: 0.25,
                    tokens: 0,
                };
                keys.settle(&settlement(vec![spend], Vec::new())).await
            })
        })
        .collect();
    for settle in settles {
        settle.await.expect("joined").expect("settle");
    }
    let (_, counters) = store
        .keys
        .key_for_call("k1", None)
        .await
        .expect("read")
        .expect("the key");
    assert_eq!(counters.in_window(0), 50.0);
    assert!(matches!(
        store.keys.admit(&admission("a", 1.0, &[key])).await.expect("admit"),
        Some(Refusal::Budget { spent, .. }) if spent == 50.0
    ));
}

/// A replica's share of each scope's budget: granted up to a quarter of the room the scope
/// has left (never less than the call's hold, never more than asked), counted as held by
/// every admission until its calls' costs are taken off it as they are spent; given back,
/// it leaves the spend alone. Nothing is ever counted twice or not at all.
async fn shares_are_granted_within_the_room_and_consumed(backend: Backend) {
    let store = open(&backend).await;
    let keys = store.keys.as_ref();
    put_key(keys, "k1").await;
    let key = ScopeLimits {
        max_budget: Some(100.0),
        ..scope(BudgetScope::Key("k1".into()))
    };
    let team = ScopeLimits {
        max_budget: Some(40.0),
        ..scope(BudgetScope::Team("shared".into()))
    };
    let both = [key.clone(), team.clone()];
    let share = |hold: &str, amount: f64, most: f64| Admission {
        most,
        ..admission(hold, amount, &both)
    };
    let granted = |answer: Result<Vec<f64>, Refusal>, expected: &[f64]| match answer {
        Ok(held) => {
            assert_eq!(held.len(), expected.len(), "{held:?}");
            for (held, expected) in held.iter().zip(expected) {
                assert!(
                    (held - expected).abs() < 1e-9,
                    "{held} held, not {expected}"
                );
            }
        }
        Err(refusal) => panic!("refused: {refusal:?}"),
    };
    // A quarter of each scope's room (100 and 40), within the 32 asked.
    let first = keys.admit_up_to(&share("s1", 1.0, 32.0)).await;
    granted(first.expect("admit"), &[25.0, 10.0]);
    // Less asked than a quarter: what was asked.
    let second = keys.admit_up_to(&share("s2", 1.0, 2.0)).await;
    granted(second.expect("admit"), &[2.0, 2.0]);
    // Calls against `s1` spend 6 of it: the spend is counted and taken off the share.
    let spend = |scope: &ScopeLimits, amount| ScopeSpend {
        scope: scope.scope.clone(),
        window: 0,
        amount,
        tokens: 0,
    };
    let scopes = vec![key.scope.clone(), team.scope.clone()];
    keys.settle(&Settlement {
        spend: vec![spend(&key, 6.0), spend(&team, 6.0)],
        consumed: vec![Consume {
            hold: "s1".into(),
            scopes: scopes.clone(),
            amount: 6.0,
        }],
        now_ms: NOW,
        ..Settlement::default()
    })
    .await
    .expect("settle");
    // Rooms now 100 - 6 spent - (19 + 2) held = 73 and 40 - 6 - (4 + 2) = 28.
    let third = keys.admit_up_to(&share("s3", 1.0, 32.0)).await;
    granted(third.expect("admit"), &[18.25, 7.0]);
    // A cost past what is left of a share takes it to nothing, never below; its release
    // then frees nothing more, and the spend stays.
    keys.settle(&Settlement {
        spend: vec![spend(&key, 3.0), spend(&team, 3.0)],
        consumed: vec![Consume {
            hold: "s2".into(),
            scopes: scopes.clone(),
            amount: 3.0,
        }],
        releases: vec![
            Release {
                hold: "s2".into(),
                scopes: scopes.clone(),
            },
            Release {
                hold: "s3".into(),
                scopes: scopes.clone(),
            },
        ],
        now_ms: NOW,
    })
    .await
    .expect("settle");
    // The team: 9 spent, `s1`'s 4 held, 27 left. Where the room is below the call's hold,
    // the hold itself (the last call's overshoot), then nothing.
    let mut tight = share("s4", 30.0, 64.0);
    tight.scopes = vec![team.clone()];
    granted(keys.admit_up_to(&tight).await.expect("admit"), &[30.0]);
    match keys
        .admit_up_to(&share("s5", 0.1, 0.1))
        .await
        .expect("admit")
    {
        Err(Refusal::Budget {
            scope,
            spent,
            reserved,
            ..
        }) => {
            assert_eq!(scope, team.scope);
            assert!((spent - 9.0).abs() < 1e-9, "{spent}");
            assert!((reserved - 34.0).abs() < 1e-9, "{reserved}");
        }
        other => panic!("not refused by the team: {other:?}"),
    }
}

crate::on_both_backends!(
    calls_are_held_against_budgets_and_settled,
    parallel_requests_and_tokens_are_limited,
    settlements_made_at_once_all_count,
    shares_are_granted_within_the_room_and_consumed,
);

/// Replicas share holds on Redis: one whose lease has passed (its replica died before
/// settling it) is dropped by the next admission on its scope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_past_its_lease_is_dropped() {
    let backend = Backend::redis().await;
    let store = open(&backend).await;
    let keys = store.keys.as_ref();
    let team = ScopeLimits {
        max_budget: Some(1.0),
        max_parallel_requests: Some(1),
        ..scope(BudgetScope::Team("t".into()))
    };
    let mut first = admission("dead", 5.0, std::slice::from_ref(&team));
    first.lease_ms = 10_000;
    assert_eq!(keys.admit(&first).await.expect("admit"), None);
    let mut within = admission("next", 0.1, std::slice::from_ref(&team));
    within.now_ms = NOW + 9_999;
    assert!(matches!(
        keys.admit(&within).await.expect("admit"),
        Some(Refusal::Budget { reserved, .. }) if reserved == 5.0
    ));
    within.now_ms = NOW + 10_000;
    assert_eq!(keys.admit(&within).await.expect("admit"), None);
    // The dead replica's late release takes nothing from the live hold.
    keys.settle(&settlement(
        Vec::new(),
        vec![Release {
            hold: "dead".into(),
            scopes: vec![team.scope.clone()],
        }],
    ))
    .await
    .expect("settle");
    within.hold = "third".into();
    assert_eq!(
        keys.admit(&within).await.expect("admit"),
        Some(Refusal::Rate {
            scope: team.scope.clone(),
            in_flight: 1,
            requests: 0,
            tokens: 0,
        })
    );
}

/// On Redis a scope's holds and leases expire (a replica that dies with holds leaves
/// nothing for ever), within twice the longest lease, by Redis's clock whatever the
/// replicas' (this test's `now` is weeks ahead): set when the scope takes its first hold,
/// and again when it took none since its holds were all released (its emptied leases are
/// gone), not at every call. Many holds of a scope released in one settlement leave it
/// empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_scopes_expire_on_redis() {
    let backend = Backend::redis().await;
    let store = open(&backend).await;
    let Backend::Redis(redis) = &backend else {
        unreachable!("a Redis backend")
    };
    let keys = store.keys.as_ref();
    let team = ScopeLimits {
        max_parallel_requests: Some(3),
        ..scope(BudgetScope::Team("expiring".into()))
    };
    let mut connection = redis.connection().await;
    let mut ttls = async || -> [i64; 2] {
        let ttl = |kind: &str| {
            ::redis::cmd("PTTL")
                .arg(format!("sandgate:{{gateway-keys}}:{kind}:team:expiring"))
                .clone()
        };
        let holds: i64 = ttl("holds")
            .query_async(&mut connection)
            .await
            .expect("PTTL");
        let leases: i64 = ttl("leases")
            .query_async(&mut connection)
            .await
            .expect("PTTL");
        [holds, leases]
    };
    let mut holds = Vec::new();
    for round in 0..2 {
        for n in 0..3 {
            let hold = format!("h{round}{n}");
            assert_eq!(
                keys.admit(&admission(&hold, 0.1, std::slice::from_ref(&team)))
                    .await
                    .expect("admit"),
                None,
                "{hold}"
            );
            holds.push(Release {
                hold,
                scopes: vec![team.scope.clone()],
            });
        }
        for ttl in ttls().await {
            assert!(ttl > 60_000 && ttl <= 120_000, "round {round}: {ttl} ms");
        }
        // All three released at once: the scope holds nothing, its leases are gone.
        keys.settle(&settlement(Vec::new(), std::mem::take(&mut holds)))
            .await
            .expect("settle");
        assert_eq!(ttls().await[1], -2, "round {round}: the emptied leases");
    }
}
