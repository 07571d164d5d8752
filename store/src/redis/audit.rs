//! The audit log in Redis: `sandgate:audit`, a stream of entries (field `d`, the JSON),
//! trimmed to its bound exactly on every append (changes are an operator's pace). An
//! entry's id is its stream id.

use async_trait::async_trait;

use super::{RedisStore, corrupt, unavailable};
use crate::StoreResult;
use crate::audit::{AuditEntry, AuditStore};

const AUDIT: &str = "sandgate:audit";

/// Whether `id` has a stream id's shape (`<ms>-<seq>`), which alone may go to Redis.
fn stream_id(id: &str) -> bool {
    id.split_once('-').is_some_and(|(ms, seq)| {
        [ms, seq].iter().all(|part| {
            !part.is_empty() && part.len() <= 20 && part.bytes().all(|b| b.is_ascii_digit())
        })
    })
}

#[async_trait]
impl AuditStore for RedisStore {
    async fn append_audit(&self, entry: &AuditEntry, max_entries: usize) -> StoreResult<String> {
        let data = serde_json::to_vec(entry).map_err(corrupt)?;
        let mut connection = self.write_connection();
        let id: String = redis::cmd("XADD")
            .arg(AUDIT)
            .arg("MAXLEN")
            .arg("=")
            .arg(max_entries)
            .arg("*")
            .arg("d")
            .arg(data)
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        self.replicated(&mut connection).await?;
        Ok(id)
    }

    async fn audit_entries(
        &self,
        before: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<AuditEntry>> {
        let end = match before {
            None => "+".to_owned(),
            Some(id) if stream_id(id) => format!("({id}"),
            Some(_) => return Ok(Vec::new()),
        };
        self.newest_of_stream(AUDIT, &end, limit)
            .await?
            .into_iter()
            .map(|(id, data)| {
                serde_json::from_slice::<AuditEntry>(&data)
                    .map(|entry| AuditEntry { id, ..entry })
                    .map_err(corrupt)
            })
            .collect()
    }
}
