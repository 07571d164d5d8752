//! A warm pool's status, computed one way for the pools' listing and for the reconciler's
//! gauges so that the two agree, and the backoff that paces the replacement of a pool's
//! failed sandboxes: a transient platform error heals without an operator, and a pool whose
//! creates keep failing waits longer each time rather than retrying at full rate.

use std::collections::HashMap;
use std::time::Duration;

use super::driver::Refusal;
use sandgate_store::{SandboxState, StoredSandbox};

/// The wait before the first replacement of a failed warm sandbox; each further failure in
/// a row of the same slot doubles it, up to [`HEAL_BACKOFF_MAX`].
pub const HEAL_BACKOFF_BASE: Duration = Duration::from_secs(10);

/// The longest wait before a failed warm sandbox is replaced: a pool that cannot start
/// sandboxes (a registry down for an hour) still tries every few minutes.
pub const HEAL_BACKOFF_MAX: Duration = Duration::from_secs(600);

/// How long after it failed a warm sandbox is replaced: the base doubled by each failure
/// of its slot before it, at most the maximum, less up to half of it by a jitter drawn from
/// its runtime id (random hex), so that slots that failed together do not all retry
/// together, and every pass and replica computes the same time.
pub fn heal_delay_ms(record: &StoredSandbox) -> i64 {
    let base = i64::try_from(HEAL_BACKOFF_BASE.as_millis()).unwrap_or(i64::MAX);
    let max = i64::try_from(HEAL_BACKOFF_MAX.as_millis()).unwrap_or(i64::MAX);
    let full = base
        .saturating_mul(2_i64.saturating_pow(record.slot_failures.min(30)))
        .min(max);
    let seed = record
        .runtime_id
        .get(..4)
        .and_then(|prefix| u16::from_str_radix(prefix, 16).ok())
        .unwrap_or(0);
    full - full / 2 * i64::from(seed) / i64::from(u16::MAX)
}

/// When (clock milliseconds) the failed warm sandbox `record` is replaced.
pub fn heal_at_ms(record: &StoredSandbox) -> i64 {
    record.changed_at_ms.saturating_add(heal_delay_ms(record))
}

/// Counts of one pool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolCounts {
    pub ready: i64,
    pub starting: i64,
    pub failed: i64,
    /// Why sandboxes are failed or stuck starting, deduplicated; and, while failed ones
    /// wait for their replacement, when it comes.
    pub failures: Vec<String>,
    /// What the pool is doing, in a word: [`READY`], [`FILLING`], [`BACKING_OFF`] or
    /// [`REFUSED`] (empty from [`pool_counts`], which does not know the target).
    pub state: &'static str,
}

/// The pool holds its target of running sandboxes.
pub const READY: &str = "ready";
/// Sandboxes are starting, or are about to be.
pub const FILLING: &str = "filling";
/// Creates keep failing: failed sandboxes hold their slots until their backoff is over.
pub const BACKING_OFF: &str = "backing_off";
/// The platform refuses the configuration: nothing is started until it changes.
pub const REFUSED: &str = "refused";

/// The warm sandboxes of each pool, counted.
pub fn pool_counts(records: &[StoredSandbox]) -> HashMap<String, PoolCounts> {
    let mut pools: HashMap<String, PoolCounts> = HashMap::new();
    for record in records.iter().filter(|record| record.session_id.is_none()) {
        let Some(pool) = &record.pool else { continue };
        let counts = pools.entry(pool.clone()).or_default();
        match record.state {
            SandboxState::Running => counts.ready += 1,
            SandboxState::Starting => counts.starting += 1,
            SandboxState::Error => counts.failed += 1,
            SandboxState::Paused | SandboxState::Stopped => {}
        }
        // A pending sandbox's reason (unschedulable, insufficient resources) is shown too.
        if let Some(detail) = &record.status_detail
            && !counts.failures.contains(detail)
        {
            counts.failures.push(detail.clone());
        }
    }
    pools
}

/// The status of the pool `name`, whose current members are `members` and which should
/// hold `target` sandboxes; `refused`: why the platform refuses its configuration, whose
/// missing sandboxes all count as failed. `now_ms`: the clock, for the backoff's wait.
pub fn pool_status(
    name: &str,
    members: &[StoredSandbox],
    target: i64,
    refused: Option<&Refusal>,
    now_ms: i64,
) -> PoolCounts {
    let mut counts = pool_counts(members).remove(name).unwrap_or_default();
    if let Some(refusal) = refused {
        let present = i64::try_from(members.len()).unwrap_or(i64::MAX);
        counts.failed += target.saturating_sub(present).max(0);
        counts
            .failures
            .push(format!("{}: {}", refusal.field, refusal.message));
    }
    let failed: Vec<&StoredSandbox> = members
        .iter()
        .filter(|record| record.state == SandboxState::Error)
        .collect();
    counts.state = if refused.is_some() {
        REFUSED
    } else if counts.ready >= target {
        READY
    } else {
        FILLING
    };
    if let Some(next) = failed.iter().map(|record| heal_at_ms(record)).min()
        && next > now_ms
    {
        counts.state = BACKING_OFF;
        let in_a_row = failed
            .iter()
            .map(|record| record.slot_failures.saturating_add(1))
            .max()
            .unwrap_or(1);
        let seconds = (next - now_ms + 999) / 1000;
        counts.failures.push(format!(
            "failed sandboxes are replaced in {seconds} s (backoff after {in_a_row} failure(s) in a row)"
        ));
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandgate_store::{Restarts, SandboxSpec};

    fn failed(runtime_id: &str, slot_failures: u32) -> StoredSandbox {
        StoredSandbox {
            runtime_id: runtime_id.into(),
            version: 1,
            session_id: None,
            pool: Some("p".into()),
            claim_key: String::new(),
            spec: SandboxSpec::default(),
            state: SandboxState::Error,
            status_detail: Some("cannot create the sandbox: Forbidden".into()),
            key_sha256: String::new(),
            key_nonce: String::new(),
            created_at_ms: 0,
            changed_at_ms: 1_000,
            restarts: Restarts::default(),
            slot_failures,
            personalised: false,
            active_at_ms: 0,
            timeline: None,
            source_address: None,
        }
    }

    #[test]
    fn the_backoff_doubles_is_bounded_and_jittered_by_at_most_half() {
        let base = HEAL_BACKOFF_BASE.as_millis() as i64;
        let max = HEAL_BACKOFF_MAX.as_millis() as i64;
        assert_eq!(heal_delay_ms(&failed("0000aa", 0)), base);
        assert_eq!(heal_delay_ms(&failed("0000aa", 2)), 4 * base);
        assert_eq!(heal_delay_ms(&failed("0000aa", 40)), max);
        assert_eq!(heal_delay_ms(&failed("ffffaa", 0)), base / 2);
        let jittered = heal_delay_ms(&failed("8000aa", 1));
        assert!(jittered > base && jittered < 2 * base, "{jittered}");
        assert_eq!(heal_at_ms(&failed("0000aa", 0)), 1_000 + base);
    }

    #[test]
    fn a_waiting_pool_says_when_its_failed_sandboxes_are_replaced() {
        let members = [failed("0000aa", 1)];
        let counts = pool_status("p", &members, 2, None, 1_000);
        assert_eq!((counts.failed, counts.state), (1, BACKING_OFF));
        assert_eq!(
            counts.failures,
            [
                "cannot create the sandbox: Forbidden",
                "failed sandboxes are replaced in 20 s (backoff after 2 failure(s) in a row)"
            ]
        );
        let due = pool_status("p", &members, 2, None, 100_000);
        assert_eq!((due.failures.len(), due.state), (1, FILLING), "{due:?}");
    }
}
