//! Sandboxes in Redis. Every key shares the hash tag `{sandboxes}`, so the scripts that
//! keep records and indexes consistent run on one Cluster slot:
//! - `sandgate:{sandboxes}:records`: a hash, runtime id → the record's JSON;
//! - `sandgate:{sandboxes}:versions`: a hash, runtime id → the record's version;
//! - `sandgate:{sandboxes}:sessions`: a hash, session id → runtime id;
//! - `sandgate:{sandboxes}:warm:<claim key>`: a set of the warm sandboxes a start with
//!   that claim key may take;
//! - `sandgate:{sandboxes}:lease:<name>`: the holder of a lease, with a TTL.

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use redis::Script;

use super::{RedisStore, corrupt, unavailable};
use crate::store::StoreResult;
use crate::store::sandboxes::{SandboxStore, StoredSandbox};

const RECORDS: &str = "sandgate:{sandboxes}:records";
const VERSIONS: &str = "sandgate:{sandboxes}:versions";
const SESSIONS: &str = "sandgate:{sandboxes}:sessions";

fn warm_key(claim_key: &str) -> String {
    format!("sandgate:{{sandboxes}}:warm:{claim_key}")
}

fn lease_key(name: &str) -> String {
    format!("sandgate:{{sandboxes}}:lease:{name}")
}

/// KEYS: records, versions, sessions, previous warm set, next warm set.
/// ARGV: id, expected version, next version, JSON, in previous warm set (0/1), in next
/// warm set (0/1), previous session, next session. Returns 1 when written.
static PUT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local current = redis.call('HGET', KEYS[2], ARGV[1])
if (current or '0') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
if ARGV[5] == '1' then redis.call('SREM', KEYS[4], ARGV[1]) end
if ARGV[6] == '1' then redis.call('SADD', KEYS[5], ARGV[1]) end
if ARGV[7] ~= '' and ARGV[7] ~= ARGV[8] and redis.call('HGET', KEYS[3], ARGV[7]) == ARGV[1] then
  redis.call('HDEL', KEYS[3], ARGV[7])
end
if ARGV[8] ~= '' then redis.call('HSET', KEYS[3], ARGV[8], ARGV[1]) end
return 1
",
    )
});

/// KEYS: records, versions, sessions, warm set. ARGV: id, expected version, in the warm
/// set (0/1), session. Returns 1 when deleted.
static DELETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local current = redis.call('HGET', KEYS[2], ARGV[1])
if (current or '0') ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if ARGV[3] == '1' then redis.call('SREM', KEYS[4], ARGV[1]) end
if ARGV[4] ~= '' and redis.call('HGET', KEYS[3], ARGV[4]) == ARGV[1] then
  redis.call('HDEL', KEYS[3], ARGV[4])
end
return 1
",
    )
});

/// KEYS: the lease. ARGV: holder, TTL in milliseconds. Returns 1 when `holder` has it.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
",
    )
});

/// KEYS: the lease. ARGV: holder.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
",
    )
});

fn decode(data: &[u8]) -> StoreResult<StoredSandbox> {
    serde_json::from_slice(data).map_err(corrupt)
}

fn flag(set: bool) -> &'static str {
    if set { "1" } else { "0" }
}

impl RedisStore {
    async fn records(&self, ids: &[String]) -> StoreResult<Vec<StoredSandbox>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut connection = self.connection.clone();
        let records: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
            .arg(RECORDS)
            .arg(ids)
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        records.iter().flatten().map(|data| decode(data)).collect()
    }
}

#[async_trait]
impl SandboxStore for RedisStore {
    async fn sandboxes(&self) -> StoreResult<Vec<StoredSandbox>> {
        let mut connection = self.connection.clone();
        let records: Vec<(String, Vec<u8>)> = redis::cmd("HGETALL")
            .arg(RECORDS)
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        records.iter().map(|(_, data)| decode(data)).collect()
    }

    async fn sandbox(&self, runtime_id: &str) -> StoreResult<Option<StoredSandbox>> {
        Ok(self
            .records(&[runtime_id.to_owned()])
            .await?
            .into_iter()
            .next())
    }

    async fn sandbox_for_session(&self, session_id: &str) -> StoreResult<Option<StoredSandbox>> {
        let mut connection = self.connection.clone();
        let id: Option<String> = redis::cmd("HGET")
            .arg(SESSIONS)
            .arg(session_id)
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        match id {
            Some(id) => self.sandbox(&id).await,
            None => Ok(None),
        }
    }

    async fn warm_sandboxes(
        &self,
        claim_key: &str,
        limit: usize,
    ) -> StoreResult<Vec<StoredSandbox>> {
        let mut connection = self.connection.clone();
        let ids: Vec<String> = redis::cmd("SRANDMEMBER")
            .arg(warm_key(claim_key))
            .arg(limit)
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        self.records(&ids).await
    }

    async fn put_sandbox(
        &self,
        previous: Option<&StoredSandbox>,
        next: &StoredSandbox,
    ) -> StoreResult<bool> {
        let json = serde_json::to_vec(next).map_err(corrupt)?;
        let previous_warm = previous.and_then(StoredSandbox::warm_index);
        let next_warm = next.warm_index();
        let mut connection = self.connection.clone();
        PUT.key(RECORDS)
            .key(VERSIONS)
            .key(SESSIONS)
            .key(warm_key(previous_warm.unwrap_or_default()))
            .key(warm_key(next_warm.unwrap_or_default()))
            .arg(&next.runtime_id)
            .arg(next.version.saturating_sub(1))
            .arg(next.version)
            .arg(json)
            .arg(flag(previous_warm.is_some()))
            .arg(flag(next_warm.is_some()))
            .arg(
                previous
                    .and_then(|p| p.session_id.as_deref())
                    .unwrap_or_default(),
            )
            .arg(next.session_id.as_deref().unwrap_or_default())
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)
    }

    async fn delete_sandbox(&self, current: &StoredSandbox) -> StoreResult<bool> {
        let warm = current.warm_index();
        let mut connection = self.connection.clone();
        DELETE
            .key(RECORDS)
            .key(VERSIONS)
            .key(SESSIONS)
            .key(warm_key(warm.unwrap_or_default()))
            .arg(&current.runtime_id)
            .arg(current.version)
            .arg(flag(warm.is_some()))
            .arg(current.session_id.as_deref().unwrap_or_default())
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)
    }

    async fn acquire_lease(&self, name: &str, holder: &str, ttl: Duration) -> StoreResult<bool> {
        let mut connection = self.connection.clone();
        ACQUIRE
            .key(lease_key(name))
            .arg(holder)
            .arg(ttl.as_millis().max(1) as u64)
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)
    }

    async fn release_lease(&self, name: &str, holder: &str) -> StoreResult<()> {
        let mut connection = self.connection.clone();
        RELEASE
            .key(lease_key(name))
            .arg(holder)
            .invoke_async::<i64>(&mut connection)
            .await
            .map(drop)
            .map_err(unavailable)
    }
}
