//! Sandboxes in the embedded store. Each write checks the stored version and moves the
//! index entries in one transaction.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use redb::{ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};

use super::{EmbeddedStore, unavailable};
use crate::store::sandboxes::{SandboxStore, StoredSandbox};
use crate::store::{StoreError, StoreResult};

/// runtime id → the record's JSON.
const SANDBOXES: TableDefinition<&str, &[u8]> = TableDefinition::new("sandboxes");
/// `<claim key>\0<runtime id>` → nothing: the warm sandboxes a claim may take.
const WARM: TableDefinition<&str, ()> = TableDefinition::new("sandbox_warm_index");
/// session id → runtime id.
const SESSIONS: TableDefinition<&str, &str> = TableDefinition::new("sandbox_sessions");
/// lease name → its holder and the milliseconds since the epoch when it lapses.
const LEASES: TableDefinition<&str, (&str, u64)> = TableDefinition::new("leases");

pub(super) fn create_tables(txn: &WriteTransaction) -> StoreResult<()> {
    txn.open_table(SANDBOXES).map_err(unavailable)?;
    txn.open_table(WARM).map_err(unavailable)?;
    txn.open_table(SESSIONS).map_err(unavailable)?;
    txn.open_table(LEASES).map_err(unavailable)?;
    Ok(())
}

fn decode(bytes: &[u8]) -> StoreResult<StoredSandbox> {
    serde_json::from_slice(bytes).map_err(|err| StoreError::Corrupt(err.to_string()))
}

fn warm_entry(claim_key: &str, runtime_id: &str) -> String {
    format!("{claim_key}\0{runtime_id}")
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// The stored version of `runtime_id`, 0 when there is none.
fn stored_version(txn: &WriteTransaction, runtime_id: &str) -> StoreResult<u64> {
    let table = txn.open_table(SANDBOXES).map_err(unavailable)?;
    let stored = table.get(runtime_id).map_err(unavailable)?;
    stored.map_or(Ok(0), |bytes| {
        decode(bytes.value()).map(|record| record.version)
    })
}

/// Removes `record`'s index entries.
fn unindex(txn: &WriteTransaction, record: &StoredSandbox) -> StoreResult<()> {
    if let Some(claim_key) = record.warm_index() {
        let mut warm = txn.open_table(WARM).map_err(unavailable)?;
        warm.remove(warm_entry(claim_key, &record.runtime_id).as_str())
            .map_err(unavailable)?;
    }
    if let Some(session) = &record.session_id {
        let mut sessions = txn.open_table(SESSIONS).map_err(unavailable)?;
        let points_here = sessions
            .get(session.as_str())
            .map_err(unavailable)?
            .is_some_and(|id| id.value() == record.runtime_id);
        if points_here {
            sessions.remove(session.as_str()).map_err(unavailable)?;
        }
    }
    Ok(())
}

impl EmbeddedStore {
    async fn sandbox_by_id(&self, runtime_id: String) -> StoreResult<Option<StoredSandbox>> {
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(SANDBOXES).map_err(unavailable)?;
            let stored = table.get(runtime_id.as_str()).map_err(unavailable)?;
            stored.map(|bytes| decode(bytes.value())).transpose()
        })
        .await
    }
}

#[async_trait]
impl SandboxStore for EmbeddedStore {
    async fn sandboxes(&self) -> StoreResult<Vec<StoredSandbox>> {
        self.read(|db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(SANDBOXES).map_err(unavailable)?;
            table
                .iter()
                .map_err(unavailable)?
                .map(|entry| decode(entry.map_err(unavailable)?.1.value()))
                .collect()
        })
        .await
    }

    async fn sandbox(&self, runtime_id: &str) -> StoreResult<Option<StoredSandbox>> {
        self.sandbox_by_id(runtime_id.to_owned()).await
    }

    async fn sandbox_for_session(&self, session_id: &str) -> StoreResult<Option<StoredSandbox>> {
        let session = session_id.to_owned();
        let id = self
            .read(move |db| {
                let txn = db.begin_read().map_err(unavailable)?;
                let table = txn.open_table(SESSIONS).map_err(unavailable)?;
                let id = table.get(session.as_str()).map_err(unavailable)?;
                Ok(id.map(|id| id.value().to_owned()))
            })
            .await?;
        match id {
            Some(id) => self.sandbox_by_id(id).await,
            None => Ok(None),
        }
    }

    async fn warm_sandboxes(
        &self,
        claim_key: &str,
        limit: usize,
    ) -> StoreResult<Vec<StoredSandbox>> {
        let start = format!("{claim_key}\0");
        let end = format!("{claim_key}\u{1}");
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let warm = txn.open_table(WARM).map_err(unavailable)?;
            let table = txn.open_table(SANDBOXES).map_err(unavailable)?;
            // Claims in one process take turns through the writer: the first members
            // serve as well as random ones.
            let mut found = Vec::new();
            for entry in warm
                .range(start.as_str()..end.as_str())
                .map_err(unavailable)?
                .take(limit)
            {
                let (key, ()) = entry.map(|(key, _)| (key, ())).map_err(unavailable)?;
                let id = &key.value()[start.len()..];
                if let Some(bytes) = table.get(id).map_err(unavailable)? {
                    found.push(decode(bytes.value())?);
                }
            }
            Ok(found)
        })
        .await
    }

    async fn put_sandbox(
        &self,
        previous: Option<&StoredSandbox>,
        next: &StoredSandbox,
    ) -> StoreResult<bool> {
        let previous = previous.cloned();
        let next = next.clone();
        let json = serde_json::to_vec(&next).map_err(|err| StoreError::Corrupt(err.to_string()))?;
        self.transact(move |txn| {
            if stored_version(txn, &next.runtime_id)? != next.version.saturating_sub(1) {
                return Ok(false);
            }
            if let Some(previous) = &previous {
                unindex(txn, previous)?;
            }
            if let Some(claim_key) = next.warm_index() {
                let mut warm = txn.open_table(WARM).map_err(unavailable)?;
                warm.insert(warm_entry(claim_key, &next.runtime_id).as_str(), ())
                    .map_err(unavailable)?;
            }
            if let Some(session) = &next.session_id {
                let mut sessions = txn.open_table(SESSIONS).map_err(unavailable)?;
                sessions
                    .insert(session.as_str(), next.runtime_id.as_str())
                    .map_err(unavailable)?;
            }
            let mut table = txn.open_table(SANDBOXES).map_err(unavailable)?;
            table
                .insert(next.runtime_id.as_str(), json.as_slice())
                .map_err(unavailable)?;
            Ok(true)
        })
        .await
    }

    async fn delete_sandbox(&self, current: &StoredSandbox) -> StoreResult<bool> {
        let current = current.clone();
        self.transact(move |txn| {
            if stored_version(txn, &current.runtime_id)? != current.version {
                return Ok(false);
            }
            unindex(txn, &current)?;
            let mut table = txn.open_table(SANDBOXES).map_err(unavailable)?;
            table
                .remove(current.runtime_id.as_str())
                .map_err(unavailable)?;
            Ok(true)
        })
        .await
    }

    async fn acquire_lease(&self, name: &str, holder: &str, ttl: Duration) -> StoreResult<bool> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.transact(move |txn| {
            let mut leases = txn.open_table(LEASES).map_err(unavailable)?;
            let now = now_ms();
            let taken = leases
                .get(name.as_str())
                .map_err(unavailable)?
                .is_some_and(|lease| {
                    let (current, lapses_at) = lease.value();
                    current != holder && lapses_at > now
                });
            if taken {
                return Ok(false);
            }
            let lapses_at = now + ttl.as_millis() as u64;
            leases
                .insert(name.as_str(), (holder.as_str(), lapses_at))
                .map_err(unavailable)?;
            Ok(true)
        })
        .await
    }

    async fn release_lease(&self, name: &str, holder: &str) -> StoreResult<()> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.transact(move |txn| {
            let mut leases = txn.open_table(LEASES).map_err(unavailable)?;
            let held = leases
                .get(name.as_str())
                .map_err(unavailable)?
                .is_some_and(|lease| lease.value().0 == holder);
            if held {
                leases.remove(name.as_str()).map_err(unavailable)?;
            }
            Ok(())
        })
        .await
    }
}
