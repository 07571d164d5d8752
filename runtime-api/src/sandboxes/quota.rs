//! The runtime API key's quotas (issue 40): `MAX_RUNTIMES`, the sandboxes it may hold at
//! once (starting or running: a paused sandbox holds no process), and
//! `SANDBOX_START_RATE`, the starts it may make per minute. Both are checked at `/start`
//! and `/resume` (a resume starts a sandbox again) and refused with 429, which the app
//! server's runtime client takes as a failed start (`SandboxError`) or a failed resume.
//!
//! Sandgate has one runtime API key (`DEFAULT_API_KEY`), so its quotas are the
//! deployment's. They are kept per replica: admission counts the sessions the store shows
//! held plus those this replica admitted that the store did not yet show held when it was
//! read, so a burst of concurrent starts cannot all pass one count; replicas behind one
//! store may each admit one over it at the same instant, and each has a start rate of its
//! own.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::SandboxError;
use sandgate_store::{SandboxState, StoredSandbox};

/// The window `SANDBOX_START_RATE` counts starts over.
const RATE_WINDOW: Duration = Duration::from_secs(60);
/// How long an admitted start counts as held whatever the store shows (unless paused or
/// stopped here): longer than a start takes to be stored.
const PENDING_FOR: Duration = Duration::from_secs(30);

pub struct Quotas {
    max_runtimes: Option<usize>,
    /// Starts per [`RATE_WINDOW`]; also the burst a quiet key may make at once.
    start_rate: Option<u32>,
    state: Mutex<QuotaState>,
}

struct QuotaState {
    /// Sessions admitted lately (and when), which a read of the store may predate.
    pending: HashMap<String, Instant>,
    /// A token bucket: starts the key may make now, refilled continuously.
    tokens: f64,
    refilled: Instant,
}

/// An admitted start. Dropped before [`Admission::started`], the start failed and holds
/// nothing; after, it counts as held until a read of the store shows it so.
pub struct Admission<'a> {
    quotas: &'a Quotas,
    session: String,
    started: bool,
}

impl Admission<'_> {
    /// The sandbox was started (its record stored as starting or running).
    pub fn started(mut self) {
        self.started = true;
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        if !self.started {
            self.quotas.state().pending.remove(&self.session);
        }
    }
}

/// The sessions of the key's sandboxes that `records` shows held: claimed ones (a warm
/// sandbox is the pool's) that are starting or running.
pub fn held(records: &[StoredSandbox]) -> HashSet<String> {
    records
        .iter()
        .filter(|record| matches!(record.state, SandboxState::Starting | SandboxState::Running))
        .filter_map(|record| record.session_id.clone())
        .collect()
}

impl Quotas {
    pub fn new(max_runtimes: Option<usize>, start_rate: Option<u32>) -> Self {
        Self {
            max_runtimes,
            start_rate: start_rate.filter(|rate| *rate > 0),
            state: Mutex::new(QuotaState {
                pending: HashMap::new(),
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

    /// `session` was paused or stopped: it holds nothing, whatever it was admitted as.
    pub fn release(&self, session: Option<&str>) {
        if let Some(session) = session {
            self.state().pending.remove(session);
        }
    }

    /// Admits a start of `session` given the sessions the store showed held (see
    /// [`held`]), or says which quota refuses it. A refused start takes no token.
    pub fn admit(
        &self,
        held: &HashSet<String>,
        session: &str,
    ) -> Result<Admission<'_>, SandboxError> {
        let mut state = self.state();
        state
            .pending
            .retain(|_, since| since.elapsed() < PENDING_FOR);
        // The union: a read that shows an admitted start held counts it once, and a read
        // older than the start (another call's, finishing later) still counts it.
        let holding = held.len()
            + state
                .pending
                .keys()
                .filter(|pending| !held.contains(*pending))
                .count();
        if let Some(max) = self.max_runtimes
            && holding >= max
        {
            return Err(SandboxError::Quota(format!(
                "The runtime API key holds {holding} sandboxes, its max_runtimes ({max}): pause \
                 or stop one before starting another"
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
        state.pending.insert(session.to_owned(), Instant::now());
        Ok(Admission {
            quotas: self,
            session: session.to_owned(),
            started: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions(names: &[&str]) -> HashSet<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn max_runtimes_counts_held_sessions_and_admitted_starts() {
        let quotas = Quotas::new(Some(2), None);
        let held = sessions(&["a"]);
        let failed = quotas.admit(&held, "b").expect("one held, one free");
        assert!(matches!(
            quotas.admit(&held, "c"),
            Err(SandboxError::Quota(_))
        ));
        drop(failed);
        quotas
            .admit(&held, "b")
            .expect("a failed start holds nothing")
            .started();
        // Started, but the store read before it was stored: it still counts.
        assert!(matches!(
            quotas.admit(&held, "c"),
            Err(SandboxError::Quota(_))
        ));
        // A read that shows it held counts it once.
        assert!(matches!(
            quotas.admit(&sessions(&["a", "b"]), "c"),
            Err(SandboxError::Quota(_))
        ));
        // A read older than its start, finishing later, still counts it.
        assert!(matches!(
            quotas.admit(&sessions(&["a"]), "c"),
            Err(SandboxError::Quota(_))
        ));
    }

    #[test]
    fn the_start_rate_refuses_a_burst_past_it() {
        let quotas = Quotas::new(None, Some(3));
        for session in ["a", "b", "c"] {
            quotas
                .admit(&HashSet::new(), session)
                .expect("within the rate")
                .started();
        }
        assert!(matches!(
            quotas.admit(&HashSet::new(), "d"),
            Err(SandboxError::Quota(_))
        ));
    }
}
