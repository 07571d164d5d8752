//! The warm-pool reconciler: for each configuration in effect it keeps `count` unclaimed
//! sandboxes on the configuration's current spec, replaces those on an old one, culls
//! pools whose configuration is gone, pauses claimed sandboxes idle for
//! `RUNTIME_IDLE_SECONDS` (`idle.rs`) and deletes those paused for longer than
//! `RUNTIME_DEAD_SECONDS` (`retention.rs`). Claimed sandboxes are otherwise never touched.
//! One reconciler acts at a time across replicas: each pass holds a lease in the store.
//!
//! A pass reads what it may act on, from the store's sweep indexes: the unclaimed
//! sandboxes, and the claimed ones paused or stopped for longer than they are kept. Its
//! cost follows the pools' size, not the number of sandboxes ever started. A reconciler
//! that takes the lease, and the holder once an hour, first repairs those indexes (records
//! written by a release without them, during an upgrade) and sweeps the platform for
//! orphans: Sandgate's workloads whose record is gone (a crash between two steps, a store
//! restored from an older backup), deleted once older than [`ORPHAN_GRACE_MS`].
//!
//! A failed warm sandbox holds its slot until its backoff is over (`pools.rs`), then is
//! deleted and replaced: a transient platform error heals by itself, and a pool whose
//! creates keep failing retries ever more slowly and says why in its status.
//!
//! Each pass that acts records its duration, its actions and the pools' counts as
//! metrics (`report.rs`); a replica that does not hold the lease reports its pools at 0,
//! so that only the acting reconciler's counts add up.

mod idle;
mod orphans;
mod report;
mod retention;

pub use orphans::{ORPHAN_GRACE_MS, ORPHAN_SWEEP_GUARD};
pub use report::describe_metrics;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::pools::heal_at_ms;
use super::spec::pool_spec;
use super::{PoolCounts, SandboxResult, Sandboxes, pool_status};
use crate::admin::source::Generation;
use crate::ambient::random_hex;
use sandgate_store::{Fence, SandboxState, StoredSandbox};

/// How long a claim's wake-up waits for more claims before the refilling pass.
const CLAIM_COALESCE: Duration = Duration::from_millis(20);

/// The shortest wait for a pass that replaces a failed warm sandbox, so that clocks a
/// little apart never spin the loop.
const HEAL_WAKE_FLOOR: Duration = Duration::from_millis(100);

/// Warm sandboxes launched at once by a pass.
const CONCURRENT_LAUNCHES: usize = 16;

/// The lease's name in the store.
const LEASE: &str = "reconciler";

/// Bounds of the lease's time to live, which is twice the reconcile interval.
const LEASE_TTL_MIN: Duration = Duration::from_secs(3);
const LEASE_TTL_MAX: Duration = Duration::from_secs(300);

/// Claimed sandboxes a pass retires (paused too long) or forgets (stopped), at most, of
/// each kind; the rest wait for the next pass.
const SWEEP_BATCH: usize = 1000;

/// How often a waiting reconciler checks whether the configurations changed through
/// another replica (one read of a version key).
const CHANGE_POLL: Duration = Duration::from_secs(1);

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    /// `false`: another replica holds the lease; nothing was done.
    pub acted: bool,
    pub created: usize,
    /// Warm sandboxes deleted: spec changed, pool removed or shrunk.
    pub culled: usize,
    /// Claimed sandboxes deleted after idling paused, or forgotten after stopping.
    pub retired: usize,
    /// Claimed sandboxes paused because their conversation was idle.
    pub paused: usize,
    /// Workloads deleted from the platform because no record names them.
    pub orphans: usize,
    /// Failed warm sandboxes deleted, their backoff over, so that their slots refill.
    pub replaced: usize,
    /// When (clock milliseconds) the next failed warm sandbox is due for replacement.
    pub next_heal_ms: Option<i64>,
}

pub struct Reconciler {
    sandboxes: Arc<Sandboxes>,
    /// Who this reconciler is, in the lease.
    holder: String,
    /// The pools whose gauges this reconciler set: set to 0 once they are gone (or the
    /// lease is), rather than left at their last count.
    reported: Mutex<HashSet<String>>,
    /// When (clock milliseconds) this reconciler last repaired the sweep indexes while it
    /// held the lease; `None` when it does not hold it.
    reindexed_at: Mutex<Option<i64>>,
    /// Cancelled when the process stops: a pass starts no more sandboxes after it.
    stopping: CancellationToken,
    /// The refusal last logged for each pool, so that one that holds is logged once.
    warned: Mutex<HashMap<String, String>>,
}

impl Reconciler {
    pub fn new(sandboxes: Arc<Sandboxes>) -> Self {
        report::zero_counters();
        Self {
            sandboxes,
            holder: random_hex(8),
            reported: Mutex::default(),
            reindexed_at: Mutex::default(),
            stopping: CancellationToken::new(),
            warned: Mutex::default(),
        }
    }

    fn lease_ttl(&self) -> Duration {
        // Long enough to outlive one pass and the wait to the next, short enough that
        // another replica takes over soon after this one dies. The floor only matters for
        // intervals under 1.5 s (development, tests; the default 60 s gives 120 s): 3 s
        // still outlasts a pass on the local driver many times over, and lets a test watch
        // a takeover without waiting 10 s.
        (self.sandboxes.options().reconcile_interval * 2).clamp(LEASE_TTL_MIN, LEASE_TTL_MAX)
    }

    /// Runs passes until `stop` is cancelled: every interval, and at once when a
    /// configuration changes or a claim empties a slot.
    pub async fn run(self, stop: CancellationToken) {
        // A pass in progress sees the stop too, and starts nothing more.
        let this = Self {
            stopping: stop.clone(),
            ..self
        };
        this.run_passes(stop).await;
    }

    async fn run_passes(&self, stop: CancellationToken) {
        let interval = self.sandboxes.options().reconcile_interval;
        let mut seen = None;
        loop {
            let generation = self.sandboxes.configs.generation().await.ok();
            let mut wait = interval;
            match self.pass().await {
                Ok(pass) => {
                    if pass.created + pass.culled + pass.retired + pass.replaced + pass.paused > 0 {
                        tracing::info!(
                            created = pass.created,
                            culled = pass.culled,
                            replaced = pass.replaced,
                            retired = pass.retired,
                            paused = pass.paused,
                            "warm pools reconciled"
                        );
                    }
                    // A failed warm sandbox is replaced when its backoff ends, not at the
                    // next interval.
                    if let Some(due) = pass.next_heal_ms {
                        let ms = due.saturating_sub(self.sandboxes.now_ms());
                        let until = Duration::from_millis(u64::try_from(ms).unwrap_or(0));
                        wait = wait.min(until.max(HEAL_WAKE_FLOOR));
                    }
                }
                Err(err) => tracing::warn!(error = %err, "warm pool reconciliation failed"),
            }
            seen = generation.or(seen);
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                tokio::select! {
                    () = stop.cancelled() => {
                        drop(self.sandboxes.store.sandboxes.release_lease(LEASE, &self.holder).await);
                        return;
                    }
                    () = tokio::time::sleep_until(deadline) => break,
                    () = self.sandboxes.configs.changed() => break,
                    () = self.sandboxes.claimed() => {
                        // Claims come in bursts: one pass refills after a few of them
                        // rather than a pass per claim, each competing with the next.
                        tokio::time::sleep(CLAIM_COALESCE).await;
                        break;
                    }
                    () = tokio::time::sleep(CHANGE_POLL) => {
                        let now = self.sandboxes.configs.generation().await.ok();
                        if now.is_some() && now != seen {
                            break;
                        }
                    }
                }
            }
        }
    }

    /// One pass, when this reconciler holds (or can take) the lease; its metrics.
    pub async fn pass(&self) -> SandboxResult<Pass> {
        let started = Instant::now();
        let result = self.reconcile().await;
        self.record(started, &result);
        result.map(|(pass, _)| pass)
    }

    /// The pass itself, and each configured pool's counts after it.
    async fn reconcile(&self) -> SandboxResult<(Pass, HashMap<String, PoolCounts>)> {
        let Some(token) = self
            .sandboxes
            .store
            .sandboxes
            .acquire_lease(LEASE, &self.holder, self.lease_ttl())
            .await?
        else {
            *self.lock_reindexed_at() = None;
            return Ok((Pass::default(), HashMap::new()));
        };
        // Every write of the pass carries the lease's token: should this process be
        // paused past its lease while another took it over, none of them lands.
        let fence = Fence {
            lease: LEASE.to_owned(),
            token,
        };
        let fence = Some(&fence);
        let mut pass = Pass {
            acted: true,
            orphans: self.reindex_when_due().await?,
            ..Pass::default()
        };
        let now = self.sandboxes.now_ms();
        pass.paused = self.pause_idle(now, fence).await?;
        pass.retired = self.retire_expired(now, fence).await?;

        let (configs, generation) = self.sandboxes.configs.effective().await?;
        let limits = self.sandboxes.configs.limits();
        let records = self
            .sandboxes
            .refresh(self.sandboxes.pooled().await?, fence)
            .await?;
        let specs: HashMap<_, _> = configs
            .iter()
            .map(|config| (config.name.as_str(), (pool_spec(config), config.count)))
            .collect();

        let mut warm: HashMap<&str, Vec<StoredSandbox>> = HashMap::new();
        for record in records {
            if record.session_id.is_some() {
                // Claimed while the pass read it.
                continue;
            }
            let current = record
                .pool
                .as_deref()
                .and_then(|pool| specs.get_key_value(pool))
                .filter(|(_, (spec, _))| {
                    *spec == record.spec
                        && record.state != SandboxState::Stopped
                        // A key that no longer derives could not be handed to a claimer.
                        && self.sandboxes.current_key(&record).is_some()
                });
            match current {
                Some((pool, _)) => warm.entry(pool).or_default().push(record),
                None => {
                    if self.sandboxes.cull(record, fence).await? {
                        pass.culled += 1;
                    }
                }
            }
        }

        // Whatever a configuration asks (one saved before the limits were), no pool grows
        // past its limit, nor all of them past theirs.
        let pool_limit = usize::try_from(limits.max_per_pool).unwrap_or(0);
        let kept: usize = specs
            .iter()
            .map(|(name, (_, count))| {
                let target = usize::try_from(*count).unwrap_or(0).min(pool_limit);
                warm.get(name).map_or(0, Vec::len).min(target)
            })
            .sum();
        let mut launches_left = usize::try_from(limits.max_total)
            .unwrap_or(0)
            .saturating_sub(kept);
        let mut pools = HashMap::with_capacity(specs.len());
        for (name, (spec, count)) in &specs {
            let mut pool = warm.remove(name).unwrap_or_default();
            let target = usize::try_from(*count).unwrap_or(0).min(pool_limit);
            let target_count = i64::try_from(target).unwrap_or(i64::MAX);
            if pool.len() > target {
                // Keep the ready ones: drop failed, then starting, newest first.
                pool.sort_by_key(|record| {
                    (
                        record.state != SandboxState::Running,
                        record.state == SandboxState::Error,
                        record.created_at_ms,
                    )
                });
                for record in pool.drain(target..) {
                    if self.sandboxes.cull(record, fence).await? {
                        pass.culled += 1;
                    }
                }
            }
            let refused = self.sandboxes.admit(spec).err();
            self.warn_once(
                name,
                refused
                    .as_ref()
                    .map(|refusal| format!("{}: {}", refusal.field, refusal.message)),
            );
            if let Some(refusal) = &refused {
                // A configuration the platform refuses outright: its pool stays empty, and
                // its status says why (the others fill as usual).
                let counts = pool_status(name, &pool, target_count, Some(refusal), now);
                pools.insert((*name).to_owned(), counts);
                continue;
            }
            // Failed sandboxes whose backoff is over are deleted, and their slots refilled
            // below; the others hold their slot until then, so that a pool whose creates
            // keep failing waits longer each time instead of retrying every pass.
            let mut replacing = Vec::new();
            let mut members = Vec::with_capacity(pool.len());
            for record in pool {
                if record.state == SandboxState::Error {
                    let due = heal_at_ms(&record);
                    if due <= now {
                        replacing.push(record.slot_failures.saturating_add(1));
                        if self.sandboxes.cull(record, fence).await? {
                            pass.replaced += 1;
                            launches_left += 1;
                        }
                        continue;
                    }
                    pass.next_heal_ms = Some(pass.next_heal_ms.map_or(due, |next| next.min(due)));
                }
                members.push(record);
            }
            let mut pool = members;
            let wanted = target.saturating_sub(pool.len()).min(launches_left);
            launches_left -= wanted;
            // Launched a few at a time: each is a store write and a platform call, and a
            // 50-sandbox pool should fill in one round trip's time, not fifty. Before each,
            // the pass checks that it is still wanted: not once the process stops, nor once
            // the configurations changed (deleted, resized) since the pass read them; the
            // next pass works from the new ones. Launches under way finish.
            let mut launched = futures::stream::FuturesUnordered::new();
            let mut scheduled = 0;
            loop {
                while launched.len() < CONCURRENT_LAUNCHES
                    && scheduled < wanted
                    && self.still_wanted(generation).await
                {
                    launched.push(self.sandboxes.launch_slot(
                        spec.clone(),
                        Some((*name).to_owned()),
                        None,
                        replacing.pop().unwrap_or(0),
                        fence,
                    ));
                    scheduled += 1;
                }
                let Some(outcome) = launched.next().await else {
                    break;
                };
                pass.created += 1;
                match outcome? {
                    Ok(record) => pool.push(record),
                    // The record stays, in error with the reason, for the pool status and
                    // its replacement after the backoff.
                    Err((failed, err)) => {
                        tracing::warn!(pool = %name, error = %err, "cannot start a warm sandbox");
                        if let Some(failed) = failed {
                            let due = heal_at_ms(&failed);
                            pass.next_heal_ms =
                                Some(pass.next_heal_ms.map_or(due, |next| next.min(due)));
                            pool.push(failed);
                        }
                    }
                }
            }
            if scheduled < wanted {
                tracing::info!(pool = %name, started = scheduled, wanted, "pass cut short: stopping, or the configurations changed");
            }
            let counts = pool_status(name, &pool, target_count, None, now);
            pools.insert((*name).to_owned(), counts);
        }
        Ok((pass, pools))
    }

    /// Logs `warning` about the pool `name` when it differs from the last one logged: a
    /// refusal that holds every pass is said once, and again when it changes.
    fn warn_once(&self, name: &str, warning: Option<String>) {
        let mut warned = self.warned.lock().unwrap_or_else(PoisonError::into_inner);
        match warning {
            Some(warning) if warned.get(name) != Some(&warning) => {
                tracing::warn!(pool = %name, reason = %warning, "the sandbox platform refuses this warm configuration");
                warned.insert(name.to_owned(), warning);
            }
            Some(_) => {}
            None => {
                if warned.remove(name).is_some() {
                    tracing::info!(pool = %name, "the sandbox platform accepts this warm configuration now");
                }
            }
        }
    }

    /// Whether a pass working from the configurations of `generation` should start
    /// another sandbox: the process is not stopping, and they are still the ones in effect.
    async fn still_wanted(&self, generation: Generation) -> bool {
        !self.stopping.is_cancelled()
            && self
                .sandboxes
                .configs
                .generation()
                .await
                .is_ok_and(|now| now == generation)
    }
}
