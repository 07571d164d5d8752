//! The gateway's virtual keys in Redis. Every key below shares the hash tag
//! `{gateway-keys}`, so that the script that adds spend checks the key still exists on
//! the same Cluster slot:
//!
//! - `sandgate:{gateway-keys}:records`: a hash, token → the key's JSON;
//! - `sandgate:{gateway-keys}:spend:<token>`: a hash, `window` and its `spend`;
//! - `sandgate:{gateway-keys}:session:<token>:<session>`: a session's spend, expiring
//!   [`crate::keys::SESSION_SPEND_TTL_MS`] after its last call;
//! - `sandgate:{gateway-keys}:owned:<kind>:<id>`: the tokens of a user's, a team's or an
//!   alias's keys (see `key_owners`).
//!
//! A call reads its key and counters in one round trip (`key_for_call`), which the gateway
//! keeps until a change of a key's record is published on `KEYS_CHANGED` (every replica
//! follows it), so that most calls make none. Spend changes are not published: the
//! counters kept only refuse early a call over budget; the store's admission judges.

use async_trait::async_trait;
use tokio::sync::watch;

use super::{RedisStore, corrupt, unavailable};
use crate::StoreResult;
use crate::admission::{Admission, BudgetScope, Refusal, Settlement};
use crate::keys::{KeyOwner, KeyStore, SpendCounters, StoredKey, oldest_first};

pub(super) const RECORDS: &str = "sandgate:{gateway-keys}:records";
/// A Pub/Sub channel told of every change of a key's record (written or deleted).
const KEYS_CHANGED: &str = "sandgate:gateway-keys:changed";

/// Tells every replica that a key's record changed. A notification that fails only
/// leaves their kept reads to age out (30 s at most).
pub(super) async fn tell_replicas(connection: &mut super::Connection) {
    publish(connection, KEYS_CHANGED).await;
}

/// Tells every replica following `channel` (see `RedisStore::followed`) of a change.
pub(super) async fn publish(connection: &mut super::Connection, channel: &str) {
    if let Err(err) = redis::cmd("PUBLISH")
        .arg(channel)
        .arg("")
        .query_async::<()>(connection)
        .await
    {
        tracing::warn!(error = %err, channel, "cannot tell other replicas of a change");
    }
}

pub(super) fn spend_key(token: &str) -> String {
    format!("sandgate:{{gateway-keys}}:spend:{token}")
}

pub(super) fn session_key(token: &str, session: &str) -> String {
    format!("sandgate:{{gateway-keys}}:session:{token}:{session}")
}

fn parse_spend(value: Option<String>) -> f64 {
    value
        .and_then(|value| value.parse::<f64>().ok())
        .filter(|spend| spend.is_finite())
        .unwrap_or(0.0)
}

#[async_trait]
impl KeyStore for RedisStore {
    async fn put_key(&self, key: &StoredKey, create: bool) -> StoreResult<bool> {
        self.put_key_indexed(key, create).await
    }

    async fn get_key(&self, token: &str) -> StoreResult<Option<StoredKey>> {
        let mut connection = self.connection();
        let data: Option<Vec<u8>> = redis::cmd("HGET")
            .arg(RECORDS)
            .arg(token)
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        data.map(|data| serde_json::from_slice(&data).map_err(corrupt))
            .transpose()
    }

    async fn list_keys(&self) -> StoreResult<Vec<StoredKey>> {
        let mut keys: Vec<StoredKey> = self.all_records(RECORDS).await?;
        oldest_first(&mut keys);
        Ok(keys)
    }

    async fn keys_of(&self, owner: &KeyOwner) -> StoreResult<Vec<StoredKey>> {
        self.owned_keys(owner).await
    }

    async fn delete_keys(&self, tokens: &[String]) -> StoreResult<Vec<String>> {
        let owner_sets = self.owner_sets_of(tokens).await?;
        let mut pipe = redis::pipe();
        pipe.atomic();
        for (token, sets) in tokens.iter().zip(&owner_sets) {
            pipe.cmd("HDEL").arg(RECORDS).arg(token);
            pipe.cmd("DEL").arg(spend_key(token)).ignore();
            for set in sets {
                pipe.cmd("SREM").arg(set).arg(token).ignore();
            }
        }
        let mut connection = self.write_connection();
        let removed: Vec<i64> = pipe
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        let deleted: Vec<String> = tokens
            .iter()
            .zip(removed)
            .filter(|(_, removed)| *removed == 1)
            .map(|(token, _)| token.clone())
            .collect();
        if !deleted.is_empty() {
            self.replicated(&mut connection).await?;
            tell_replicas(&mut connection).await;
        }
        // A deleted key's session counters expire on their own.
        Ok(deleted)
    }

    async fn key_for_call(
        &self,
        token: &str,
        session: Option<&str>,
    ) -> StoreResult<Option<(StoredKey, SpendCounters)>> {
        // One round trip, on one slot: the key, its counter, the session's.
        let mut pipe = redis::pipe();
        pipe.cmd("HGET").arg(RECORDS).arg(token);
        pipe.cmd("HMGET")
            .arg(spend_key(token))
            .arg("window")
            .arg("spend");
        if let Some(session) = session {
            pipe.cmd("GET").arg(session_key(token, session));
        }
        let mut connection = self.connection();
        type Read = (
            Option<Vec<u8>>,
            (Option<u64>, Option<String>),
            Option<String>,
        );
        let (record, (window, spent), session_spent): Read = if session.is_some() {
            pipe.query_async(&mut connection)
                .await
                .map_err(unavailable)?
        } else {
            let (record, counter): (Option<Vec<u8>>, (Option<u64>, Option<String>)) = pipe
                .query_async(&mut connection)
                .await
                .map_err(unavailable)?;
            (record, counter, None)
        };
        let Some(record) = record else {
            return Ok(None);
        };
        let key = serde_json::from_slice(&record).map_err(corrupt)?;
        Ok(Some((
            key,
            SpendCounters {
                window,
                spent: parse_spend(spent),
                session: parse_spend(session_spent),
            },
        )))
    }

    async fn admit_up_to(&self, admission: &Admission) -> StoreResult<Result<Vec<f64>, Refusal>> {
        super::admission::admit(self, admission).await
    }

    async fn settle(&self, settlement: &Settlement) -> StoreResult<()> {
        super::admission::settle(self, settlement).await
    }

    async fn budget_spend(&self, scopes: &[(BudgetScope, u64)]) -> StoreResult<Vec<f64>> {
        super::admission::budget_spend(self, scopes).await
    }

    async fn set_budget_spend(
        &self,
        scope: &BudgetScope,
        window: u64,
        spend: f64,
    ) -> StoreResult<()> {
        super::admission::set_budget_spend(self, scope, window, spend).await
    }

    fn key_changes(&self) -> watch::Receiver<Option<u64>> {
        self.followed(&self.key_changes, KEYS_CHANGED)
    }
}
