//! The runtime API key's quotas (issue 40): `MAX_RUNTIMES`, the sandboxes it may hold at
//! once (starting or running: a paused sandbox holds no process), and
//! `SANDBOX_START_RATE`, the starts it may make per minute. Both are checked at `/start`
//! and `/resume` (a resume starts a sandbox again) and refused with 429, which the app
//! server's runtime client takes as a failed start (`SandboxError`) or a failed resume.
//!
//! Sandgate has one runtime API key (`DEFAULT_API_KEY`), so its quotas are the
//! deployment's. They are kept per replica: admission counts the sandboxes the store
//! holds plus the starts this replica has admitted and not yet recorded, so a burst of
//! concurrent starts cannot all pass one count; replicas behind one store may each admit
//! one over it at the same instant, and each has a start rate of its own.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::SandboxError;
use crate::store::{SandboxState, StoredSandbox};

/// The window `SANDBOX_START_RATE` counts starts over.
const RATE_WINDOW: Duration = Duration::from_secs(60);

pub struct Quotas {
    max_runtimes: Option<usize>,
    /// Starts per [`RATE_WINDOW`]; also the burst a quiet key may make at once.
    start_rate: Option<u32>,
    state: Mutex<QuotaState>,
}

struct QuotaState {
    /// Starts admitted whose sandbox the store may not show as starting yet.
    pending: usize,
    /// A token bucket: starts the key may make now, refilled continuously.
    tokens: f64,
    refilled: Instant,
}

/// An admitted start: counted as held until dropped (once its record is stored).
pub struct Admission<'a> {
    quotas: &'a Quotas,
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        let mut state = self.quotas.state();
        state.pending = state.pending.saturating_sub(1);
    }
}

/// How many of the key's sandboxes `records` holds: claimed ones (a warm sandbox is the
/// pool's) that are starting or running.
pub fn held(records: &[StoredSandbox]) -> usize {
    records
        .iter()
        .filter(|record| {
            record.session_id.is_some()
                && matches!(record.state, SandboxState::Starting | SandboxState::Running)
        })
        .count()
}

impl Quotas {
    pub fn new(max_runtimes: Option<usize>, start_rate: Option<u32>) -> Self {
        Self {
            max_runtimes,
            start_rate: start_rate.filter(|rate| *rate > 0),
            state: Mutex::new(QuotaState {
                pending: 0,
                tokens: f64::from(start_rate.unwrap_or(0)),
                refilled: Instant::now(),
            }),
        }
    }

    pub fn max_runtimes(&self) -> Option<usize> {
        self.max_runtimes
    }

    /// Whether a quota applies at all: without one, admission reads nothing.
    pub fn any(&self) -> bool {
        self.max_runtimes.is_some() || self.start_rate.is_some()
    }

    fn state(&self) -> MutexGuard<'_, QuotaState> {
        // Every update leaves the state whole between statements.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Admits one start given the sandboxes the key holds (see [`held`]), or says which
    /// quota refuses it. A refused start takes no token.
    pub fn admit(&self, held: usize) -> Result<Admission<'_>, SandboxError> {
        let mut state = self.state();
        if let Some(max) = self.max_runtimes
            && held + state.pending >= max
        {
            return Err(SandboxError::Quota(format!(
                "The runtime API key holds {} sandboxes, its max_runtimes ({max}): pause or stop \
                 one before starting another",
                held + state.pending
            )));
        }
        if let Some(rate) = self.start_rate {
            let now = Instant::now();
            let rate = f64::from(rate);
            let elapsed = now.duration_since(state.refilled).as_secs_f64();
            state.tokens = (state.tokens + elapsed * rate / RATE_WINDOW.as_secs_f64()).min(rate);
            state.refilled = now;
            if state.tokens < 1.0 {
                return Err(SandboxError::Quota(format!(
                    "The runtime API key started {rate} sandboxes in the last minute, its start \
                     rate (SANDBOX_START_RATE): retry in a few seconds"
                )));
            }
            state.tokens -= 1.0;
        }
        state.pending += 1;
        Ok(Admission { quotas: self })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_runtimes_counts_held_sandboxes_and_admitted_starts() {
        let quotas = Quotas::new(Some(2), None);
        let first = quotas.admit(1).expect("one held, one free");
        assert!(matches!(quotas.admit(1), Err(SandboxError::Quota(_))));
        drop(first);
        assert!(quotas.admit(1).is_ok(), "the admitted start is recorded");
        assert!(matches!(quotas.admit(2), Err(SandboxError::Quota(_))));
    }

    #[test]
    fn the_start_rate_refuses_a_burst_past_it() {
        let quotas = Quotas::new(None, Some(3));
        for _ in 0..3 {
            drop(quotas.admit(0).expect("within the rate"));
        }
        assert!(matches!(quotas.admit(0), Err(SandboxError::Quota(_))));
    }
}
