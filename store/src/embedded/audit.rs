//! The audit log in the embedded store: a sequence number → an entry's JSON; the
//! sequence number, in decimal, is the entry's id.

use async_trait::async_trait;
use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use super::{EmbeddedStore, unavailable};
use crate::audit::{AuditEntry, AuditStore};
use crate::{StoreError, StoreResult};

pub(super) const AUDIT: TableDefinition<u64, &[u8]> = TableDefinition::new("audit");

fn corrupt(err: serde_json::Error) -> StoreError {
    StoreError::Corrupt(err.to_string())
}

#[async_trait]
impl AuditStore for EmbeddedStore {
    async fn append_audit(&self, entry: &AuditEntry, max_entries: usize) -> StoreResult<String> {
        let json = serde_json::to_vec(entry).map_err(corrupt)?;
        self.transact(move |txn| {
            let mut log = txn.open_table(AUDIT).map_err(unavailable)?;
            let next = log
                .last()
                .map_err(unavailable)?
                .map_or(1, |(key, _)| key.value() + 1);
            log.insert(next, json.as_slice()).map_err(unavailable)?;
            while log.len().map_err(unavailable)? > max_entries as u64 {
                log.pop_first().map_err(unavailable)?;
            }
            Ok(next.to_string())
        })
        .await
    }

    async fn audit_entries(
        &self,
        before: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<AuditEntry>> {
        let end = match before.map(str::parse::<u64>) {
            None => u64::MAX,
            Some(Ok(id)) => id,
            Some(Err(_)) => return Ok(Vec::new()),
        };
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let log = txn.open_table(AUDIT).map_err(unavailable)?;
            log.range(..end)
                .map_err(unavailable)?
                .rev()
                .take(limit)
                .map(|entry| {
                    let (id, data) = entry.map_err(unavailable)?;
                    let entry: AuditEntry =
                        serde_json::from_slice(data.value()).map_err(corrupt)?;
                    Ok(AuditEntry {
                        id: id.value().to_string(),
                        ..entry
                    })
                })
                .collect()
        })
        .await
    }
}
