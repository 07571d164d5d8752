//! Sandboxes and their warm pools (spec 1, 2.1 rules 8–10): the lifecycle operations the
//! Sandboxes service answers, the reconciler that keeps each pool full, and the drivers
//! that run sandboxes on a platform.

mod claim;
pub mod driver;
mod error;
mod init;
pub mod kubernetes;
pub mod ledger;
mod lifecycle;
pub mod matching;
pub mod pools;
pub mod process;
pub mod process_isolation;
pub mod quota;
pub mod reconciler;
pub(crate) mod service;
pub mod spec;
mod timeline;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::admin::source::WarmConfigSource;
use crate::ambient::{Clock, random_hex};
use crate::auth::session_key_digest;
pub use claim::{ColdStarts, describe_metrics as describe_claim_metrics};
use driver::{DriverError, Observed, Refusal, SandboxDriver};
pub use error::SandboxError;
pub use pools::{PoolCounts, pool_counts, pool_status};
pub use reconciler::Reconciler;
use sandgate_store::{
    Fence, Phase, Restarts, SandboxSpec, SandboxState, Store, StoredSandbox, SweepIndex,
};
pub use service::SandboxesService;
use spec::{SessionKeys, claim_key};

/// How sandboxes are reached and how long they are kept.
#[derive(Clone, Debug)]
pub struct SandboxOptions {
    /// `RUNTIME_BASE_URL`: a sandbox's host is `{runtime_id}{separator}{base_url}`.
    pub base_url: String,
    /// `RUNTIME_URL_SEPARATOR`.
    pub separator: String,
    /// `RUNTIME_DISABLE_SSL`: `http://` sandbox URLs instead of `https://`.
    pub disable_ssl: bool,
    /// `RUNTIME_DEAD_SECONDS`: a paused sandbox idle this long is deleted.
    pub dead_after: Duration,
    /// `RUNTIME_IDLE_SECONDS`: a running sandbox whose conversation showed no activity
    /// this long is paused; zero, never.
    pub idle_after: Duration,
    /// How long a stopped sandbox is still listed and answered.
    pub stopped_retention: Duration,
    /// `RECONCILE_INTERVAL`.
    pub reconcile_interval: Duration,
    /// `SANDBOX_START_TIMEOUT`: a sandbox still starting this long after it was asked for
    /// (an image that cannot be pulled, a pod that cannot be scheduled or configured) is
    /// in error, with the reason the platform gave.
    pub start_timeout: Duration,
    /// `MAX_RUNTIMES`: the sandboxes the runtime API key may hold at once; `None`, any.
    pub max_runtimes: Option<usize>,
    /// `SANDBOX_START_RATE`: the starts (and resumes) it may make per minute; `None`, any.
    pub start_rate: Option<u32>,
    /// `SANDBOX_HOUR_PRICE`, `SANDBOX_PAUSED_HOUR_PRICE`: the ledger's `sandbox_cost`.
    pub prices: SandboxPrices,
}

/// What an hour of a sandbox costs, running and paused, at resource factor 1.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SandboxPrices {
    pub running_hour: f64,
    pub paused_hour: f64,
}

impl Default for SandboxOptions {
    fn default() -> Self {
        Self {
            base_url: "runtime.localhost".into(),
            separator: "-".into(),
            disable_ssl: true,
            dead_after: Duration::from_secs(864_000),
            idle_after: Duration::from_secs(1200),
            stopped_retention: Duration::from_secs(3600),
            reconcile_interval: Duration::from_secs(60),
            start_timeout: Duration::from_secs(600),
            max_runtimes: None,
            start_rate: None,
            prices: SandboxPrices::default(),
        }
    }
}

/// Warm sandboxes a claim considers at once: enough to find a ready one, few enough that
/// a claim costs the same whatever the pool's size.
const CLAIM_CANDIDATES: usize = 8;

/// Attempts at a compare-and-swap before a call gives up with 503.
const CAS_ATTEMPTS: usize = 8;

pub type SandboxResult<T> = Result<T, SandboxError>;

/// What a launch made: the sandbox, or the platform's refusal and the record it left in
/// error (`None`: gone since).
type Launched = Result<StoredSandbox, (Option<StoredSandbox>, DriverError)>;

/// A sandbox as answered: its record, its URL and its current session key.
pub struct SandboxView {
    pub record: StoredSandbox,
    pub url: String,
    pub session_api_key: String,
}

/// The lifecycle of sandboxes, shared by the Sandboxes service and the reconciler.
pub struct Sandboxes {
    store: Store,
    driver: Arc<dyn SandboxDriver>,
    keys: SessionKeys,
    clock: Arc<dyn Clock>,
    options: SandboxOptions,
    configs: Arc<WarmConfigSource>,
    /// Woken when a claim empties a pool slot, so the local reconciler refills it at once.
    claimed: Notify,
    pub(super) quotas: quota::Quotas,
    /// Delivers a start's configuration to the dormant warm sandbox it claims.
    init_client: reqwest::Client,
    cold_starts: claim::ColdStartLog,
}

impl Sandboxes {
    /// Where an admin's changes to sandboxes are recorded.
    pub(crate) fn audit_store(&self) -> &dyn sandgate_store::AuditStore {
        self.store.audit.as_ref()
    }

    pub fn new(
        store: Store,
        driver: Arc<dyn SandboxDriver>,
        session_key_secret: &[u8],
        clock: Arc<dyn Clock>,
        options: SandboxOptions,
        configs: Arc<WarmConfigSource>,
    ) -> Self {
        let quotas = quota::Quotas::new(store.clone(), options.max_runtimes, options.start_rate);
        Self {
            store,
            driver,
            keys: SessionKeys::new(session_key_secret),
            clock,
            quotas,
            options,
            configs,
            claimed: Notify::new(),
            init_client: init::client(),
            cold_starts: claim::ColdStartLog::default(),
        }
    }

    pub fn options(&self) -> &SandboxOptions {
        &self.options
    }

    /// Whether the platform would run `spec` at all.
    pub fn admit(&self, spec: &SandboxSpec) -> Result<(), Refusal> {
        self.driver.admit(spec)
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// The sandbox as answered. Its key is derived anew; when the secret changed since
    /// the key was issued (a restart without a configured secret), no key is answered
    /// rather than a wrong one.
    pub fn view(&self, record: StoredSandbox) -> SandboxView {
        let session_api_key = self.current_key(&record).unwrap_or_default();
        let scheme = if self.options.disable_ssl {
            "http"
        } else {
            "https"
        };
        SandboxView {
            url: self.driver.url(&record).unwrap_or_else(|| {
                format!(
                    "{scheme}://{}{}{}",
                    record.runtime_id, self.options.separator, self.options.base_url
                )
            }),
            session_api_key,
            record,
        }
    }

    /// The sandbox's session key, when it still derives from the secret in use.
    pub(super) fn current_key(&self, record: &StoredSandbox) -> Option<String> {
        let key = self.keys.key(&record.runtime_id, &record.key_nonce);
        (session_key_digest(&key) == record.key_sha256).then_some(key)
    }

    /// A new sandbox record, starting now.
    pub(super) fn record(
        &self,
        spec: SandboxSpec,
        pool: Option<String>,
        session: Option<String>,
    ) -> StoredSandbox {
        let runtime_id = random_hex(10);
        let key_nonce = random_hex(16);
        let now = self.clock.now_ms();
        StoredSandbox {
            claim_key: claim_key(&spec),
            key_sha256: session_key_digest(&self.keys.key(&runtime_id, &key_nonce)),
            runtime_id,
            version: 1,
            session_id: session,
            pool,
            spec,
            state: SandboxState::Starting,
            status_detail: None,
            key_nonce,
            created_at_ms: now,
            changed_at_ms: now,
            restarts: Restarts::default(),
            slot_failures: 0,
            personalised: false,
            active_at_ms: 0,
            timeline: None,
            source_address: None,
        }
    }

    /// A sandbox for a warm pool's slot whose sandboxes failed `slot_failures` times in
    /// a row before, launched as [`Self::launch_record`] does. `fence`: the reconciler's
    /// lease, for the writes of a pass.
    pub(crate) async fn launch_slot(
        &self,
        spec: SandboxSpec,
        pool: Option<String>,
        session: Option<String>,
        slot_failures: u32,
        fence: Option<&Fence>,
    ) -> SandboxResult<Launched> {
        let record = StoredSandbox {
            slot_failures,
            ..self.record(spec, pool, session)
        };
        self.launch_record(record, fence).await
    }

    /// Records the new sandbox `record`, issues its key and asks the platform for it; a
    /// platform failure answers the record as it was left (in error, saying why; `None`
    /// if gone since), with the platform's error. `fence`: see [`Self::launch_slot`].
    pub(super) async fn launch_record(
        &self,
        record: StoredSandbox,
        fence: Option<&Fence>,
    ) -> SandboxResult<Launched> {
        self.admit(&record.spec).map_err(SandboxError::Refused)?;
        self.store
            .session_keys
            .put_session_key(&record.key_sha256, &record.runtime_id)
            .await?;
        if !self
            .store
            .sandboxes
            .put_sandbox(None, &record, fence)
            .await?
        {
            return Err(SandboxError::Contention);
        }
        let keys = self.keys.keys(&record.runtime_id, &record.key_nonce);
        if let Err(err) = self.driver.create(&record, &keys).await {
            let detail = format!("cannot create the sandbox: {err}");
            let failed = self
                .update(
                    record,
                    |record| {
                        record.state = SandboxState::Error;
                        record.status_detail = Some(detail.clone());
                    },
                    fence,
                )
                .await?;
            return Ok(Err((failed, err)));
        }
        Ok(Ok(record))
    }

    /// Writes `change` applied to `record`, re-reading and re-applying it when another
    /// writer got there first. `None`: the sandbox is gone. `fence`: see
    /// [`Self::launch_slot`].
    pub(super) async fn update(
        &self,
        mut record: StoredSandbox,
        change: impl Fn(&mut StoredSandbox),
        fence: Option<&Fence>,
    ) -> SandboxResult<Option<StoredSandbox>> {
        for _ in 0..CAS_ATTEMPTS {
            let mut next = record.clone();
            change(&mut next);
            if next.state != record.state {
                next.changed_at_ms = self.clock.now_ms();
            }
            next.version = record.version + 1;
            if self
                .store
                .sandboxes
                .put_sandbox(Some(&record), &next, fence)
                .await?
            {
                // The one writer of this change counts the time the state it left lasted.
                ledger::count_time(&self.store, &record, &next, self.options.prices).await;
                return Ok(Some(next));
            }
            match self.store.sandboxes.sandbox(&record.runtime_id).await? {
                Some(current) => record = current,
                None => return Ok(None),
            }
        }
        Err(SandboxError::Contention)
    }

    /// `records` with what the platform says of the live ones written back (and, on a
    /// start's timeline, when it was first seen running). `fence`: see
    /// [`Self::launch_slot`].
    pub async fn refresh(
        &self,
        records: Vec<StoredSandbox>,
        fence: Option<&Fence>,
    ) -> SandboxResult<Vec<StoredSandbox>> {
        let live: Vec<_> = records
            .iter()
            .filter(|record| record.state.is_live())
            .cloned()
            .collect();
        if live.is_empty() {
            return Ok(records);
        }
        let mut observed = self.driver.observe(&live).await?;
        let now = self.clock.now_ms();
        let mut refreshed = Vec::with_capacity(records.len());
        for record in records {
            let Some(seen) = observed
                .remove(&record.runtime_id)
                .filter(|_| record.state.is_live())
            else {
                refreshed.push(record);
                continue;
            };
            let seen = self.timed_out(&record, seen, now);
            let running = seen.state == SandboxState::Running;
            let timed = timeline::runs_untimed(&record, seen.state);
            // An address the platform no longer says (a pod between IPs) is kept until it
            // says another: the index drops it once the sandbox is no longer live.
            let address = seen
                .source_address
                .clone()
                .or_else(|| record.source_address.clone());
            if seen.state == record.state
                && seen.detail == record.status_detail
                && seen.restarts == record.restarts
                && address == record.source_address
                && !(running && record.slot_failures > 0)
                && !timed
            {
                refreshed.push(record);
                continue;
            }
            if let Some(updated) = self
                .update(
                    record,
                    |record| {
                        record.state = seen.state;
                        record.status_detail = seen.detail.clone();
                        record.restarts = seen.restarts.clone();
                        record.source_address.clone_from(&address);
                        if running {
                            // Its slot works again: a later failure starts a new backoff.
                            record.slot_failures = 0;
                        }
                        timeline::seen_running(record, now);
                    },
                    fence,
                )
                .await?
            {
                if timed
                    && updated.timeline.as_ref().and_then(|t| t.running_at_ms)
                        == updated.timeline.as_ref().map(|t| now.max(t.started_at_ms))
                {
                    timeline::observe(&updated, Phase::Running);
                }
                refreshed.push(updated);
            }
        }
        Ok(refreshed)
    }

    /// `seen`, or, when it says that `record` is still starting past the start timeout,
    /// an error with the platform's last reason: a pod that can never start (an image
    /// that cannot be pulled or run as the user asked, a pod no node takes) fails where
    /// the caller looks, rather than staying `starting` for ever.
    fn timed_out(&self, record: &StoredSandbox, seen: Observed, now: i64) -> Observed {
        let timeout = self.options.start_timeout;
        let starting_since = if record.state == SandboxState::Starting {
            record.changed_at_ms
        } else {
            now
        };
        let limit = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
        if seen.state != SandboxState::Starting || now.saturating_sub(starting_since) < limit {
            return seen;
        }
        let why = seen
            .detail
            .as_deref()
            .unwrap_or("the platform gives no reason");
        Observed {
            state: SandboxState::Error,
            detail: Some(format!(
                "not running {} s after it was started (SANDBOX_START_TIMEOUT): {why}",
                timeout.as_secs()
            )),
            restarts: seen.restarts,
            source_address: seen.source_address,
        }
    }

    /// Up to `limit` sandboxes of a sweep index placed there at or before `until_ms`,
    /// less the stale hits.
    async fn swept(
        &self,
        index: SweepIndex,
        until_ms: i64,
        limit: usize,
    ) -> SandboxResult<Vec<StoredSandbox>> {
        let hits = self
            .store
            .sandboxes
            .swept_sandboxes(index, until_ms, limit)
            .await?;
        Ok(hits
            .into_iter()
            .filter(|record| {
                record
                    .sweep_index()
                    .is_some_and(|(belongs, _)| belongs == index)
            })
            .collect())
    }

    /// Every unclaimed sandbox, in any state: the pools' members and the culls under way.
    pub async fn pooled(&self) -> SandboxResult<Vec<StoredSandbox>> {
        self.swept(SweepIndex::Pooled, i64::MAX, usize::MAX).await
    }

    /// The sandbox of `session_id`, as the platform sees it now.
    pub async fn session(&self, session_id: &str) -> SandboxResult<Option<StoredSandbox>> {
        let Some(record) = self.store.sandboxes.sandbox_for_session(session_id).await? else {
            return Ok(None);
        };
        Ok(self.refresh(vec![record], None).await?.pop())
    }

    pub(super) async fn by_id(&self, runtime_id: &str) -> SandboxResult<StoredSandbox> {
        let record = self.store.sandboxes.sandbox(runtime_id).await?;
        record
            .filter(|record| record.session_id.is_some())
            .ok_or_else(|| SandboxError::NotFound(format!("Runtime {runtime_id} not found")))
    }

    /// Every claimed sandbox still known, newest first.
    pub async fn list(&self) -> SandboxResult<Vec<StoredSandbox>> {
        let claimed = self
            .store
            .sandboxes
            .sandboxes()
            .await?
            .into_iter()
            .filter(|record| record.session_id.is_some())
            .collect();
        let mut listed = self.refresh(claimed, None).await?;
        listed.sort_by_key(|record| std::cmp::Reverse(record.created_at_ms));
        Ok(listed)
    }

    /// Admits one start of the runtime API key, or refuses it with the quota it exceeds;
    /// the admission counts as held until dropped.
    pub(super) async fn admit_start(
        &self,
        session: &str,
    ) -> SandboxResult<Option<quota::Admission<'_>>> {
        if !self.quotas.any() {
            return Ok(None);
        }
        let records = self.store.sandboxes.sandboxes().await?;
        self.quotas
            .admit(&quota::held(&records), session)
            .await
            .map(Some)
    }

    /// Waits until a claim takes a warm sandbox in this process (or returns at once for a
    /// claim made while nobody waited).
    pub async fn claimed(&self) {
        self.claimed.notified().await;
    }
}

pub fn state_name(state: SandboxState) -> &'static str {
    match state {
        SandboxState::Starting => "starting",
        SandboxState::Running => "running",
        SandboxState::Paused => "paused",
        SandboxState::Stopped => "stopped",
        SandboxState::Error => "error",
    }
}
