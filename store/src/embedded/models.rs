//! The model gateway in the embedded store.

use async_trait::async_trait;
use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use tokio::sync::watch;

use super::{EmbeddedStore, unavailable};
use crate::models::{ModelStore, SpendLogEntry, SpendLogRetention, SpendLogStore, StoredModel};
use crate::{StoreError, StoreResult};

/// `<scope>\0<name>` → an added model's JSON.
pub(super) const MODELS: TableDefinition<&str, &[u8]> = TableDefinition::new("added_models");
/// A sequence number → a spend log entry's JSON; the oldest are dropped past the retention.
pub(super) const SPEND_LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("spend_log");

fn corrupt(err: serde_json::Error) -> StoreError {
    StoreError::Corrupt(err.to_string())
}

#[async_trait]
impl ModelStore for EmbeddedStore {
    async fn add_model(&self, scope: &str, model: &StoredModel) -> StoreResult<()> {
        let key = format!("{scope}\0{}", model.model_name);
        let json = serde_json::to_vec(model).map_err(corrupt)?;
        self.transact(move |txn| {
            let mut models = txn.open_table(MODELS).map_err(unavailable)?;
            models
                .insert(key.as_str(), json.as_slice())
                .map(drop)
                .map_err(unavailable)
        })
        .await?;
        self.gateway_changed();
        Ok(())
    }

    async fn added_models(&self, scope: &str) -> StoreResult<Vec<StoredModel>> {
        let start = format!("{scope}\0");
        let end = format!("{scope}\u{1}");
        let mut models = self
            .read(move |db| {
                let txn = db.begin_read().map_err(unavailable)?;
                let table = txn.open_table(MODELS).map_err(unavailable)?;
                table
                    .range(start.as_str()..end.as_str())
                    .map_err(unavailable)?
                    .map(|entry| {
                        let (_, data) = entry.map_err(unavailable)?;
                        serde_json::from_slice::<StoredModel>(data.value()).map_err(corrupt)
                    })
                    .collect::<StoreResult<Vec<_>>>()
            })
            .await?;
        models.sort_by(|a, b| (a.added_at_ms, &a.model_name).cmp(&(b.added_at_ms, &b.model_name)));
        Ok(models)
    }

    async fn added_model(&self, scope: &str, name: &str) -> StoreResult<Option<StoredModel>> {
        let key = format!("{scope}\0{name}");
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(MODELS).map_err(unavailable)?;
            table
                .get(key.as_str())
                .map_err(unavailable)?
                .map(|data| serde_json::from_slice(data.value()).map_err(corrupt))
                .transpose()
        })
        .await
    }

    fn model_changes(&self) -> watch::Receiver<Option<u64>> {
        self.model_changes.subscribe()
    }
}

#[async_trait]
impl SpendLogStore for EmbeddedStore {
    async fn append_spend_logs(
        &self,
        entries: &[SpendLogEntry],
        retention: SpendLogRetention,
    ) -> StoreResult<()> {
        let oldest_kept = crate::now_ms().saturating_sub(retention.max_age_ms);
        let encoded = entries
            .iter()
            .map(|entry| serde_json::to_vec(entry).map_err(corrupt))
            .collect::<StoreResult<Vec<_>>>()?;
        self.transact(move |txn| {
            let mut log = txn.open_table(SPEND_LOG).map_err(unavailable)?;
            let next = log
                .last()
                .map_err(unavailable)?
                .map_or(0, |(key, _)| key.value() + 1);
            for (key, json) in (next..).zip(&encoded) {
                log.insert(key, json.as_slice()).map_err(unavailable)?;
            }
            while log.len().map_err(unavailable)? > retention.max_entries as u64 {
                log.pop_first().map_err(unavailable)?;
            }
            // The oldest first: they go until one is young enough.
            loop {
                let expired = match log.first().map_err(unavailable)? {
                    Some((_, data)) => serde_json::from_slice::<SpendLogEntry>(data.value())
                        .map_or(true, |entry| entry.started_at_ms < oldest_kept),
                    None => false,
                };
                if !expired {
                    break;
                }
                log.pop_first().map_err(unavailable)?;
            }
            Ok(())
        })
        .await
    }

    async fn spend_logs(&self, limit: usize) -> StoreResult<Vec<SpendLogEntry>> {
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let log = txn.open_table(SPEND_LOG).map_err(unavailable)?;
            log.iter()
                .map_err(unavailable)?
                .rev()
                .take(limit)
                .map(|entry| {
                    let (_, data) = entry.map_err(unavailable)?;
                    serde_json::from_slice(data.value()).map_err(corrupt)
                })
                .collect()
        })
        .await
    }
}
