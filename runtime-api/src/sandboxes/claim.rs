//! A start's claim of a warm sandbox (`matching.rs` says which it may take), the
//! personalisation of one that started dormant (`init.rs`), and, when the start
//! cold-starts instead, why: counted by reason in `sandgate_sandbox_cold_starts_total`,
//! kept per pool for the pools' listing, and logged.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use super::init::{deliver, init_body};
use super::matching::{ColdReason, cold_reason, is_deferred, shape_key};
use super::spec::{exact_key, pool_spec};
use super::{CAS_ATTEMPTS, CLAIM_CANDIDATES, SandboxResult, Sandboxes, timeline};
use sandgate_store::{Launch, Phase, SandboxSpec, SandboxState, StoredSandbox, Timeline};

/// The cold starts of one pool (or of none: starts whose image no pool runs), by reason,
/// since this process started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ColdStarts {
    pub by_reason: BTreeMap<String, i64>,
    /// The latest one's reason and what differed.
    pub last: String,
}

/// Cold starts by pool (`None`: no pool runs the image), for the listing.
#[derive(Default)]
pub(super) struct ColdStartLog(Mutex<HashMap<Option<String>, ColdStarts>>);

impl ColdStartLog {
    fn record(&self, reason: &ColdReason) {
        let mut log = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = log.entry(reason.pool.clone()).or_default();
        *entry.by_reason.entry(reason.reason.to_owned()).or_default() += 1;
        entry.last = format!("{}: {}", reason.reason, reason.detail);
    }

    fn of(&self, pool: Option<&str>) -> ColdStarts {
        let log = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        log.get(&pool.map(str::to_owned))
            .cloned()
            .unwrap_or_default()
    }
}

/// Registers the cold-start counter with its help text.
pub fn describe_metrics() {
    metrics::describe_counter!(
        "sandgate_sandbox_cold_starts_total",
        "starts that claimed no warm sandbox, by reason: no_pool, pool_empty, init_failed, or the first field in which the start differs from the nearest pool"
    );
}

impl Sandboxes {
    /// Takes a warm sandbox for `spec` (a start's, without the pools' dormant switch):
    /// one of a personalised pool whose process matches, given the start's own
    /// configuration before this answers, else one of an exact pool; running ones first.
    /// `Err`: none, and why.
    pub(super) async fn claim(
        &self,
        spec: &SandboxSpec,
        session_id: &str,
    ) -> SandboxResult<Result<StoredSandbox, ColdReason>> {
        for key in [shape_key(spec), exact_key(spec)] {
            let Some(claimed) = self.claim_by(&key, spec, session_id).await? else {
                continue;
            };
            if !claimed.personalised {
                return Ok(Ok(claimed));
            }
            let Err(why) = self.personalise(&claimed, spec).await else {
                // Its agent-server answered `/api/init`: alive.
                return Ok(Ok(self.answered(claimed).await));
            };
            // A dormant sandbox that cannot take the start's configuration (an
            // agent-server without deferred init, one that failed) would serve the pool's:
            // it goes, and the start cold-starts.
            let pool = claimed.pool.clone();
            if let Some(stopped) = self.retire(claimed, None).await? {
                self.store.sandboxes.delete_sandbox(&stopped, None).await?;
            }
            return Ok(Err(ColdReason {
                reason: "init_failed",
                pool,
                detail: why,
            }));
        }
        let (configs, _) = self.configs.effective().await?;
        let pools: Vec<(String, SandboxSpec)> = configs
            .iter()
            .map(|config| (config.name.clone(), pool_spec(config)))
            .collect();
        Ok(Err(cold_reason(
            spec,
            pools.iter().map(|(name, pool)| (name.as_str(), pool)),
        )))
    }

    /// Takes a warm sandbox indexed under `key`. One of a personalised pool must be
    /// running (its agent-server answers `/api/init`); it takes `spec` as its own in the
    /// same write, so that its resumes run the start's environment.
    async fn claim_by(
        &self,
        key: &str,
        spec: &SandboxSpec,
        session_id: &str,
    ) -> SandboxResult<Option<StoredSandbox>> {
        for _ in 0..CAS_ATTEMPTS {
            let candidates: Vec<_> = self
                .store
                .sandboxes
                .warm_sandboxes(key, CLAIM_CANDIDATES)
                .await?
                .into_iter()
                .filter(|record| record.warm_index() == Some(key))
                .collect();
            if candidates.is_empty() {
                return Ok(None);
            }
            // Their current state, so that ready ones go first and the claimer is told;
            // written by the claim itself, in its one compare-and-swap.
            let mut observed = self.driver.observe(&candidates).await?;
            let mut claims: Vec<_> = candidates
                .into_iter()
                .filter_map(|candidate| {
                    let mut next = candidate.clone();
                    if let Some(seen) = observed.remove(&candidate.runtime_id) {
                        if seen.state != next.state {
                            next.changed_at_ms = self.clock.now_ms();
                        }
                        next.state = seen.state;
                        next.status_detail = seen.detail;
                        next.restarts = seen.restarts;
                    }
                    // One that failed since it was indexed is no claim, nor one stuck
                    // starting for a reason (its image cannot be pulled, no node takes
                    // it): a cold start does not inherit its wait. A dormant one must be
                    // up to take the start's configuration.
                    let stuck =
                        next.state == SandboxState::Starting && next.status_detail.is_some();
                    let usable = if is_deferred(&candidate.spec) {
                        next.state == SandboxState::Running
                    } else {
                        next.state.is_live() && !stuck
                    };
                    usable.then_some((candidate, next))
                })
                .collect();
            claims
                .sort_by_key(|(_, next)| (next.state != SandboxState::Running, next.created_at_ms));
            for (candidate, mut next) in claims {
                next.session_id = Some(session_id.to_owned());
                // Its idle time counts from the claim, not from when it started warm.
                let now = self.now_ms();
                next.active_at_ms = now;
                // The start's timeline begins at the claim; running already, it ran then.
                next.timeline = Some(Timeline::new(Launch::Warm, None, now));
                let running = timeline::seen_running(&mut next, now);
                next.version += 1;
                if is_deferred(&candidate.spec) {
                    next.spec = spec.clone();
                    next.claim_key = exact_key(spec);
                    next.personalised = true;
                }
                if self
                    .store
                    .sandboxes
                    .put_sandbox(Some(&candidate), &next, None)
                    .await?
                {
                    if running {
                        timeline::observe(&next, Phase::Running);
                    }
                    return Ok(Some(next));
                }
            }
        }
        Ok(None)
    }

    /// Delivers `spec`'s configuration to the claimed dormant sandbox `record`.
    async fn personalise(&self, record: &StoredSandbox, spec: &SandboxSpec) -> Result<(), String> {
        let Some(url) = self.driver.init_url(record) else {
            return Ok(());
        };
        self.driver
            .claiming(record, spec)
            .await
            .map_err(|err| err.to_string())?;
        let keys = self.keys.keys(&record.runtime_id, &record.key_nonce);
        deliver(&self.init_client, &url, &keys, &init_body(spec, &keys)).await
    }

    /// Counts, keeps and logs a cold start's reason.
    pub(super) fn cold_start(&self, reason: &ColdReason) {
        metrics::counter!("sandgate_sandbox_cold_starts_total", "reason" => reason.reason)
            .increment(1);
        tracing::info!(
            reason = reason.reason,
            pool = reason.pool.as_deref().unwrap_or(""),
            detail = %reason.detail,
            "cold start"
        );
        self.cold_starts.record(reason);
    }

    /// The cold starts attributed to `pool` (`None`: to no pool) by this process.
    pub fn cold_starts(&self, pool: Option<&str>) -> ColdStarts {
        self.cold_starts.of(pool)
    }
}
