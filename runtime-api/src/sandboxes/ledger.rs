//! A conversation's sandbox time in the ledger: each time a claimed sandbox leaves the
//! running or the paused state, the time it spent there is added to its conversation's
//! `running_ms` or `paused_ms`, on the day it left. Its conversation is the one its
//! session is linked to (its first delivery's), else its session. The state it is in now is counted when
//! it leaves it; [`so_far`] is that state's time until now, for a reader that wants it.

use sandgate_store::{
    LedgerCount, LedgerScope, Measure, SandboxState, Store, StoredSandbox, day_of,
};

use super::SandboxPrices;

/// The measure time in `state` counts towards, if any.
fn measure_of(state: SandboxState) -> Option<Measure> {
    match state {
        SandboxState::Running => Some(Measure::RunningMs),
        SandboxState::Paused => Some(Measure::PausedMs),
        _ => None,
    }
}

/// The count of the time `before` spent in its state, once `after` left it; none for a
/// warm sandbox (a pool's time is no conversation's), nor when the state is unchanged.
fn time_in_state(before: &StoredSandbox, after: &StoredSandbox) -> Option<LedgerCount> {
    if before.state == after.state {
        return None;
    }
    let conversation = before.session_id.clone()?;
    let measure = measure_of(before.state)?;
    let spent = after.changed_at_ms.saturating_sub(before.changed_at_ms);
    (spent > 0).then(|| LedgerCount {
        day: day_of(after.changed_at_ms),
        scope: LedgerScope::Conversation,
        id: conversation,
        measure,
        amount: spent as f64,
    })
}

/// What `ms` in `state` cost `sandbox`, at `prices`.
pub fn cost(sandbox: &StoredSandbox, measure: Measure, ms: f64, prices: SandboxPrices) -> f64 {
    let hour = match measure {
        Measure::RunningMs => prices.running_hour,
        Measure::PausedMs => prices.paused_hour,
        _ => 0.0,
    };
    let factor = sandbox
        .spec
        .resource_factor
        .filter(|factor| factor.is_finite() && *factor > 0.0)
        .unwrap_or(1.0);
    ms / 3_600_000.0 * hour * factor
}

/// Adds the time `before` spent in the state `after` left to its conversation's ledger,
/// and its cost at `prices`.
pub(super) async fn count_time(
    store: &Store,
    before: &StoredSandbox,
    after: &StoredSandbox,
    prices: SandboxPrices,
) {
    if let Some(mut count) = time_in_state(before, after) {
        count.id = crate::ledger::conversation_of_session(store, count.id).await;
        let cost = LedgerCount {
            measure: Measure::SandboxCost,
            amount: cost(before, count.measure, count.amount, prices),
            ..count.clone()
        };
        crate::ledger::add_counts(store, &[count, cost]).await;
    }
}

/// `record`'s time so far in its current state, when it counts towards the ledger: its
/// measure and milliseconds.
pub fn so_far(record: &StoredSandbox, now_ms: i64) -> Option<(Measure, f64)> {
    record.session_id.as_ref()?;
    let measure = measure_of(record.state)?;
    Some((
        measure,
        now_ms.saturating_sub(record.changed_at_ms).max(0) as f64,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(state: SandboxState, changed_at_ms: i64, session: Option<&str>) -> StoredSandbox {
        StoredSandbox {
            runtime_id: "r1".into(),
            version: 1,
            session_id: session.map(str::to_owned),
            pool: None,
            claim_key: String::new(),
            spec: sandgate_store::SandboxSpec::default(),
            state,
            status_detail: None,
            key_sha256: String::new(),
            key_nonce: String::new(),
            created_at_ms: 0,
            changed_at_ms,
            restarts: sandgate_store::Restarts::default(),
            slot_failures: 0,
            personalised: false,
            active_at_ms: 0,
            timeline: None,
            source_address: None,
        }
    }

    #[test]
    fn the_time_of_the_state_left_is_counted_for_its_conversation() {
        let running = sandbox(SandboxState::Running, 1_000, Some("c1"));
        let paused = sandbox(SandboxState::Paused, 61_000, Some("c1"));
        let count = time_in_state(&running, &paused).expect("counted");
        assert_eq!(
            (count.measure, count.amount),
            (Measure::RunningMs, 60_000.0)
        );
        assert_eq!(
            (count.scope, count.id.as_str()),
            (LedgerScope::Conversation, "c1")
        );
        let resumed = sandbox(SandboxState::Running, 91_000, Some("c1"));
        let count = time_in_state(&paused, &resumed).expect("counted");
        assert_eq!((count.measure, count.amount), (Measure::PausedMs, 30_000.0));
        // A warm one's, a start's and an unchanged state's time is nobody's.
        let warm = sandbox(SandboxState::Running, 1_000, None);
        assert_eq!(
            time_in_state(&warm, &sandbox(SandboxState::Stopped, 5_000, None)),
            None
        );
        let starting = sandbox(SandboxState::Starting, 1_000, Some("c1"));
        assert_eq!(time_in_state(&starting, &running), None);
        assert_eq!(time_in_state(&running, &running), None);
        assert_eq!(so_far(&running, 4_000), Some((Measure::RunningMs, 3_000.0)));
        assert_eq!(so_far(&warm, 4_000), None);
    }
}
