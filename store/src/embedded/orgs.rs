//! The gateway's teams, users and spend counters in the embedded store. Writes pass
//! through the store's one writer, so a compare-and-swap and a batch of spend are each
//! one transaction.

use async_trait::async_trait;
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use super::{EmbeddedStore, unavailable};
use crate::orgs::{
    DAY_SPEND_RETENTION_DAYS, DaySpend, OrgStore, SpendCount, SpendScope, StoredTeam, StoredUser,
};
use crate::{StoreError, StoreResult};

/// team id → the team's JSON.
pub(super) const TEAMS: TableDefinition<&str, &[u8]> = TableDefinition::new("gateway_teams");
/// user id → the user's JSON.
pub(super) const USERS: TableDefinition<&str, &[u8]> = TableDefinition::new("gateway_users");
/// `t\0<scope>\0<id>` → its total; `d\0<scope>\0<day, 10 digits>\0<id>` → its spend that
/// day. Each an 8-byte little-endian float.
pub(super) const SPEND: TableDefinition<&str, [u8; 8]> = TableDefinition::new("gateway_org_spend");

fn total_name(scope: SpendScope, id: &str) -> String {
    format!("t\0{}\0{id}", scope.name())
}

fn day_prefix(scope: SpendScope, day: u32) -> String {
    format!("d\0{}\0{day:010}\0", scope.name())
}

fn corrupt(err: serde_json::Error) -> StoreError {
    StoreError::Corrupt(err.to_string())
}

fn add(value: Option<[u8; 8]>, amount: f64) -> [u8; 8] {
    (value.map_or(0.0, f64::from_le_bytes) + amount).to_le_bytes()
}

impl EmbeddedStore {
    async fn swap(
        &self,
        table: TableDefinition<'static, &'static str, &'static [u8]>,
        id: String,
        expected: u64,
        data: Vec<u8>,
    ) -> StoreResult<bool> {
        self.transact(move |txn| {
            let mut records = txn.open_table(table).map_err(unavailable)?;
            let version = match records.get(id.as_str()).map_err(unavailable)? {
                None => 0,
                Some(current) => serde_json::from_slice::<serde_json::Value>(current.value())
                    .map_err(corrupt)?["version"]
                    .as_u64()
                    .unwrap_or(0),
            };
            if version != expected {
                return Ok(false);
            }
            records
                .insert(id.as_str(), data.as_slice())
                .map_err(unavailable)?;
            Ok(true)
        })
        .await
    }

    async fn record<T: serde::de::DeserializeOwned + Send + 'static>(
        &self,
        table: TableDefinition<'static, &'static str, &'static [u8]>,
        id: &str,
    ) -> StoreResult<Option<T>> {
        let id = id.to_owned();
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let records = txn.open_table(table).map_err(unavailable)?;
            records
                .get(id.as_str())
                .map_err(unavailable)?
                .map(|data| serde_json::from_slice(data.value()).map_err(corrupt))
                .transpose()
        })
        .await
    }

    /// This process is the store's only writer: every change of a team or user record
    /// passes here.
    pub(super) fn orgs_changed(&self) {
        super::move_on(&self.org_changes);
    }

    /// Every record of `table`, by id.
    pub(super) async fn records<T: serde::de::DeserializeOwned + Send + 'static>(
        &self,
        table: TableDefinition<'static, &'static str, &'static [u8]>,
    ) -> StoreResult<Vec<T>> {
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let records = txn.open_table(table).map_err(unavailable)?;
            let mut all = Vec::new();
            for entry in records.iter().map_err(unavailable)? {
                let (_, data) = entry.map_err(unavailable)?;
                all.push(serde_json::from_slice(data.value()).map_err(corrupt)?);
            }
            Ok(all)
        })
        .await
    }

    async fn delete_records(
        &self,
        table: TableDefinition<'static, &'static str, &'static [u8]>,
        ids: &[String],
    ) -> StoreResult<Vec<String>> {
        let ids = ids.to_vec();
        self.transact(move |txn| {
            let mut records = txn.open_table(table).map_err(unavailable)?;
            let mut deleted = Vec::new();
            for id in ids {
                if records.remove(id.as_str()).map_err(unavailable)?.is_some() {
                    deleted.push(id);
                }
            }
            Ok(deleted)
        })
        .await
    }
}

#[async_trait]
impl OrgStore for EmbeddedStore {
    async fn put_team(&self, team: &StoredTeam, expected: u64) -> StoreResult<bool> {
        let mut team = team.clone();
        team.version = expected + 1;
        let data = serde_json::to_vec(&team).map_err(corrupt)?;
        let stored = self.swap(TEAMS, team.team_id, expected, data).await?;
        if stored {
            self.orgs_changed();
        }
        Ok(stored)
    }

    async fn get_team(&self, team_id: &str) -> StoreResult<Option<StoredTeam>> {
        self.record(TEAMS, team_id).await
    }

    async fn delete_teams(&self, ids: &[String]) -> StoreResult<Vec<String>> {
        let deleted = self.delete_records(TEAMS, ids).await?;
        self.orgs_changed();
        Ok(deleted)
    }

    async fn put_user(&self, user: &StoredUser, expected: u64) -> StoreResult<bool> {
        let mut user = user.clone();
        user.version = expected + 1;
        let data = serde_json::to_vec(&user).map_err(corrupt)?;
        let stored = self.swap(USERS, user.user_id, expected, data).await?;
        if stored {
            self.orgs_changed();
        }
        Ok(stored)
    }

    async fn get_user(&self, user_id: &str) -> StoreResult<Option<StoredUser>> {
        self.record(USERS, user_id).await
    }

    fn org_changes(&self) -> tokio::sync::watch::Receiver<Option<u64>> {
        self.org_changes.subscribe()
    }

    async fn list_teams(&self) -> StoreResult<Vec<StoredTeam>> {
        self.records(TEAMS).await
    }

    async fn list_users(&self) -> StoreResult<Vec<StoredUser>> {
        self.records(USERS).await
    }

    async fn delete_users(&self, ids: &[String]) -> StoreResult<Vec<String>> {
        let deleted = self.delete_records(USERS, ids).await?;
        self.orgs_changed();
        Ok(deleted)
    }

    async fn add_spend(&self, counts: &[SpendCount]) -> StoreResult<()> {
        if counts.is_empty() {
            return Ok(());
        }
        let counts = counts.to_vec();
        let oldest = crate::orgs::day_of(crate::now_ms()).saturating_sub(DAY_SPEND_RETENTION_DAYS);
        self.transact(move |txn| {
            let mut spend = txn.open_table(SPEND).map_err(unavailable)?;
            for count in counts {
                let mut names = vec![format!(
                    "{}{}",
                    day_prefix(count.scope, count.day),
                    count.id
                )];
                if count.scope.has_total() {
                    names.push(total_name(count.scope, &count.id));
                }
                for name in names {
                    let stored = spend
                        .get(name.as_str())
                        .map_err(unavailable)?
                        .map(|value| value.value());
                    spend
                        .insert(name.as_str(), add(stored, count.amount))
                        .map_err(unavailable)?;
                }
            }
            // Days past retention go, a scope's oldest first.
            for scope in SpendScope::ALL {
                let start = day_prefix(scope, 0);
                let end = day_prefix(scope, oldest);
                spend
                    .retain_in(start.as_str()..end.as_str(), |_, _| false)
                    .map_err(unavailable)?;
            }
            Ok(())
        })
        .await
    }

    async fn spend_totals(&self, counters: &[(SpendScope, String)]) -> StoreResult<Vec<f64>> {
        let names: Vec<String> = counters
            .iter()
            .map(|(scope, id)| total_name(*scope, id))
            .collect();
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let spend = txn.open_table(SPEND).map_err(unavailable)?;
            names
                .iter()
                .map(|name| {
                    Ok(spend
                        .get(name.as_str())
                        .map_err(unavailable)?
                        .map_or(0.0, |value| f64::from_le_bytes(value.value())))
                })
                .collect()
        })
        .await
    }

    async fn spend_by_day(
        &self,
        scope: SpendScope,
        from: u32,
        to: u32,
    ) -> StoreResult<Vec<DaySpend>> {
        if from > to {
            return Ok(Vec::new());
        }
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let spend = txn.open_table(SPEND).map_err(unavailable)?;
            let start = day_prefix(scope, from);
            let end = day_prefix(scope, to.saturating_add(1));
            let prefix_len = day_prefix(scope, 0).len();
            let mut found = Vec::new();
            for entry in spend
                .range(start.as_str()..end.as_str())
                .map_err(unavailable)?
            {
                let (name, value) = entry.map_err(unavailable)?;
                let name = name.value();
                let (Some(day), Some(id)) = (
                    name.get(prefix_len - 11..prefix_len - 1)
                        .and_then(|day| day.parse().ok()),
                    name.get(prefix_len..),
                ) else {
                    continue;
                };
                found.push(DaySpend {
                    day,
                    id: id.to_owned(),
                    amount: f64::from_le_bytes(value.value()),
                });
            }
            Ok(found)
        })
        .await
    }
}
