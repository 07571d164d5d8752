//! The gateway's teams, users and spend counters in Redis. Every key shares the hash tag
//! `{gateway-orgs}`, so that a compare-and-swap script and the transaction that adds a
//! batch's spend stay on one Cluster slot:
//!
//! - `sandgate:{gateway-orgs}:teams`, `…:users`: hashes, id → the record's JSON;
//! - `sandgate:{gateway-orgs}:total`: a hash, `<scope>:<id>` → its spend in all;
//! - `sandgate:{gateway-orgs}:day:<day>:<scope>`: a hash, id → its spend that day,
//!   expiring [`DAY_SPEND_RETENTION_DAYS`] after it.
//!
//! Spend is added with `HINCRBYFLOAT` in one `MULTI`: replicas adding at once each add
//! their own, none overwrites another's.

use std::sync::LazyLock;

use async_trait::async_trait;
use redis::Script;

use super::{RedisStore, corrupt, unavailable};
use crate::StoreResult;
use crate::orgs::{
    DAY_SPEND_RETENTION_DAYS, DaySpend, OrgStore, SpendCount, SpendScope, StoredTeam, StoredUser,
};

const TEAMS: &str = "sandgate:{gateway-orgs}:teams";
const USERS: &str = "sandgate:{gateway-orgs}:users";
const TOTAL: &str = "sandgate:{gateway-orgs}:total";
/// A Pub/Sub channel told of every change of a team or user record.
pub(super) const ORGS_CHANGED: &str = "sandgate:gateway-orgs:changed";

fn day_key(day: u32, scope: SpendScope) -> String {
    format!("sandgate:{{gateway-orgs}}:day:{day}:{}", scope.name())
}

fn total_field(scope: SpendScope, id: &str) -> String {
    format!("{}:{id}", scope.name())
}

/// KEYS[1]: the hash; ARGV: the id, the version expected (0: none stored), the record.
static SWAP: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local current = redis.call('HGET', KEYS[1], ARGV[1])
local version = 0
if current then version = tonumber(cjson.decode(current)['version']) or 0 end
if version ~= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
",
    )
});

fn parse_spend(value: Option<String>) -> f64 {
    value
        .and_then(|value| value.parse::<f64>().ok())
        .filter(|spend| spend.is_finite())
        .unwrap_or(0.0)
}

impl RedisStore {
    async fn swap(&self, hash: &str, id: &str, expected: u64, data: Vec<u8>) -> StoreResult<bool> {
        let mut connection = self.write_connection();
        let stored: i64 = SWAP
            .key(hash)
            .arg(id)
            .arg(expected)
            .arg(data)
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)?;
        if stored == 1 {
            self.replicated(&mut connection).await?;
            super::keys::publish(&mut connection, ORGS_CHANGED).await;
        }
        Ok(stored == 1)
    }

    async fn record<T: serde::de::DeserializeOwned>(
        &self,
        hash: &str,
        id: &str,
    ) -> StoreResult<Option<T>> {
        let data: Option<Vec<u8>> = redis::cmd("HGET")
            .arg(hash)
            .arg(id)
            .query_async(&mut self.connection())
            .await
            .map_err(unavailable)?;
        data.map(|data| serde_json::from_slice(&data).map_err(corrupt))
            .transpose()
    }

    /// Every record of `hash`, by id.
    pub(super) async fn all_records<T: serde::de::DeserializeOwned>(
        &self,
        hash: &str,
    ) -> StoreResult<Vec<T>> {
        let mut all: Vec<(String, Vec<u8>)> = redis::cmd("HGETALL")
            .arg(hash)
            .query_async(&mut self.connection())
            .await
            .map_err(unavailable)?;
        all.sort_by(|left, right| left.0.cmp(&right.0));
        all.into_iter()
            .map(|(_, data)| serde_json::from_slice(&data).map_err(corrupt))
            .collect()
    }

    async fn delete_records(&self, hash: &str, ids: &[String]) -> StoreResult<Vec<String>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        pipe.atomic();
        for id in ids {
            pipe.cmd("HDEL").arg(hash).arg(id);
        }
        let mut connection = self.write_connection();
        let removed: Vec<i64> = pipe
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        self.replicated(&mut connection).await?;
        super::keys::publish(&mut connection, ORGS_CHANGED).await;
        Ok(ids
            .iter()
            .zip(removed)
            .filter(|(_, removed)| *removed == 1)
            .map(|(id, _)| id.clone())
            .collect())
    }
}

#[async_trait]
impl OrgStore for RedisStore {
    async fn put_team(&self, team: &StoredTeam, expected: u64) -> StoreResult<bool> {
        let mut team = team.clone();
        team.version = expected + 1;
        let data = serde_json::to_vec(&team).map_err(corrupt)?;
        self.swap(TEAMS, &team.team_id, expected, data).await
    }

    async fn get_team(&self, team_id: &str) -> StoreResult<Option<StoredTeam>> {
        self.record(TEAMS, team_id).await
    }

    async fn delete_teams(&self, ids: &[String]) -> StoreResult<Vec<String>> {
        self.delete_records(TEAMS, ids).await
    }

    async fn put_user(&self, user: &StoredUser, expected: u64) -> StoreResult<bool> {
        let mut user = user.clone();
        user.version = expected + 1;
        let data = serde_json::to_vec(&user).map_err(corrupt)?;
        self.swap(USERS, &user.user_id, expected, data).await
    }

    async fn get_user(&self, user_id: &str) -> StoreResult<Option<StoredUser>> {
        self.record(USERS, user_id).await
    }

    fn org_changes(&self) -> tokio::sync::watch::Receiver<Option<u64>> {
        self.followed(&self.org_changes, ORGS_CHANGED)
    }

    async fn list_teams(&self) -> StoreResult<Vec<StoredTeam>> {
        self.all_records(TEAMS).await
    }

    async fn list_users(&self) -> StoreResult<Vec<StoredUser>> {
        self.all_records(USERS).await
    }

    async fn delete_users(&self, ids: &[String]) -> StoreResult<Vec<String>> {
        self.delete_records(USERS, ids).await
    }

    async fn add_spend(&self, counts: &[SpendCount]) -> StoreResult<()> {
        if counts.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        pipe.atomic();
        let keep_ms = u64::from(DAY_SPEND_RETENTION_DAYS + 1) * 86_400_000;
        for count in counts {
            let day = day_key(count.day, count.scope);
            pipe.cmd("HINCRBYFLOAT")
                .arg(&day)
                .arg(&count.id)
                .arg(count.amount)
                .ignore();
            pipe.cmd("PEXPIRE").arg(&day).arg(keep_ms).ignore();
            if count.scope.has_total() {
                pipe.cmd("HINCRBYFLOAT")
                    .arg(TOTAL)
                    .arg(total_field(count.scope, &count.id))
                    .arg(count.amount)
                    .ignore();
            }
        }
        let mut connection = self.write_connection();
        pipe.query_async::<()>(&mut connection)
            .await
            .map_err(unavailable)?;
        self.replicated(&mut connection).await
    }

    async fn spend_totals(&self, counters: &[(SpendScope, String)]) -> StoreResult<Vec<f64>> {
        if counters.is_empty() {
            return Ok(Vec::new());
        }
        let mut command = redis::cmd("HMGET");
        command.arg(TOTAL);
        for (scope, id) in counters {
            command.arg(total_field(*scope, id));
        }
        let values: Vec<Option<String>> = command
            .query_async(&mut self.connection())
            .await
            .map_err(unavailable)?;
        Ok(values.into_iter().map(parse_spend).collect())
    }

    async fn spend_by_day(
        &self,
        scope: SpendScope,
        from: u32,
        to: u32,
    ) -> StoreResult<Vec<DaySpend>> {
        let days: Vec<u32> = (from..=to).collect();
        if days.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for day in &days {
            pipe.cmd("HGETALL").arg(day_key(*day, scope));
        }
        let read: Vec<Vec<(String, String)>> = pipe
            .query_async(&mut self.connection())
            .await
            .map_err(unavailable)?;
        let mut spend = Vec::new();
        for (day, counters) in days.into_iter().zip(read) {
            let mut counters: Vec<DaySpend> = counters
                .into_iter()
                .map(|(id, amount)| DaySpend {
                    day,
                    id,
                    amount: parse_spend(Some(amount)),
                })
                .collect();
            counters.sort_by(|a, b| a.id.cmp(&b.id));
            spend.extend(counters);
        }
        Ok(spend)
    }
}
