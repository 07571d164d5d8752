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

/// Counters of attempts per key (e.g. a client's logins) in fixed windows that open with
/// a key's first hit. Kept in the store so that every replica counts together.
#[async_trait]
pub trait RateLimitStore: Send + Sync + 'static {
    /// Counts one hit on `key`. The first hit opens a window of `window`; once it has
    /// passed, the next hit opens a new one.
    async fn hit(&self, key: &str, window: Duration) -> StoreResult<RateCount>;
}
