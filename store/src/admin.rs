//! What runtime management keeps: login challenges, the warm runtime configurations
//! saved through the API, and the counters that limit login attempts per client.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::StoreResult;

/// An issued login challenge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredChallenge {
    /// The salt sent with it (ASCII hex).
    pub salt: String,
    /// The PBKDF2 iterations the answer must use.
    pub iterations: u32,
    /// Milliseconds since the epoch after which the challenge is refused.
    pub expires_at_ms: i64,
}

/// The body of a warm runtime configuration (spec 2.1); its name is the key it is kept
/// under. The same shape is read from the installer's file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredWarmConfig {
    pub image: String,
    pub working_dir: String,
    pub command: Vec<String>,
    pub environment: BTreeMap<String, String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "sandgate_proto::json::optional_integer"
    )]
    pub count: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "sandgate_proto::json::optional_integer"
    )]
    pub run_as_user: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "sandgate_proto::json::optional_integer"
    )]
    pub run_as_group: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "sandgate_proto::json::optional_integer"
    )]
    pub fs_group: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuse_s3_mount: Option<bool>,
}

/// The saved configurations, with the version they were read at.
#[derive(Clone, Debug, Default)]
pub struct WarmConfigSnapshot {
    pub version: u64,
    /// Ordered by name.
    pub configs: Vec<(String, StoredWarmConfig)>,
}

/// How a save ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PutWarmConfig {
    Saved,
    /// Another saved configuration, of this name, already uses the image.
    ImageTaken {
        by: String,
    },
}

/// Login challenges. Taking one is atomic in the store, so of any number of concurrent
/// logins with one challenge, across replicas too, exactly one gets it.
#[async_trait]
pub trait ChallengeStore: Send + Sync + 'static {
    /// Keeps `record` under `challenge`; the store may forget it after `ttl`.
    async fn put_challenge(
        &self,
        challenge: &str,
        record: &StoredChallenge,
        ttl: Duration,
    ) -> StoreResult<()>;

    /// Removes the challenge and returns what it held, if it was there.
    async fn take_challenge(&self, challenge: &str) -> StoreResult<Option<StoredChallenge>>;
}

/// Warm runtime configurations saved through the API (`source: db`).
#[async_trait]
pub trait WarmConfigStore: Send + Sync + 'static {
    /// Changes whenever a configuration is saved or deleted (by any replica), so a reader
    /// can keep a snapshot until it does.
    async fn warm_config_version(&self) -> StoreResult<u64>;

    async fn warm_configs(&self) -> StoreResult<WarmConfigSnapshot>;

    /// Creates or replaces `name`, unless another saved configuration uses the same image
    /// (checked and written atomically).
    async fn put_warm_config(
        &self,
        name: &str,
        config: &StoredWarmConfig,
    ) -> StoreResult<PutWarmConfig>;

    /// `false` when there was no saved configuration of that name.
    async fn delete_warm_config(&self, name: &str) -> StoreResult<bool>;
}

/// A hit counted by [`RateLimitStore::hit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateCount {
    /// Hits in the current window, this one included.
    pub count: u64,
    /// Until the window ends and the count starts again.
    pub resets_in: Duration,
}

/// A start asked of a runtime API key's quotas ([`RateLimitStore::admit_start`]).
#[derive(Clone, Copy, Debug)]
pub struct StartQuota<'a> {
    /// Whose quotas: the key's name.
    pub key: &'a str,
    /// The session the start is for.
    pub session: &'a str,
    /// The sessions the sandbox records show held (starting or running), read just before.
    pub held: &'a [String],
    /// `MAX_RUNTIMES`: sessions held at once, at most.
    pub max_runtimes: Option<u64>,
    /// `SANDBOX_START_RATE`: starts admitted in any window of this length, at most.
    pub start_rate: Option<(u32, Duration)>,
    /// How long an admitted start counts as held whatever the records show: longer than a
    /// start takes to be stored.
    pub pending_for: Duration,
}

/// What [`RateLimitStore::admit_start`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartAdmission {
    /// Admitted: it counts as held (and as a start in the rate's window).
    Admitted,
    /// Refused: the key holds this many sessions, its `max_runtimes`.
    MaxRuntimes { holding: u64 },
    /// Refused: the key made its `start_rate` starts in the window.
    StartRate,
}

/// Counters of attempts per key (e.g. a client's logins) in fixed windows that open with
/// a key's first hit. Kept in the store so that every replica counts together. And the
/// runtime API key's quotas, admitted atomically in the store so that they are exact
/// across replicas.
#[async_trait]
pub trait RateLimitStore: Send + Sync + 'static {
    /// Counts one hit on `key`. The first hit opens a window of `window`; once it has
    /// passed, the next hit opens a new one.
    async fn hit(&self, key: &str, window: Duration) -> StoreResult<RateCount>;

    /// The hits on `key` in its current window, without counting one: 0 when its window
    /// has passed or it was never hit.
    async fn count(&self, key: &str) -> StoreResult<u64>;

    /// Admits a start under a key's quotas, atomically against every other replica's:
    /// the sessions held are those `quota.held` names and the starts admitted in the last
    /// `pending_for` that it does not; the rate counts the starts admitted in the last
    /// window (a refused start counts for nothing).
    async fn admit_start(&self, quota: &StartQuota<'_>) -> StoreResult<StartAdmission>;

    /// `session`'s admitted start holds nothing (it failed, or its sandbox was paused or
    /// stopped); the starts it counts in the rate's window stay.
    async fn release_start(&self, key: &str, session: &str) -> StoreResult<()>;
}
