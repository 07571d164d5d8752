//! What the Sandboxes service and the warm-pool reconciler keep: one record per sandbox,
//! indexed for claims (warm sandboxes by the spec they match), for sessions and for the
//! reconciler's sweeps, and the lease that lets one reconciler act at a time across
//! replicas.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::StoreResult;
use crate::timeline::Timeline;

/// What a sandbox runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SandboxSpec {
    pub image: String,
    pub command: Vec<String>,
    pub working_dir: String,
    pub environment: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs_group: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuse_s3_mount: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_factor: Option<f64>,
}

/// A sandbox's state, as the API reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    Starting,
    Running,
    Paused,
    Stopped,
    Error,
}

impl SandboxState {
    /// Whether the sandbox exists on the platform and is (or will be) usable.
    pub fn is_live(self) -> bool {
        matches!(self, Self::Starting | Self::Running)
    }
}

/// How often the platform restarted a sandbox's workload (its container crashed, or was
/// killed for memory), and why: the legacy runtime API's `restart_count` and
/// `restart_reasons`, which clients log while they wait for a sandbox.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restarts {
    pub count: u32,
    /// The most recent reasons, oldest first (`OOMKilled`, `Error (exit code 1)`).
    pub reasons: Vec<String>,
}

impl Restarts {
    pub fn is_none(&self) -> bool {
        self.count == 0 && self.reasons.is_empty()
    }
}

/// One sandbox. `version` grows by one with every write, for compare-and-swap.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredSandbox {
    pub runtime_id: String,
    pub version: u64,
    /// The session it runs; `None` while it waits, warm, in its pool.
    pub session_id: Option<String>,
    /// The warm runtime configuration it was started for; `None` for a cold start.
    pub pool: Option<String>,
    /// A digest of the parts of the spec a start must match to claim it.
    pub claim_key: String,
    pub spec: SandboxSpec,
    pub state: SandboxState,
    pub status_detail: Option<String>,
    /// sha256 hex of its current session key.
    pub key_sha256: String,
    /// What its current session key is derived from (rotated by a resume).
    pub key_nonce: String,
    pub created_at_ms: i64,
    /// When `state` last changed: a paused sandbox's idle time counts from here.
    pub changed_at_ms: i64,
    /// What the platform last said of its workload's restarts.
    #[serde(default, skip_serializing_if = "Restarts::is_none")]
    pub restarts: Restarts,
    /// For a warm sandbox: how many sandboxes of its pool slot failed in a row before it
    /// was made, so that its replacement waits longer should it fail too (the reconciler's
    /// backoff); back to 0 once it runs.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub slot_failures: u32,
    /// Started dormant in a warm pool and personalised at its claim: its workload was made
    /// with the pool's environment, and a resume starts it with `spec`'s, the start's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub personalised: bool,
    /// When its conversation last showed activity (a webhook, an event batch, a gateway
    /// call with its session), as last written: throttled, so up to a fraction of
    /// `RUNTIME_IDLE_SECONDS` behind. 0: none since it was claimed.
    #[serde(default, skip_serializing_if = "is_zero_ms")]
    pub active_at_ms: i64,
    /// The timeline of the start that claimed or created it (`timeline.rs`); `None` for a
    /// warm sandbox not yet claimed, and for records written before timelines were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Timeline>,
    /// The address this sandbox's connections reach Sandgate from: its pod's IP on
    /// Kubernetes, its own loopback address for a process sandbox; how a call is known to
    /// come from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_address: Option<String>,
}

fn is_zero_ms(ms: &i64) -> bool {
    *ms == 0
}

fn is_zero(count: &u32) -> bool {
    *count == 0
}

/// What the reconciler sweeps, each kept as an index of its own, so that a pass reads
/// the sandboxes it may act on rather than every one still remembered: claimed sandboxes
/// that run are read only once idle, and stopped ones once their retention is over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SweepIndex {
    /// Unclaimed sandboxes in any state, by creation: the pools' members, and culls
    /// still under way.
    Pooled,
    /// Claimed sandboxes that are paused, by when they paused: deleted after
    /// `RUNTIME_DEAD_SECONDS`.
    Paused,
    /// Claimed sandboxes that are stopped, by when they stopped: forgotten after the
    /// stopped retention.
    Stopped,
    /// Claimed sandboxes that run, by their last activity (or when they started running,
    /// if later): paused after `RUNTIME_IDLE_SECONDS`.
    Running,
}

impl SweepIndex {
    pub const ALL: [Self; 4] = [Self::Pooled, Self::Paused, Self::Stopped, Self::Running];

    /// Its place in [`Self::ALL`], which the backends store in place of its name.
    pub(crate) fn ordinal(self) -> u8 {
        self as u8
    }

    /// Its name in store keys.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pooled => "pooled",
            Self::Paused => "paused",
            Self::Stopped => "stopped",
            Self::Running => "running",
        }
    }
}

impl StoredSandbox {
    /// The claim index it belongs to: warm, unclaimed and live sandboxes only.
    pub fn warm_index(&self) -> Option<&str> {
        (self.session_id.is_none() && self.state.is_live()).then_some(self.claim_key.as_str())
    }

    /// The address index entry it has: its `source_address` while it is live (starting
    /// or running). A stopped sandbox's address may be another's by then (a pod's IP is
    /// given to the next pod), so it leaves the index.
    pub fn address_index(&self) -> Option<&str> {
        self.source_address
            .as_deref()
            .filter(|address| !address.is_empty() && self.state.is_live())
    }

    /// Whether writing `next` over `previous` (`None`: none stored, or deleted) changes
    /// what [`SandboxStore::sandbox_at_address`] answers for either's address: a sandbox
    /// there or none, and its session. What moves [`SandboxStore::address_changes`].
    pub fn moves_address(previous: Option<&Self>, next: Option<&Self>) -> bool {
        fn seen(record: Option<&StoredSandbox>) -> Option<(&str, Option<&str>)> {
            record.and_then(|record| Some((record.address_index()?, record.session_id.as_deref())))
        }
        seen(previous) != seen(next)
    }

    /// The sweep index it belongs to, and its position there (milliseconds since the
    /// epoch); `None` for a claimed sandbox that is starting or failed.
    pub fn sweep_index(&self) -> Option<(SweepIndex, i64)> {
        match (&self.session_id, self.state) {
            (None, _) => Some((SweepIndex::Pooled, self.created_at_ms)),
            (Some(_), SandboxState::Paused) => Some((SweepIndex::Paused, self.changed_at_ms)),
            (Some(_), SandboxState::Stopped) => Some((SweepIndex::Stopped, self.changed_at_ms)),
            (Some(_), SandboxState::Running) => Some((
                SweepIndex::Running,
                self.changed_at_ms.max(self.active_at_ms),
            )),
            (Some(_), SandboxState::Starting | SandboxState::Error) => None,
        }
    }
}

/// Sandboxes, and the reconciler's lease.
/// What a lease holder's writes carry so that none lands once the lease has passed on:
/// the lease and the token its holder got ([`SandboxStore::acquire_lease`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    pub lease: String,
    pub token: u64,
}

#[async_trait]
pub trait SandboxStore: Send + Sync + 'static {
    /// Every sandbox the store knows.
    async fn sandboxes(&self) -> StoreResult<Vec<StoredSandbox>>;

    async fn sandbox(&self, runtime_id: &str) -> StoreResult<Option<StoredSandbox>>;

    /// The sandbox running `session_id`.
    async fn sandbox_for_session(&self, session_id: &str) -> StoreResult<Option<StoredSandbox>>;

    /// The live sandbox whose connections come from `address` (its `source_address`, as
    /// written: an IP address in its canonical text), by an index of the live sandboxes'
    /// addresses (one lookup, not a scan); `None` when no live sandbox has it. The record
    /// returned is read after the index: callers may rely on its `address_index()` being
    /// `address`.
    async fn sandbox_at_address(&self, address: &str) -> StoreResult<Option<StoredSandbox>>;

    /// A generation that moves on with every write that changes what
    /// [`Self::sandbox_at_address`] answers ([`StoredSandbox::moves_address`]), this
    /// replica's or another's (on Redis, within milliseconds, by a notification), so that
    /// the gateway may keep what it read of an address until it moves. `None` while
    /// changes could go unseen (the notifications are down): then nothing may be kept.
    fn address_changes(&self) -> watch::Receiver<Option<u64>>;

    /// Up to `limit` sandboxes of `index` placed there at or before `until_ms`, first
    /// placed first. Hits may be stale: callers check `sweep_index` of what they get.
    async fn swept_sandboxes(
        &self,
        index: SweepIndex,
        until_ms: i64,
        limit: usize,
    ) -> StoreResult<Vec<StoredSandbox>>;

    /// Puts every record in the sweep index it belongs to, and drops members that do not
    /// belong: a repair for records written without the indexes (by a release before
    /// them, still running beside this one during an upgrade). Returns the entries it
    /// had to add or drop. Memory stays bounded whatever the number of records. A backend
    /// that no other process writes has nothing to repair.
    async fn reindex_sandboxes(&self) -> StoreResult<usize>;

    /// Up to `limit` warm sandboxes that a start with this claim key may take, drawn at
    /// random so that concurrent claims spread over the pool. Hits may be stale: the
    /// claim's compare-and-swap decides.
    async fn warm_sandboxes(
        &self,
        claim_key: &str,
        limit: usize,
    ) -> StoreResult<Vec<StoredSandbox>>;

    /// Writes `next` (whose version is one more than the stored one) when the stored
    /// version is `next.version - 1` (0: none stored), moving its index entries from
    /// `previous` (the record read at that version) to `next`. `Ok(false)`: another
    /// writer got there first. With `fence`, only while its lease's token is still the
    /// current one ([`StoreError::Fenced`](crate::StoreError::Fenced) otherwise).
    async fn put_sandbox(
        &self,
        previous: Option<&StoredSandbox>,
        next: &StoredSandbox,
        fence: Option<&Fence>,
    ) -> StoreResult<bool>;

    /// Deletes `current` and its index entries when it is still at its version; with
    /// `fence`, only while its lease's token is still the current one.
    async fn delete_sandbox(
        &self,
        current: &StoredSandbox,
        fence: Option<&Fence>,
    ) -> StoreResult<bool>;

    /// Takes the lease `name` for `holder`, or extends it when `holder` has it; `None`
    /// when another holder has it. The lease lapses `ttl` after its last renewal. The
    /// answer is the lease's fencing token: the same while `holder` keeps the lease,
    /// larger each time it passes to a holder (`holder` again after a lapse included).
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> StoreResult<Option<u64>>;

    /// Gives the lease up, when `holder` has it.
    async fn release_lease(&self, name: &str, holder: &str) -> StoreResult<()>;
}
