//! The gateway's virtual keys in the embedded store.
//!
//! This process is the store's only writer, so the key and the spend counters a call
//! reads before it goes upstream are served from memory once read: no database read,
//! and no thread hand-off, on a call's path. The memory follows every committed change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use super::{EmbeddedStore, key_owners, unavailable};
use crate::admission::{Admission, BudgetScope, Refusal, Settlement};
use crate::keys::{
    KeyOwner, KeyStore, SESSION_SPEND_TTL_MS, SpendCounters, StoredKey, oldest_first,
};
use crate::{StoreError, StoreResult, now_ms};

/// token → the key's JSON.
pub(super) const KEYS: TableDefinition<&str, &[u8]> = TableDefinition::new("gateway_keys");
/// `token` → the window and its spend; `token\0session` → when the session last spent,
/// and what it spent. Each value is two 8-byte little-endian numbers.
pub(super) const KEY_SPEND: TableDefinition<&str, [u8; 16]> =
    TableDefinition::new("gateway_key_spend");

/// Counters kept in memory at most; past it the memory starts again (and reads from the
/// database as it goes).
const MAX_REMEMBERED: usize = 100_000;

/// The keys and spend counters read or written so far, as [`KEYS`] and [`KEY_SPEND`]
/// hold them (a key known not to exist as `None`).
#[derive(Default)]
pub(super) struct SpendMemory(Mutex<Memory>);

#[derive(Default)]
struct Memory {
    keys: HashMap<String, Option<Arc<StoredKey>>>,
    counters: HashMap<String, [u8; 16]>,
}

impl SpendMemory {
    fn key(&self, token: &str) -> Option<Option<Arc<StoredKey>>> {
        self.0.lock().ok()?.keys.get(token).cloned()
    }

    /// What a read found, unless a write got there first (it knows better).
    fn learn_key(&self, token: String, key: Option<Arc<StoredKey>>) {
        if let Ok(mut memory) = self.0.lock() {
            if memory.keys.len() >= MAX_REMEMBERED {
                memory.keys.clear();
            }
            memory.keys.entry(token).or_insert(key);
        }
    }

    fn set_key(&self, key: &StoredKey) {
        if let Ok(mut memory) = self.0.lock() {
            if memory.keys.len() >= MAX_REMEMBERED {
                memory.keys.clear();
            }
            memory
                .keys
                .insert(key.token.clone(), Some(Arc::new(key.clone())));
        }
    }

    pub(super) fn get(&self, name: &str) -> Option<[u8; 16]> {
        self.0.lock().ok()?.counters.get(name).copied()
    }

    pub(super) fn learn(&self, name: String, value: [u8; 16]) {
        if let Ok(mut memory) = self.0.lock() {
            if memory.counters.len() >= MAX_REMEMBERED {
                memory.counters.clear();
            }
            memory.counters.entry(name).or_insert(value);
        }
    }

    pub(super) fn set(&self, changed: Vec<(String, [u8; 16])>) {
        if let Ok(mut memory) = self.0.lock() {
            if memory.counters.len() >= MAX_REMEMBERED {
                memory.counters.clear();
            }
            memory.counters.extend(changed);
        }
    }

    fn forget(&self, tokens: &[String]) {
        if let Ok(mut memory) = self.0.lock() {
            memory
                .counters
                .retain(|name, _| !tokens.iter().any(|token| owned_by(name, token)));
            for token in tokens {
                memory.keys.insert(token.clone(), None);
            }
        }
    }
}

/// The counters of a key and a session, as read at `now_ms`.
fn counters(key: Option<[u8; 16]>, session: Option<[u8; 16]>, now_ms: i64) -> SpendCounters {
    let (window, spent) = key.map(unpack).unwrap_or_default();
    SpendCounters {
        // A counter never written holds zeros: window 0, nothing spent, which reads the
        // same in window 0 and as nothing in any later one.
        window: Some(window),
        spent,
        session: session_spent(session, now_ms),
    }
}

fn owned_by(name: &str, token: &str) -> bool {
    name.strip_prefix(token)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('\0'))
}

pub(super) fn session_name(token: &str, session: &str) -> String {
    format!("{token}\0{session}")
}

pub(super) fn pack(first: u64, second: f64) -> [u8; 16] {
    let mut value = [0; 16];
    value[..8].copy_from_slice(&first.to_le_bytes());
    value[8..].copy_from_slice(&second.to_le_bytes());
    value
}

fn unpack(value: [u8; 16]) -> (u64, f64) {
    let (first, second) = value.split_at(8);
    let mut a = [0; 8];
    let mut b = [0; 8];
    a.copy_from_slice(first);
    b.copy_from_slice(second);
    (u64::from_le_bytes(a), f64::from_le_bytes(b))
}

/// The spend of a key counter in `window`: nothing when it counts an earlier one.
pub(super) fn key_spent(value: Option<[u8; 16]>, window: u64) -> f64 {
    match value.map(unpack) {
        Some((counted, spend)) if counted == window => spend,
        _ => 0.0,
    }
}

/// The spend of a session counter at `now_ms`: nothing once it is forgotten.
pub(super) fn session_spent(value: Option<[u8; 16]>, now_ms: i64) -> f64 {
    match value.map(unpack) {
        Some((touched, spend)) if now_ms - (touched as i64) < SESSION_SPEND_TTL_MS => spend,
        _ => 0.0,
    }
}

fn corrupt(err: serde_json::Error) -> StoreError {
    StoreError::Corrupt(err.to_string())
}

impl EmbeddedStore {
    /// This process is the store's only writer: every change of a key's record passes
    /// here.
    pub(super) fn keys_changed(&self) {
        super::move_on(&self.key_changes);
    }
}

#[async_trait]
impl KeyStore for EmbeddedStore {
    async fn put_key(&self, key: &StoredKey, create: bool) -> StoreResult<bool> {
        let token = key.token.clone();
        let json = serde_json::to_vec(key).map_err(corrupt)?;
        let written = key.clone();
        let stored = self
            .transact(move |txn| {
                let mut keys = txn.open_table(KEYS).map_err(unavailable)?;
                let old = keys
                    .get(token.as_str())
                    .map_err(unavailable)?
                    .map(|data| key_owners::decode(data.value()))
                    .transpose()?;
                if create && old.is_some() {
                    return Ok(false);
                }
                keys.insert(token.as_str(), json.as_slice())
                    .map_err(unavailable)?;
                let mut owners = key_owners::open(txn)?;
                key_owners::reindex(&mut owners, old.as_ref(), Some(&written))?;
                Ok(true)
            })
            .await?;
        if stored {
            self.key_spend_memory.set_key(key);
            self.keys_changed();
        }
        Ok(stored)
    }

    async fn get_key(&self, token: &str) -> StoreResult<Option<StoredKey>> {
        let token = token.to_owned();
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let keys = txn.open_table(KEYS).map_err(unavailable)?;
            keys.get(token.as_str())
                .map_err(unavailable)?
                .map(|data| serde_json::from_slice(data.value()).map_err(corrupt))
                .transpose()
        })
        .await
    }

    async fn list_keys(&self) -> StoreResult<Vec<StoredKey>> {
        let mut keys: Vec<StoredKey> = self.records(KEYS).await?;
        oldest_first(&mut keys);
        Ok(keys)
    }

    async fn keys_of(&self, owner: &KeyOwner) -> StoreResult<Vec<StoredKey>> {
        self.owned_keys(owner).await
    }

    async fn delete_keys(&self, tokens: &[String]) -> StoreResult<Vec<String>> {
        let wanted = tokens.to_vec();
        let deleted = self
            .transact(move |txn| {
                let mut keys = txn.open_table(KEYS).map_err(unavailable)?;
                let mut spend = txn.open_table(KEY_SPEND).map_err(unavailable)?;
                let mut owners = key_owners::open(txn)?;
                let mut deleted = Vec::new();
                for token in wanted {
                    let Some(old) = keys.remove(token.as_str()).map_err(unavailable)? else {
                        continue;
                    };
                    let old = key_owners::decode(old.value())?;
                    key_owners::reindex(&mut owners, Some(&old), None)?;
                    let end = format!("{token}\u{1}");
                    spend
                        .retain_in(token.as_str()..end.as_str(), |name, _| {
                            !owned_by(name, &token)
                        })
                        .map_err(unavailable)?;
                    deleted.push(token);
                }
                Ok(deleted)
            })
            .await?;
        self.key_spend_memory.forget(&deleted);
        self.keys_changed();
        Ok(deleted)
    }

    async fn key_for_call(
        &self,
        token: &str,
        session: Option<&str>,
    ) -> StoreResult<Option<(StoredKey, SpendCounters)>> {
        let session_name = session.map(|session| session_name(token, session));
        let now = now_ms();
        let remembered = (
            self.key_spend_memory.key(token),
            self.key_spend_memory.get(token),
            session_name
                .as_deref()
                .map(|name| self.key_spend_memory.get(name)),
        );
        if let (Some(key), Some(counter), None | Some(Some(_))) = remembered {
            let session = remembered.2.flatten();
            return Ok(key.map(|key| ((*key).clone(), counters(Some(counter), session, now))));
        }
        let token = token.to_owned();
        let (key, counter, session) = self
            .read(move |db| {
                let txn = db.begin_read().map_err(unavailable)?;
                let keys = txn.open_table(KEYS).map_err(unavailable)?;
                let key = keys
                    .get(token.as_str())
                    .map_err(unavailable)?
                    .map(|data| serde_json::from_slice::<StoredKey>(data.value()).map_err(corrupt))
                    .transpose()?;
                let spend = txn.open_table(KEY_SPEND).map_err(unavailable)?;
                // A counter never written reads as nothing spent: remembered so.
                let read = |name: &str| -> StoreResult<[u8; 16]> {
                    Ok(spend
                        .get(name)
                        .map_err(unavailable)?
                        .map_or([0; 16], |value| value.value()))
                };
                let counter = read(&token)?;
                let session = session_name
                    .map(|name| read(&name).map(|value| (name, value)))
                    .transpose()?;
                Ok(((token, key), counter, session))
            })
            .await?;
        let (token, key) = key;
        self.key_spend_memory
            .learn_key(token.clone(), key.clone().map(std::sync::Arc::new));
        self.key_spend_memory.learn(token, counter);
        let session = session.map(|(name, value)| {
            self.key_spend_memory.learn(name, value);
            value
        });
        Ok(key.map(|key| (key, counters(Some(counter), session, now))))
    }

    async fn admit_up_to(&self, admission: &Admission) -> StoreResult<Result<Vec<f64>, Refusal>> {
        self.admit_call(admission).await
    }

    async fn settle(&self, settlement: &Settlement) -> StoreResult<()> {
        self.settle_calls(settlement).await
    }

    async fn budget_spend(&self, scopes: &[(BudgetScope, u64)]) -> StoreResult<Vec<f64>> {
        self.budget_spend_of(scopes).await
    }

    async fn set_budget_spend(
        &self,
        scope: &BudgetScope,
        window: u64,
        spend: f64,
    ) -> StoreResult<()> {
        self.set_budget_spend_of(scope, window, spend).await
    }

    fn key_changes(&self) -> tokio::sync::watch::Receiver<Option<u64>> {
        self.key_changes.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_of_an_earlier_window_or_a_forgotten_session_reads_as_nothing() {
        assert_eq!(key_spent(Some(pack(3, 1.5)), 3), 1.5);
        assert_eq!(key_spent(Some(pack(2, 1.5)), 3), 0.0);
        assert_eq!(key_spent(None, 0), 0.0);
        let now = 10 * SESSION_SPEND_TTL_MS;
        assert_eq!(session_spent(Some(pack(now as u64 - 1, 0.25)), now), 0.25);
        assert_eq!(
            session_spent(Some(pack((now - SESSION_SPEND_TTL_MS) as u64, 0.25)), now),
            0.0
        );
        assert!(owned_by("abc\0s", "abc") && owned_by("abc", "abc"));
        assert!(!owned_by("abcd", "abc"));
    }
}
