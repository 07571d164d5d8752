//! The runtime API key's quotas in the embedded store: one process serves it, so a mutex
//! over each key's pending starts and recent starts makes admission atomic. A restart
//! forgets them: the sandbox records still count what is held, and the rate starts over.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Instant;

use crate::admin::{StartAdmission, StartQuota};
use crate::{StoreError, StoreResult};

/// One key's admitted starts.
#[derive(Default)]
struct KeyQuota {
    /// Session → until when its start counts as held whatever the records show.
    pending: HashMap<String, Instant>,
    /// When each start in the rate's window was admitted, oldest first.
    starts: VecDeque<Instant>,
}

#[derive(Default)]
pub(super) struct Quotas(Mutex<HashMap<String, KeyQuota>>);

impl Quotas {
    pub(super) fn admit(&self, quota: &StartQuota<'_>) -> StoreResult<StartAdmission> {
        let now = Instant::now();
        let mut keys = self
            .0
            .lock()
            .map_err(|_| StoreError::Unavailable("the quota table is poisoned".into()))?;
        let state = keys.entry(quota.key.to_owned()).or_default();
        state.pending.retain(|_, until| *until > now);
        if let Some(max) = quota.max_runtimes {
            let held: std::collections::HashSet<&str> =
                quota.held.iter().map(String::as_str).collect();
            let pending = state
                .pending
                .keys()
                .filter(|session| !held.contains(session.as_str()))
                .count();
            let holding = (held.len() + pending) as u64;
            if holding >= max {
                return Ok(StartAdmission::MaxRuntimes { holding });
            }
        }
        if let Some((rate, window)) = quota.start_rate {
            while state
                .starts
                .front()
                .is_some_and(|at| now.duration_since(*at) >= window)
            {
                state.starts.pop_front();
            }
            if state.starts.len() >= rate as usize {
                return Ok(StartAdmission::StartRate);
            }
            state.starts.push_back(now);
        }
        state
            .pending
            .insert(quota.session.to_owned(), now + quota.pending_for);
        Ok(StartAdmission::Admitted)
    }

    pub(super) fn release(&self, key: &str, session: &str) -> StoreResult<()> {
        let mut keys = self
            .0
            .lock()
            .map_err(|_| StoreError::Unavailable("the quota table is poisoned".into()))?;
        if let Some(state) = keys.get_mut(key) {
            state.pending.remove(session);
        }
        Ok(())
    }
}
