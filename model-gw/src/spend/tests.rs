//! The spend queue's sums: counters, ledger rows and settlements of a batch.

use super::*;

fn call(session: &str) -> SpendLogEntry {
    SpendLogEntry {
        request_id: "req".into(),
        started_at_ms: 1_764_000_000_000,
        model: "chat".into(),
        status: 200,
        session_id: Some(session.into()),
        prompt_tokens: Some(10),
        completion_tokens: Some(5),
        spend: Some(0.5),
        ..Default::default()
    }
}

/// A batch writes the entries, the spend counters and the settlements, and leaves the
/// ledger's counts until their delay is over; those of the calls meanwhile sum with
/// them, a counter each; one delay runs at a time; a stop (or a failed write) makes
/// them due at once.
#[test]
fn the_ledger_waits_for_its_delay_and_sums_the_calls_meanwhile() {
    let mut queue = SpendQueue::default();
    queue.count(&call("conv-a"));
    assert!(queue.schedule_ledger(), "the first count starts the delay");
    queue.entries.push(call("conv-a"));
    assert!(queue.has_work());
    // The batch takes the entries and the spend counters; the ledger stays.
    queue.entries.clear();
    queue.counts = DayCounts::default();
    assert!(!queue.has_work(), "nothing but the ledger, not due");
    // Calls meanwhile: summed into the same rows, and no second delay.
    queue.count(&call("conv-a"));
    queue.count(&call("conv-a"));
    assert!(!queue.schedule_ledger());
    let rows = queue.ledger.len();
    // The delay is over: due, a write asked for, and written once.
    assert!(queue.ledger_delay_over());
    assert!(queue.has_work());
    let counts = queue.ledger.take();
    let calls: f64 = counts
        .iter()
        .filter(|count| {
            count.measure == sandgate_store::Measure::Calls
                && count.scope == sandgate_store::LedgerScope::Conversation
        })
        .map(|count| count.amount)
        .sum();
    assert_eq!(calls, 3.0);
    assert_eq!(
        rows, 4,
        "conversation, its model, the model, everything: {counts:?}"
    );
    // Nothing waiting (the spend counters written too), nothing to schedule.
    queue.ledger_due = false;
    queue.counts = DayCounts::default();
    assert!(!queue.schedule_ledger() && !queue.has_work());
}

/// A batch's settlement: each scope's spend summed once, each share's costs taken off
/// its hold as one, a settlement put back after a failed write kept as it was.
#[test]
fn a_batch_sums_each_scope_and_each_share_once() {
    use sandgate_store::admission::{Consume, Release, ScopeLimits};
    let team = BudgetScope::Team("t".into());
    let shares = Shares::default();
    let limits = ScopeLimits {
        scope: team.clone(),
        window: 0,
        max_budget: Some(100.0),
        max_parallel_requests: None,
        rpm_limit: None,
        tpm_limit: None,
    };
    let slot = shares.slots(&[limits]).remove(0);
    let (first, _) = shares.install(&slot, "share".into(), team.clone(), 10.0, 1.0);
    let second = slot.take(1.0).expect("room for a second call");
    let settle = |call: crate::shares::SharedCall, cost: f64| {
        let (cost_taken, release) = call.end(cost);
        Settle {
            spend: vec![ScopeSpend {
                scope: team.clone(),
                window: 0,
                amount: cost,
                tokens: 0,
            }],
            consume: cost_taken.into_iter().collect(),
            release: release.into_iter().collect(),
            ..Settle::default()
        }
    };
    let put_back = Consume {
        hold: "earlier".into(),
        scopes: vec![team.clone()],
        amount: 0.125,
    };
    let released = Release {
        hold: "own".into(),
        scopes: vec![team.clone()],
    };
    let settlement = summed(vec![
        settle(first, 0.5),
        settle(second, 0.25),
        Settle {
            consumed: vec![put_back.clone()],
            ..Settle::releasing(vec![released.clone()])
        },
    ]);
    assert_eq!(settlement.spend.len(), 1);
    assert_eq!(settlement.spend[0].scope, team);
    assert_eq!(settlement.spend[0].amount, 0.75);
    let mut consumed = settlement.consumed.clone();
    consumed.sort_by(|a, b| a.hold.cmp(&b.hold));
    assert_eq!(
        consumed,
        [
            put_back,
            Consume {
                hold: "share".into(),
                scopes: vec![team],
                amount: 0.75,
            },
        ]
    );
    assert_eq!(settlement.releases, [released]);
}

#[test]
fn a_kept_text_is_cut_at_its_bound_and_at_a_character_boundary() {
    assert_eq!(bounded(""), "");
    assert_eq!(bounded("alice"), "alice");
    // At the bound it is kept whole; one character past it is cut to the bound.
    let at = "u".repeat(MAX_KEPT_TEXT);
    assert_eq!(bounded(&at), at);
    assert_eq!(bounded(&format!("{at}v")), at);
    assert_eq!(bounded(&"u".repeat(1 << 20)), at);
    // Characters, not bytes: 256 of a four-byte character are kept, never half of one.
    let wide = "🦀".repeat(MAX_KEPT_TEXT + 1);
    let kept = bounded(&wide);
    assert_eq!(kept.chars().count(), MAX_KEPT_TEXT);
    assert_eq!(kept.len(), 4 * MAX_KEPT_TEXT);
    assert!(wide.starts_with(&kept));
    let mixed = format!("{}é{}", "a".repeat(MAX_KEPT_TEXT - 1), "b".repeat(10));
    assert_eq!(
        bounded(&mixed),
        format!("{}é", "a".repeat(MAX_KEPT_TEXT - 1))
    );
}

/// A write asked for on a serving thread whose runtime then ends (a server's threads end
/// with it at a stop) is made all the same: the writers run on the runtime the spend log
/// was built on, so none is dropped half way with what it took from the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_write_asked_on_a_thread_that_ends_is_made() {
    let (_dir, store) = crate::support::embedded_store().await;
    let log = Arc::new(SpendLog::new(store.clone(), SpendLogRetention::default()));
    let serving = log.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let entry = SpendLogEntry {
            started_at_ms: crate::support::now_ms(),
            ..call("conv-a")
        };
        runtime.block_on(async { serving.log_soon((entry, None)) });
        // Dropped here, as a serving thread's runtime is, with the tasks spawned on it.
    })
    .join()
    .expect("serving thread");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let written = store.spend_log.spend_logs(10).await.expect("spend logs");
        if !written.is_empty() {
            assert_eq!(written[0].spend, Some(0.5));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the entry was never written"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
