//! The model gateway in Redis.
//!
//! - `sandgate:models:{<scope>}`: a hash, model name → the added model's JSON;
//! - `sandgate:spend-log`: a stream of entries (field `d`, the JSON), trimmed with
//!   `MAXLEN ~` on every append.

use async_trait::async_trait;

use super::{RedisStore, corrupt, unavailable};
use crate::store::StoreResult;
use crate::store::models::{
    ModelStore, SPEND_LOG_RETENTION, SpendLogEntry, SpendLogStore, StoredModel,
};

const SPEND_LOG: &str = "sandgate:spend-log";

fn models_key(scope: &str) -> String {
    format!("sandgate:models:{{{scope}}}")
}

#[async_trait]
impl ModelStore for RedisStore {
    async fn add_model(&self, scope: &str, model: &StoredModel) -> StoreResult<()> {
        let data = serde_json::to_vec(model).map_err(corrupt)?;
        let mut connection = self.connection.clone();
        redis::cmd("HSET")
            .arg(models_key(scope))
            .arg(&model.model_name)
            .arg(data)
            .query_async::<()>(&mut connection)
            .await
            .map_err(unavailable)
    }

    async fn added_models(&self, scope: &str) -> StoreResult<Vec<StoredModel>> {
        let mut connection = self.connection.clone();
        let entries: Vec<(String, Vec<u8>)> = redis::cmd("HGETALL")
            .arg(models_key(scope))
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        let mut models = entries
            .into_iter()
            .map(|(_, data)| serde_json::from_slice::<StoredModel>(&data).map_err(corrupt))
            .collect::<StoreResult<Vec<_>>>()?;
        models.sort_by(|a, b| (a.added_at_ms, &a.model_name).cmp(&(b.added_at_ms, &b.model_name)));
        Ok(models)
    }
}

#[async_trait]
impl SpendLogStore for RedisStore {
    async fn append_spend_logs(&self, entries: &[SpendLogEntry]) -> StoreResult<()> {
        let mut pipe = redis::pipe();
        for entry in entries {
            let data = serde_json::to_vec(entry).map_err(corrupt)?;
            pipe.cmd("XADD")
                .arg(SPEND_LOG)
                .arg("MAXLEN")
                .arg("~")
                .arg(SPEND_LOG_RETENTION)
                .arg("*")
                .arg("d")
                .arg(data)
                .ignore();
        }
        let mut connection = self.connection.clone();
        pipe.query_async::<()>(&mut connection)
            .await
            .map_err(unavailable)
    }

    async fn spend_logs(&self, limit: usize) -> StoreResult<Vec<SpendLogEntry>> {
        let mut connection = self.connection.clone();
        let entries: Vec<(String, Vec<(String, Vec<u8>)>)> = redis::cmd("XREVRANGE")
            .arg(SPEND_LOG)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(limit)
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        entries
            .into_iter()
            .filter_map(|(_, fields)| fields.into_iter().find(|(name, _)| name == "d"))
            .map(|(_, data)| serde_json::from_slice(&data).map_err(corrupt))
            .collect()
    }
}
