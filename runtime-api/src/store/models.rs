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
}

/// How many spend log entries a store keeps, about: older ones are dropped as new ones
/// arrive, so the log never grows without bound.
pub const SPEND_LOG_RETENTION: usize = 100_000;

/// The spend log: append-only, bounded, read newest first.
#[async_trait]
pub trait SpendLogStore: Send + Sync + 'static {
    /// Appends `entries`, in order, in one round trip.
    async fn append_spend_logs(&self, entries: &[SpendLogEntry]) -> StoreResult<()>;

    /// Up to `limit` entries, newest first.
    async fn spend_logs(&self, limit: usize) -> StoreResult<Vec<SpendLogEntry>>;
}
