//! The phases of a start's timeline (`sandgate_store::timeline`) that the Sandboxes
//! service sees: the start itself (a claim or a cold create), running (the claim of a
//! running sandbox, else the first refresh that sees it run), and alive: the agent-server
//! answered, at `/api/init` for a personalised claim, else at `GET /alive` (served
//! without a key by the agent-server, 1.34 and 1.58 alike), which a probe spawned by the
//! start polls in the background until it answers or the start timeout passes. The start
//! never waits for it. The webhook and LLM call phases are the store's `Activity`'s.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Sandboxes;
use crate::ambient::Clock;
use sandgate_store::{Phase, SandboxState, Store, StoredSandbox};

/// The probe's first interval, doubled after each miss up to [`PROBE_MAX_INTERVAL`]: a
/// warm sandbox answers at once, a cold one is timed to within half a second.
const PROBE_FIRST_INTERVAL: Duration = Duration::from_millis(50);
const PROBE_MAX_INTERVAL: Duration = Duration::from_millis(500);
/// How long one `GET /alive` may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Misses between reads of the record: a probe of a sandbox stopped, paused or failed
/// meanwhile ends then.
const PROBE_RECHECK: u32 = 20;
/// Attempts at one phase's compare-and-swap.
const WRITE_ATTEMPTS: usize = 8;

impl Sandboxes {
    /// Starts the probe of `record`'s agent-server, unless its start already saw it
    /// answer or the platform runs none.
    pub(super) fn probe_alive(&self, record: &StoredSandbox) {
        let Some(timeline) = &record.timeline else {
            return;
        };
        if timeline.alive_at_ms.is_some() {
            return;
        }
        let Some(url) = self.driver.init_url(record) else {
            return;
        };
        let probe = Probe {
            store: self.store.clone(),
            client: self.init_client.clone(),
            clock: self.clock.clone(),
            url: format!("{}/alive", url.trim_end_matches('/')),
            runtime_id: record.runtime_id.clone(),
            started_at_ms: timeline.started_at_ms,
            patience: self.options.start_timeout,
        };
        tokio::spawn(probe.run());
    }

    /// Records that `record`'s agent-server answered now (its `/api/init`); the record
    /// as written.
    pub(super) async fn answered(&self, record: StoredSandbox) -> StoredSandbox {
        let Some(started_at_ms) = record.timeline.as_ref().map(|t| t.started_at_ms) else {
            return record;
        };
        let now = self.clock.now_ms();
        match alive(&self.store, &record.runtime_id, started_at_ms, now).await {
            Ok(Some(written)) => written,
            Ok(None) => record,
            Err(err) => {
                tracing::warn!(runtime_id = %record.runtime_id, error = %err, "cannot record the sandbox's alive phase");
                record
            }
        }
    }
}

/// Sets `Running` at `now_ms` on `record`'s timeline, when it runs and its start has
/// not seen it yet; `true`: set.
pub(super) fn seen_running(record: &mut StoredSandbox, now_ms: i64) -> bool {
    record.state == SandboxState::Running
        && record
            .timeline
            .as_mut()
            .is_some_and(|timeline| timeline.set(Phase::Running, now_ms))
}

/// Whether a refresh that sees `record` in `state` has its running phase to write.
pub(super) fn runs_untimed(record: &StoredSandbox, state: SandboxState) -> bool {
    state == SandboxState::Running
        && record
            .timeline
            .as_ref()
            .is_some_and(|timeline| timeline.running_at_ms.is_none())
}

/// Observes `phase` of `record`'s timeline in the histogram.
pub(super) fn observe(record: &StoredSandbox, phase: Phase) {
    if let Some(timeline) = &record.timeline {
        timeline.observe(phase);
    }
}

/// One start's probe of its agent-server.
struct Probe {
    store: Store,
    client: reqwest::Client,
    clock: Arc<dyn Clock>,
    url: String,
    runtime_id: String,
    started_at_ms: i64,
    patience: Duration,
}

impl Probe {
    async fn run(self) {
        let give_up = Instant::now() + self.patience;
        let mut interval = PROBE_FIRST_INTERVAL;
        let mut misses = 0u32;
        loop {
            let answered = self
                .client
                .get(&self.url)
                .timeout(PROBE_TIMEOUT)
                .send()
                .await
                .is_ok_and(|response| response.status().is_success());
            if answered {
                break;
            }
            misses += 1;
            if Instant::now() + interval > give_up {
                return;
            }
            if misses.is_multiple_of(PROBE_RECHECK) && !self.still_starting().await {
                return;
            }
            tokio::time::sleep(interval).await;
            interval = (interval * 2).min(PROBE_MAX_INTERVAL);
        }
        let now = self.clock.now_ms();
        if let Err(err) = alive(&self.store, &self.runtime_id, self.started_at_ms, now).await {
            tracing::warn!(runtime_id = %self.runtime_id, error = %err, "cannot record the sandbox's alive phase");
        }
    }

    /// Whether the start probed is still the sandbox's, and may still come up.
    async fn still_starting(&self) -> bool {
        match self.store.sandboxes.sandbox(&self.runtime_id).await {
            Ok(Some(record)) => {
                record.state.is_live()
                    && record
                        .timeline
                        .is_some_and(|timeline| timeline.started_at_ms == self.started_at_ms)
            }
            Ok(None) => false,
            // The store is away for a moment: the probe goes on.
            Err(_) => true,
        }
    }
}

/// Writes `Alive` at `now_ms` on the timeline of `runtime_id`'s start at
/// `started_at_ms`, and `Running` with it if no refresh saw it run first (an agent-server
/// that answers runs); the record as written, `None` when there was nothing to write.
async fn alive(
    store: &Store,
    runtime_id: &str,
    started_at_ms: i64,
    now_ms: i64,
) -> sandgate_store::StoreResult<Option<StoredSandbox>> {
    for _ in 0..WRITE_ATTEMPTS {
        let Some(record) = store.sandboxes.sandbox(runtime_id).await? else {
            return Ok(None);
        };
        let mut next = record.clone();
        let Some(timeline) = next
            .timeline
            .as_mut()
            .filter(|timeline| timeline.started_at_ms == started_at_ms)
        else {
            return Ok(None);
        };
        let running = timeline.set(Phase::Running, now_ms);
        // A refresh may have seen it run a moment after the probe's answer, and written
        // first: alive is never before running.
        let at_ms = timeline
            .running_at_ms
            .map_or(now_ms, |seen| seen.max(now_ms));
        if !timeline.set(Phase::Alive, at_ms) {
            return Ok(None);
        }
        next.version += 1;
        if store
            .sandboxes
            .put_sandbox(Some(&record), &next, None)
            .await?
        {
            if running {
                observe(&next, Phase::Running);
            }
            observe(&next, Phase::Alive);
            return Ok(Some(next));
        }
    }
    Ok(None)
}
