//! The model gateway's virtual keys: what a key may do (its models, budgets, expiry), kept
//! under the sha256 of the key (the key itself is never stored), and what it has spent.
//!
//! Spend is counted per budget window: a key whose budget resets (`budget_duration`) adds
//! to the counter of the current window, and a counter of an earlier window reads as
//! nothing. A key's spend per session (the session id its calls carry) is counted beside
//! it, for the per-session budget, and forgotten after [`SESSION_SPEND_TTL_MS`] without
//! a call.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::StoreResult;
use crate::admission::{Admission, BudgetScope, Refusal, Settlement};
use crate::orgs::RateLimits;

/// One virtual key, as stored: everything but the key.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StoredKey {
    /// The sha256 hex of the key (LiteLLM's `token`): how the key is found and named.
    pub token: String,
    /// The key abbreviated for display, `sk-...abcd` (LiteLLM's `key_name`).
    pub key_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_alias: Option<String>,
    /// The model names the key may call; empty: every model.
    #[serde(default)]
    pub models: Vec<String>,
    /// The most the key may spend (in each budget window, with `budget_duration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_budget: Option<f64>,
    #[serde(default, flatten)]
    pub period: crate::orgs::BudgetPeriod,
    /// The most one session (the session id its calls carry) may spend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_budget_per_session: Option<f64>,
    /// LiteLLM's rate limits of the key, across replicas.
    #[serde(default, flatten)]
    pub limits: RateLimits,
    /// When the key stops working (milliseconds since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Value>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// What a key belongs to or is named by, as the stores index keys (so that a team's, a
/// user's or an alias's keys are found without reading every key).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KeyOwner {
    User(String),
    Team(String),
    Alias(String),
}

impl KeyOwner {
    /// Whether `key` belongs to (or is named by) this owner.
    pub fn owns(&self, key: &StoredKey) -> bool {
        let field = match self {
            Self::User(_) => &key.user_id,
            Self::Team(_) => &key.team_id,
            Self::Alias(_) => &key.key_alias,
        };
        field.as_deref() == Some(self.id())
    }

    /// The owner's kind, as the stores' index entries name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::User(_) => "user",
            Self::Team(_) => "team",
            Self::Alias(_) => "alias",
        }
    }

    pub fn id(&self) -> &str {
        match self {
            Self::User(id) | Self::Team(id) | Self::Alias(id) => id,
        }
    }
}

impl StoredKey {
    /// Everything this key is indexed under.
    pub fn owners(&self) -> Vec<KeyOwner> {
        [
            self.user_id.clone().map(KeyOwner::User),
            self.team_id.clone().map(KeyOwner::Team),
            self.key_alias.clone().map(KeyOwner::Alias),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// Keys in the order every listing shows them: oldest first.
pub fn oldest_first(keys: &mut [StoredKey]) {
    keys.sort_by(|a, b| (a.created_at_ms, &a.token).cmp(&(b.created_at_ms, &b.token)));
}

/// A key's counters as stored: the caller knows the window it is in.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpendCounters {
    /// The budget window the key's counter counts; `None` before its first spend.
    pub window: Option<u64>,
    /// What it counted in that window.
    pub spent: f64,
    /// What the session asked about spent.
    pub session: f64,
}

impl SpendCounters {
    /// The key's spend in `window`: nothing when its counter counts an earlier one.
    pub fn in_window(&self, window: u64) -> f64 {
        if self.window == Some(window) {
            self.spent
        } else {
            0.0
        }
    }
}

/// How long a session's spend is kept after its last call.
pub const SESSION_SPEND_TTL_MS: i64 = 30 * 24 * 3600 * 1000;

/// A session id as the store keys it: a digest, so that a client's id of any length or
/// content names a bounded key.
pub fn session_digest(session_id: &str) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(session_id.as_bytes())[..16])
}

/// The gateway's virtual keys and their spend.
#[async_trait]
pub trait KeyStore: Send + Sync + 'static {
    /// Stores `key` under its token. With `create`, only if no key has that token:
    /// `Ok(false)` when one does.
    async fn put_key(&self, key: &StoredKey, create: bool) -> StoreResult<bool>;

    async fn get_key(&self, token: &str) -> StoreResult<Option<StoredKey>>;

    /// Every key, oldest first.
    async fn list_keys(&self) -> StoreResult<Vec<StoredKey>>;

    /// The keys of `owner`, oldest first, from an index kept with every write (not a
    /// read of every key): `/team/info`, `/user/info` and `/key/list?user_id=` at any
    /// number of keys.
    async fn keys_of(&self, owner: &KeyOwner) -> StoreResult<Vec<StoredKey>>;

    /// Deletes the keys of `tokens`, with their spend; the tokens that were there.
    async fn delete_keys(&self, tokens: &[String]) -> StoreResult<Vec<String>>;

    /// The key of `token` and its counters, with what `session` (a [`session_digest`])
    /// spent: what a call needs, in one read, always as stored now (a deleted or changed
    /// key is seen at once, on every replica).
    async fn key_for_call(
        &self,
        token: &str,
        session: Option<&str>,
    ) -> StoreResult<Option<(StoredKey, SpendCounters)>>;

    /// Admits a call against every scope of `admission` at once, or refuses it: see
    /// [`crate::admission`]. `Ok(Ok(held))`: admitted, `held[i]` (between its `amount`
    /// and its `most`) taken on scope `i` until [`Self::settle`] releases it or its lease
    /// ends.
    async fn admit_up_to(&self, admission: &Admission) -> StoreResult<Result<Vec<f64>, Refusal>>;

    /// [`Self::admit_up_to`], for a call's own hold: `Ok(None)` when admitted.
    async fn admit(&self, admission: &Admission) -> StoreResult<Option<Refusal>> {
        Ok(self.admit_up_to(admission).await?.err())
    }

    /// Adds the spend of ended calls to their scopes' counters, takes it off the shares
    /// they were admitted against, then releases their holds, in one round trip. Spend of a key (or its session) that is gone is dropped; the
    /// scopes that outlive keys (user, team, member) keep theirs.
    async fn settle(&self, settlement: &Settlement) -> StoreResult<()>;

    /// What each scope spent in its window, as [`Self::settle`] counts it and
    /// [`Self::admit`] judges it (a counter of an earlier window: nothing), in one read.
    async fn budget_spend(&self, scopes: &[(BudgetScope, u64)]) -> StoreResult<Vec<f64>>;

    /// Sets what a scope that outlives keys (a user, a team, a membership) spent in
    /// `window`, as LiteLLM's `/user/update` sets a user's spend: calls that settle after
    /// add to it. Moves the organisations' generation (`OrgStore::org_changes`): the
    /// gateway's shares of budgets, granted on the spend before, are given back.
    async fn set_budget_spend(
        &self,
        scope: &BudgetScope,
        window: u64,
        spend: f64,
    ) -> StoreResult<()>;

    /// A generation that moves on with every change of a key's record (written or
    /// deleted), this replica's or another's (on Redis, within milliseconds, by a
    /// notification), so that a replica may keep what `key_for_call` read until it moves.
    /// Spend does not move it: the counters kept only refuse early a call already over
    /// budget, and [`Self::admit`] judges every budget as stored. `None` while changes
    /// could go unseen (the notifications are down): then nothing may be kept.
    fn key_changes(&self) -> watch::Receiver<Option<u64>>;
}
