//! The ledger in Redis: a hash per scope and day, `sandgate:{gateway-orgs}:ledger:<scope>:<day>`,
//! field `<measure>|<id>` → the amount (HINCRBYFLOAT), expiring past the retention. On the
//! gateway's slot, beside the spend counters, so that one atomic write adds a batch.

use async_trait::async_trait;

use super::{RedisStore, unavailable};
use crate::StoreResult;
use crate::ledger::split_conversation_model;
use crate::ledger::{
    LEDGER_RETENTION_DAYS, LedgerCount, LedgerRows, LedgerScope, LedgerStore, Measure, add_field,
    field,
};

/// The set of a conversation's models.
fn models_key(conversation: &str) -> String {
    format!("sandgate:{{gateway-orgs}}:ledger-models:{conversation}")
}

fn day_key(scope: LedgerScope, day: u32) -> String {
    format!("sandgate:{{gateway-orgs}}:ledger:{}:{day}", scope.name())
}

#[async_trait]
impl LedgerStore for RedisStore {
    async fn add_ledger(&self, counts: &[LedgerCount]) -> StoreResult<()> {
        if counts.is_empty() {
            return Ok(());
        }
        let keep_ms = u64::from(LEDGER_RETENTION_DAYS + 1) * 86_400_000;
        let mut pipe = redis::pipe();
        pipe.atomic();
        for count in counts {
            let key = day_key(count.scope, count.day);
            pipe.cmd("HINCRBYFLOAT")
                .arg(&key)
                .arg(field(count.measure, &count.id))
                .arg(count.amount)
                .ignore();
            pipe.cmd("PEXPIRE").arg(&key).arg(keep_ms).ignore();
            if count.scope == LedgerScope::ConversationModel
                && let Some((conversation, model)) = split_conversation_model(&count.id)
            {
                let models = models_key(conversation);
                pipe.cmd("SADD").arg(&models).arg(model).ignore();
                pipe.cmd("PEXPIRE").arg(&models).arg(keep_ms).ignore();
            }
        }
        let mut connection = self.write_connection();
        pipe.query_async::<()>(&mut connection)
            .await
            .map_err(unavailable)?;
        self.replicated(&mut connection).await
    }

    async fn ledger_of(
        &self,
        scope: LedgerScope,
        ids: &[String],
        from: u32,
        to: u32,
    ) -> StoreResult<LedgerRows> {
        let mut rows = LedgerRows::new();
        if ids.is_empty() || from > to {
            return Ok(rows);
        }
        let fields: Vec<String> = ids
            .iter()
            .flat_map(|id| Measure::ALL.map(|measure| field(measure, id)))
            .collect();
        let mut pipe = redis::pipe();
        for day in from..=to {
            pipe.cmd("HMGET").arg(day_key(scope, day)).arg(&fields);
        }
        let days: Vec<Vec<Option<f64>>> = pipe
            .query_async(&mut self.connection())
            .await
            .map_err(unavailable)?;
        for values in days {
            for (name, value) in fields.iter().zip(values) {
                if let Some(value) = value {
                    add_field(&mut rows, name, value);
                }
            }
        }
        Ok(rows)
    }

    async fn conversation_models(&self, conversation: &str) -> StoreResult<Vec<String>> {
        let mut models: Vec<String> = redis::cmd("SMEMBERS")
            .arg(models_key(conversation))
            .query_async(&mut self.connection())
            .await
            .map_err(unavailable)?;
        models.sort();
        Ok(models)
    }

    async fn ledger_rollup(
        &self,
        scope: LedgerScope,
        from: u32,
        to: u32,
    ) -> StoreResult<LedgerRows> {
        let mut rows = LedgerRows::new();
        if from > to {
            return Ok(rows);
        }
        let mut pipe = redis::pipe();
        for day in from..=to {
            pipe.cmd("HGETALL").arg(day_key(scope, day));
        }
        let days: Vec<Vec<(String, f64)>> = pipe
            .query_async(&mut self.connection())
            .await
            .map_err(unavailable)?;
        for (name, value) in days.into_iter().flatten() {
            add_field(&mut rows, &name, value);
        }
        Ok(rows)
    }
}
