//! Sandboxes in the embedded store. Each write checks the stored version and moves the
//! index entries in one transaction.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use redb::{ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};

use super::{EmbeddedStore, unavailable};
use crate::sandboxes::{Fence, SandboxStore, StoredSandbox, SweepIndex};
use crate::{StoreError, StoreResult};

/// runtime id → the record's JSON.
const SANDBOXES: TableDefinition<&str, &[u8]> = TableDefinition::new("sandboxes");
/// `<claim key>\0<runtime id>` → nothing: the warm sandboxes a claim may take.
const WARM: TableDefinition<&str, ()> = TableDefinition::new("sandbox_warm_index");
/// session id → runtime id.
const SESSIONS: TableDefinition<&str, &str> = TableDefinition::new("sandbox_sessions");
/// source address → runtime id, of live sandboxes (`StoredSandbox::address_index`).
const ADDRESSES: TableDefinition<&str, &str> = TableDefinition::new("sandbox_addresses");
/// lease name → its holder and the milliseconds since the epoch when it lapses.
const LEASES: TableDefinition<&str, (&str, u64)> = TableDefinition::new("leases");
/// lease name → its fencing token, which grows each time the lease passes to a holder.
const LEASE_TOKENS: TableDefinition<&str, u64> = TableDefinition::new("lease_tokens");
/// (sweep index ordinal, position, runtime id) → nothing: the sweep indexes.
const SWEEP: TableDefinition<(u8, i64, &str), ()> = TableDefinition::new("sandbox_sweep_index");

pub(super) fn create_tables(txn: &WriteTransaction) -> StoreResult<()> {
    txn.open_table(SANDBOXES).map_err(unavailable)?;
    txn.open_table(WARM).map_err(unavailable)?;
    txn.open_table(SESSIONS).map_err(unavailable)?;
    txn.open_table(ADDRESSES).map_err(unavailable)?;
    txn.open_table(LEASES).map_err(unavailable)?;
    txn.open_table(LEASE_TOKENS).map_err(unavailable)?;
    // The sweep indexes are rebuilt at every open, so that a database from before one of
    // them (the running sandboxes' index came after the others) has it filled. The store
    // is this process's alone: no writer can miss them afterwards. The records scanned are
    // the sandboxes still remembered, not every one ever started.
    txn.open_table(SWEEP)
        .map_err(unavailable)?
        .retain(|_, ()| false)
        .map_err(unavailable)?;
    index_all(txn)?;
    Ok(())
}

/// `record`'s sweep index entry, if it has one.
fn sweep_entry(record: &StoredSandbox) -> Option<(u8, i64, &str)> {
    record
        .sweep_index()
        .map(|(index, position)| (index.ordinal(), position, record.runtime_id.as_str()))
}

/// Puts every record in its sweep index (emptied before).
fn index_all(txn: &WriteTransaction) -> StoreResult<()> {
    let table = txn.open_table(SANDBOXES).map_err(unavailable)?;
    let mut sweep = txn.open_table(SWEEP).map_err(unavailable)?;
    for entry in table.iter().map_err(unavailable)? {
        let record = decode(entry.map_err(unavailable)?.1.value())?;
        if let Some(entry) = sweep_entry(&record) {
            sweep.insert(entry, ()).map_err(unavailable)?;
        }
    }
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
    if let Some(entry) = sweep_entry(record) {
        let mut sweep = txn.open_table(SWEEP).map_err(unavailable)?;
        sweep.remove(entry).map_err(unavailable)?;
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
    if let Some(address) = record.address_index() {
        let mut addresses = txn.open_table(ADDRESSES).map_err(unavailable)?;
        let points_here = addresses
            .get(address)
            .map_err(unavailable)?
            .is_some_and(|id| id.value() == record.runtime_id);
        if points_here {
            addresses.remove(address).map_err(unavailable)?;
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

    /// Tells the gateway (here: this process, the store's only writer) that what the
    /// address index answers changed.
    fn addresses_changed(&self) {
        super::move_on(&self.address_changes);
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

    async fn sandbox_at_address(&self, address: &str) -> StoreResult<Option<StoredSandbox>> {
        let address = address.to_owned();
        let found = address.clone();
        let id = self
            .read(move |db| {
                let txn = db.begin_read().map_err(unavailable)?;
                let table = txn.open_table(ADDRESSES).map_err(unavailable)?;
                let id = table.get(found.as_str()).map_err(unavailable)?;
                Ok(id.map(|id| id.value().to_owned()))
            })
            .await?;
        let Some(id) = id else { return Ok(None) };
        Ok(self
            .sandbox_by_id(id)
            .await?
            .filter(|record| record.address_index() == Some(address.as_str())))
    }

    fn address_changes(&self) -> tokio::sync::watch::Receiver<Option<u64>> {
        self.address_changes.subscribe()
    }

    async fn swept_sandboxes(
        &self,
        index: SweepIndex,
        until_ms: i64,
        limit: usize,
    ) -> StoreResult<Vec<StoredSandbox>> {
        let ordinal = index.ordinal();
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let sweep = txn.open_table(SWEEP).map_err(unavailable)?;
            let table = txn.open_table(SANDBOXES).map_err(unavailable)?;
            let mut found = Vec::new();
            for entry in sweep
                .range((ordinal, i64::MIN, "")..(ordinal + 1, i64::MIN, ""))
                .map_err(unavailable)?
            {
                let key = entry.map_err(unavailable)?.0;
                let (_, position, id) = key.value();
                if position > until_ms || found.len() == limit {
                    break;
                }
                if let Some(bytes) = table.get(id).map_err(unavailable)? {
                    found.push(decode(bytes.value())?);
                }
            }
            Ok(found)
        })
        .await
    }

    async fn reindex_sandboxes(&self) -> StoreResult<usize> {
        // Nothing to repair: the database is this process's alone (redb locks the file),
        // every write here keeps the indexes, and one from before them was indexed when it
        // was opened. A scan would only hold the writer.
        Ok(0)
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
        fence: Option<&Fence>,
    ) -> StoreResult<bool> {
        let moves_address = StoredSandbox::moves_address(previous, Some(next));
        let previous = previous.cloned();
        let next = next.clone();
        let fence = fence.cloned();
        let json = serde_json::to_vec(&next).map_err(|err| StoreError::Corrupt(err.to_string()))?;
        let written = self
            .transact(move |txn| {
                check_fence(txn, fence.as_ref())?;
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
                if let Some(address) = next.address_index() {
                    let mut addresses = txn.open_table(ADDRESSES).map_err(unavailable)?;
                    addresses
                        .insert(address, next.runtime_id.as_str())
                        .map_err(unavailable)?;
                }
                if let Some(entry) = sweep_entry(&next) {
                    let mut sweep = txn.open_table(SWEEP).map_err(unavailable)?;
                    sweep.insert(entry, ()).map_err(unavailable)?;
                }
                let mut table = txn.open_table(SANDBOXES).map_err(unavailable)?;
                table
                    .insert(next.runtime_id.as_str(), json.as_slice())
                    .map_err(unavailable)?;
                Ok(true)
            })
            .await?;
        if written && moves_address {
            self.addresses_changed();
        }
        Ok(written)
    }

    async fn delete_sandbox(
        &self,
        current: &StoredSandbox,
        fence: Option<&Fence>,
    ) -> StoreResult<bool> {
        let moves_address = StoredSandbox::moves_address(Some(current), None);
        let current = current.clone();
        let fence = fence.cloned();
        let deleted = self
            .transact(move |txn| {
                check_fence(txn, fence.as_ref())?;
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
            .await?;
        if deleted && moves_address {
            self.addresses_changed();
        }
        Ok(deleted)
    }

    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> StoreResult<Option<u64>> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.transact(move |txn| {
            let mut leases = txn.open_table(LEASES).map_err(unavailable)?;
            let now = now_ms();
            let live_holder = leases
                .get(name.as_str())
                .map_err(unavailable)?
                .and_then(|lease| {
                    let (current, lapses_at) = lease.value();
                    (lapses_at > now).then(|| current.to_owned())
                });
            if live_holder
                .as_ref()
                .is_some_and(|current| *current != holder)
            {
                return Ok(None);
            }
            let lapses_at = now + ttl.as_millis() as u64;
            leases
                .insert(name.as_str(), (holder.as_str(), lapses_at))
                .map_err(unavailable)?;
            let mut tokens = txn.open_table(LEASE_TOKENS).map_err(unavailable)?;
            let token = tokens
                .get(name.as_str())
                .map_err(unavailable)?
                .map_or(0, |token| token.value());
            if live_holder.is_some() && token > 0 {
                // A renewal: the holder keeps its token.
                return Ok(Some(token));
            }
            tokens
                .insert(name.as_str(), token + 1)
                .map_err(unavailable)?;
            Ok(Some(token + 1))
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

/// Refuses the transaction's write when `fence`'s lease has a newer token.
fn check_fence(txn: &WriteTransaction, fence: Option<&Fence>) -> StoreResult<()> {
    let Some(fence) = fence else { return Ok(()) };
    let tokens = txn.open_table(LEASE_TOKENS).map_err(unavailable)?;
    let current = tokens
        .get(fence.lease.as_str())
        .map_err(unavailable)?
        .map(|token| token.value());
    if current == Some(fence.token) {
        Ok(())
    } else {
        Err(StoreError::Fenced(fence.lease.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SandboxSpec, SandboxState};

    /// A data directory written by a release without the sweep indexes has its sandboxes
    /// indexed when it is opened: an upgrade loses no warm sandbox from the reconciler's view.
    #[tokio::test]
    async fn a_database_from_before_the_sweep_indexes_is_indexed_on_open() {
        let dir = tempfile::tempdir().expect("temp dir");
        let warm = StoredSandbox {
            runtime_id: "warm".into(),
            version: 1,
            session_id: None,
            pool: Some("v1_current".into()),
            claim_key: "claim".into(),
            spec: SandboxSpec::default(),
            state: SandboxState::Running,
            status_detail: None,
            key_sha256: "00".into(),
            key_nonce: "nonce".into(),
            created_at_ms: 100,
            changed_at_ms: 100,
            restarts: Default::default(),
            slot_failures: 0,
            personalised: false,
            active_at_ms: 0,
            timeline: None,
            source_address: None,
        };
        {
            let db = redb::Database::create(dir.path().join("sandgate.redb")).expect("create");
            let txn = db.begin_write().expect("write");
            {
                let mut table = txn.open_table(SANDBOXES).expect("table");
                let json = serde_json::to_vec(&warm).expect("json");
                table.insert("warm", json.as_slice()).expect("insert");
            }
            txn.commit().expect("commit");
        }
        let store = EmbeddedStore::open(dir.path().to_path_buf())
            .await
            .expect("open");
        let pooled = store
            .swept_sandboxes(SweepIndex::Pooled, i64::MAX, 10)
            .await
            .expect("swept");
        assert_eq!(pooled, [warm]);
        assert_eq!(store.reindex_sandboxes().await.expect("reindex"), 0);
    }
}
