//! What the model gateway keeps: models added through `/model/new`, and the spend log.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::StoreResult;

/// A model entry added through the API (spec 2.4). The key is needed to call the
/// upstream, so it is kept; it is never listed back.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredModel {
    pub model_name: String,
    /// Upstream model with its routing prefix.
    pub model: String,
    pub api_base: String,
    pub api_key: String,
    /// Milliseconds since the epoch; entries are listed in the order they were added.
    pub added_at_ms: i64,
    /// LiteLLM's `model_info` of the entry (its prices, above all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_info: Option<serde_json::Value>,
}

impl std::fmt::Debug for StoredModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredModel")
            .field("model_name", &self.model_name)
            .field("model", &self.model)
            .field("api_base", &self.api_base)
            .field("added_at_ms", &self.added_at_ms)
            .finish_non_exhaustive()
    }
}

/// Models added through the API, per configuration: `scope` is a digest of the gateway's
/// configuration, so a redeployed configuration starts without them (design.md).
#[async_trait]
pub trait ModelStore: Send + Sync + 'static {
    /// Adds `model`, replacing an added one of the same name.
    async fn add_model(&self, scope: &str, model: &StoredModel) -> StoreResult<()>;

    /// The added models, oldest first.
    async fn added_models(&self, scope: &str) -> StoreResult<Vec<StoredModel>>;

    /// The model added under `name`, if one is: one lookup, whatever else was added.
    async fn added_model(&self, scope: &str, name: &str) -> StoreResult<Option<StoredModel>>;

    /// A generation that moves on every addition, this replica's or another's (on Redis,
    /// within milliseconds, by a notification), so that a replica may keep the added
    /// models between calls and read them again once it moves. `None` while additions
    /// could go unseen (the notifications are down): then nothing may be kept.
    fn model_changes(&self) -> watch::Receiver<Option<u64>>;
}

/// One served chat completion: metadata only, never prompt or response content.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SpendLogEntry {
    pub request_id: String,
    pub started_at_ms: i64,
    /// The name the client asked for.
    pub model: String,
    /// The model sent upstream.
    pub upstream_model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    /// Of the input, tokens read from the provider's cache, and written to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
    pub latency_ms: u64,
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// `x-gateway-spend-logs-metadata`, parsed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Value>,
    /// The API called (LiteLLM's `call_type`); none in entries written before it was
    /// recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_type: Option<String>,
    /// The call's cost, by its entry's prices; none when the entry has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<f64>,
    /// The virtual key that called: its token (sha256 hex) and alias; none for the master
    /// key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_alias: Option<String>,
    /// The virtual key's user and team, when it has them (LiteLLM's `user` and `team_id`
    /// of a spend log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_user_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_id: Option<String>,
}

/// How many spend log entries a store keeps by default, about: older ones are dropped as
/// new ones arrive, so the log never grows without bound.
pub const SPEND_LOG_RETENTION: usize = 100_000;

/// How much of the spend log is kept: at most `max_entries` (about, on Redis), none older
/// than `max_age_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpendLogRetention {
    pub max_entries: usize,
    pub max_age_ms: i64,
}

impl Default for SpendLogRetention {
    fn default() -> Self {
        Self {
            max_entries: SPEND_LOG_RETENTION,
            max_age_ms: 30 * 24 * 3600 * 1000,
        }
    }
}

/// The spend log: append-only, bounded, read newest first.
#[async_trait]
pub trait SpendLogStore: Send + Sync + 'static {
    /// Appends `entries`, in order, in one round trip, and drops what `retention` no
    /// longer keeps.
    async fn append_spend_logs(
        &self,
        entries: &[SpendLogEntry],
        retention: SpendLogRetention,
    ) -> StoreResult<()>;

    /// Up to `limit` entries, newest first.
    async fn spend_logs(&self, limit: usize) -> StoreResult<Vec<SpendLogEntry>>;
}
