//! The audit log: every change an operator makes (with the admin's token or the model
//! gateway's master key): warm configurations, keys, teams, users, budgets, added models.
//! Who, what, on what, when and from where; never a secret (the recorders keep to names,
//! ids and limits). Append-only, bounded, read newest first.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::StoreResult;

/// How many entries a store keeps by default: older ones go as new ones arrive.
pub const AUDIT_RETENTION: usize = 100_000;

/// One change.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// The store's id of the entry, increasing with time: the cursor of paging. Empty
    /// until stored.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    pub at_ms: i64,
    /// Who: `admin` (the admin's token), `master key`, or a virtual key's
    /// `key <alias or short token>`.
    pub actor: String,
    /// The client's address, as the edge saw it; none over gRPC without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// What: a dotted name, `warm_config.put`, `key.generate`, `team.update`…
    pub action: String,
    /// On what: a configuration's name, a key's alias or short token, a team's id…
    pub target: String,
    /// The change's limits and names (budgets, models, members), never a key or a value
    /// of an environment.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub detail: serde_json::Value,
}

#[async_trait]
pub trait AuditStore: Send + Sync + 'static {
    /// Appends `entry` (its `id` is the store's to give, and returned) and drops the
    /// oldest entries past `max_entries`.
    async fn append_audit(&self, entry: &AuditEntry, max_entries: usize) -> StoreResult<String>;

    /// Up to `limit` entries older than the one `before` names (all when `None`),
    /// newest first. A `before` that names no entry's id shape reads nothing.
    async fn audit_entries(
        &self,
        before: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<AuditEntry>>;
}

/// Appends `entry` at the default bound. The change it describes is made already: an
/// entry the store refuses is logged and counted (`sandgate_audit_failures_total`), and
/// the change's answer stands.
pub async fn record(audit: &dyn AuditStore, entry: AuditEntry) {
    if let Err(err) = audit.append_audit(&entry, AUDIT_RETENTION).await {
        metrics::counter!("sandgate_audit_failures_total").increment(1);
        tracing::error!(
            error = %err,
            action = %entry.action,
            target = %entry.target,
            "an audit entry was not stored"
        );
    }
}
