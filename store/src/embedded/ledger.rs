//! The ledger in the embedded store: `<scope>\0<day>\0<measure>|<id>` → the amount
//! (little-endian f64); days past the retention go as new counts arrive.

use async_trait::async_trait;
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use super::{EmbeddedStore, unavailable};
use crate::StoreResult;
use crate::ledger::conversation_model;
use crate::ledger::{
    LEDGER_RETENTION_DAYS, LedgerCount, LedgerRows, LedgerScope, LedgerStore, Measure, add_field,
    field,
};

pub(super) const LEDGER: TableDefinition<&str, [u8; 8]> = TableDefinition::new("ledger");
/// `<conversation>\x1f<model>` for each model a conversation's calls were counted for.
pub(super) const LEDGER_MODELS: TableDefinition<&str, ()> = TableDefinition::new("ledger_models");

fn day_prefix(scope: LedgerScope, day: u32) -> String {
    format!("{}\0{day:010}\0", scope.name())
}

#[async_trait]
impl LedgerStore for EmbeddedStore {
    async fn add_ledger(&self, counts: &[LedgerCount]) -> StoreResult<()> {
        if counts.is_empty() {
            return Ok(());
        }
        let counts = counts.to_vec();
        let oldest = crate::orgs::day_of(crate::now_ms()).saturating_sub(LEDGER_RETENTION_DAYS);
        self.transact(move |txn| {
            let mut ledger = txn.open_table(LEDGER).map_err(unavailable)?;
            let mut models = txn.open_table(LEDGER_MODELS).map_err(unavailable)?;
            for count in counts {
                let name = format!(
                    "{}{}",
                    day_prefix(count.scope, count.day),
                    field(count.measure, &count.id)
                );
                let stored = ledger
                    .get(name.as_str())
                    .map_err(unavailable)?
                    .map_or(0.0, |value| f64::from_le_bytes(value.value()));
                ledger
                    .insert(name.as_str(), (stored + count.amount).to_le_bytes())
                    .map_err(unavailable)?;
                if count.scope == LedgerScope::ConversationModel {
                    models.insert(count.id.as_str(), ()).map_err(unavailable)?;
                }
            }
            for scope in LedgerScope::ALL {
                let (start, end) = (day_prefix(scope, 0), day_prefix(scope, oldest));
                ledger
                    .retain_in(start.as_str()..end.as_str(), |_, _| false)
                    .map_err(unavailable)?;
            }
            Ok(())
        })
        .await
    }

    async fn ledger_of(
        &self,
        scope: LedgerScope,
        ids: &[String],
        from: u32,
        to: u32,
    ) -> StoreResult<LedgerRows> {
        let ids = ids.to_vec();
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let ledger = txn.open_table(LEDGER).map_err(unavailable)?;
            let mut rows = LedgerRows::new();
            for day in from..=to {
                let prefix = day_prefix(scope, day);
                for id in &ids {
                    for measure in Measure::ALL {
                        let name = field(measure, id);
                        if let Some(value) = ledger
                            .get(format!("{prefix}{name}").as_str())
                            .map_err(unavailable)?
                        {
                            add_field(&mut rows, &name, f64::from_le_bytes(value.value()));
                        }
                    }
                }
            }
            Ok(rows)
        })
        .await
    }

    async fn conversation_models(&self, conversation: &str) -> StoreResult<Vec<String>> {
        let prefix = conversation_model(conversation, "");
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let models = txn.open_table(LEDGER_MODELS).map_err(unavailable)?;
            let mut found = Vec::new();
            for entry in models.range(prefix.as_str()..).map_err(unavailable)? {
                let (id, _) = entry.map_err(unavailable)?;
                match id.value().strip_prefix(prefix.as_str()) {
                    Some(model) => found.push(model.to_owned()),
                    None => break,
                }
            }
            Ok(found)
        })
        .await
    }

    async fn ledger_rollup(
        &self,
        scope: LedgerScope,
        from: u32,
        to: u32,
    ) -> StoreResult<LedgerRows> {
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let ledger = txn.open_table(LEDGER).map_err(unavailable)?;
            let mut rows = LedgerRows::new();
            if from > to {
                return Ok(rows);
            }
            let (start, end) = (
                day_prefix(scope, from),
                day_prefix(scope, to.saturating_add(1)),
            );
            for entry in ledger
                .range(start.as_str()..end.as_str())
                .map_err(unavailable)?
            {
                let (name, value) = entry.map_err(unavailable)?;
                // After `<scope>\0<day>\0`, of one length for every day: the field.
                if let Some(field) = name.value().get(start.len()..) {
                    add_field(&mut rows, field, f64::from_le_bytes(value.value()));
                }
            }
            Ok(rows)
        })
        .await
    }
}
