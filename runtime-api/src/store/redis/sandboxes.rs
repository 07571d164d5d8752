//! Sandboxes in Redis. Every key shares the hash tag `{sandboxes}`, so the scripts that
//! keep records and indexes consistent run on one Cluster slot:
//! - `sandgate:{sandboxes}:records`: a hash, runtime id → the record's JSON;
//! - `sandgate:{sandboxes}:versions`: a hash, runtime id → the record's version;
//! - `sandgate:{sandboxes}:sessions`: a hash, session id → runtime id;
//! - `sandgate:{sandboxes}:warm:<claim key>`: a set of the warm sandboxes a start with
//!   that claim key may take;
//! - `sandgate:{sandboxes}:sweep:<pooled|paused|stopped>`: a sorted set per sweep index,
//!   runtime id → its position there (see [`SweepIndex`]);
//! - `sandgate:{sandboxes}:lease:<name>`: the holder of a lease, with a TTL;
//! - `sandgate:{sandboxes}:lease-token:<name>`: the lease's fencing token, which grows
//!   each time the lease passes to a holder (no TTL: it must never go back).

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use redis::Script;

use super::{RedisStore, corrupt, unavailable};
use crate::store::sandboxes::{Fence, SandboxStore, StoredSandbox, SweepIndex};
use crate::store::{StoreError, StoreResult};

const RECORDS: &str = "sandgate:{sandboxes}:records";
const VERSIONS: &str = "sandgate:{sandboxes}:versions";
const SESSIONS: &str = "sandgate:{sandboxes}:sessions";

fn warm_key(claim_key: &str) -> String {
    format!("sandgate:{{sandboxes}}:warm:{claim_key}")
}

fn sweep_key(index: SweepIndex) -> String {
    format!("sandgate:{{sandboxes}}:sweep:{}", index.name())
}

fn lease_key(name: &str) -> String {
    format!("sandgate:{{sandboxes}}:lease:{name}")
}

fn lease_token_key(name: &str) -> String {
    format!("sandgate:{{sandboxes}}:lease-token:{name}")
}

/// A write's fence as a script's key and argument: the lease's token key and the token,
/// or (unfenced) a token key no lease uses and an empty token, which the script skips.
fn fence_parts(fence: Option<&Fence>) -> (String, String) {
    match fence {
        Some(fence) => (lease_token_key(&fence.lease), fence.token.to_string()),
        None => (lease_token_key(""), String::new()),
    }
}

/// A write script's answer: 1 written, 0 another writer got there first, -1 fenced out.
fn written(answer: i64, fence: Option<&Fence>) -> StoreResult<bool> {
    match (answer, fence) {
        (-1, Some(fence)) => Err(StoreError::Fenced(fence.lease.clone())),
        (answer, _) => Ok(answer == 1),
    }
}

/// KEYS: records, versions, sessions, previous warm set, next warm set, previous sweep
/// index, next sweep index, the fence's lease token.
/// ARGV: id, expected version, next version, JSON, in previous warm set (0/1), in next
/// warm set (0/1), previous session, next session, in previous sweep index (0/1), in next
/// sweep index (0/1), position in the next sweep index, the fence's token ('' unfenced).
/// Returns 1 when written, 0 at another version, -1 when the fence's lease moved on.
static PUT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if ARGV[12] ~= '' and redis.call('GET', KEYS[8]) ~= ARGV[12] then return -1 end
local current = redis.call('HGET', KEYS[2], ARGV[1])
if (current or '0') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
if ARGV[5] == '1' then redis.call('SREM', KEYS[4], ARGV[1]) end
if ARGV[6] == '1' then redis.call('SADD', KEYS[5], ARGV[1]) end
if ARGV[9] == '1' then redis.call('ZREM', KEYS[6], ARGV[1]) end
if ARGV[10] == '1' then redis.call('ZADD', KEYS[7], ARGV[11], ARGV[1]) end
if ARGV[7] ~= '' and ARGV[7] ~= ARGV[8] and redis.call('HGET', KEYS[3], ARGV[7]) == ARGV[1] then
  redis.call('HDEL', KEYS[3], ARGV[7])
end
if ARGV[8] ~= '' then redis.call('HSET', KEYS[3], ARGV[8], ARGV[1]) end
return 1
",
    )
});

/// KEYS: records, versions, sessions, warm set, sweep index, the fence's lease token.
/// ARGV: id, expected version, in the warm set (0/1), session, in the sweep index (0/1),
/// the fence's token ('' unfenced). Returns 1 when deleted, 0 at another version, -1 when
/// the fence's lease moved on.
static DELETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if ARGV[6] ~= '' and redis.call('GET', KEYS[6]) ~= ARGV[6] then return -1 end
local current = redis.call('HGET', KEYS[2], ARGV[1])
if (current or '0') ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if ARGV[3] == '1' then redis.call('SREM', KEYS[4], ARGV[1]) end
if ARGV[5] == '1' then redis.call('ZREM', KEYS[5], ARGV[1]) end
if ARGV[4] ~= '' and redis.call('HGET', KEYS[3], ARGV[4]) == ARGV[1] then
  redis.call('HDEL', KEYS[3], ARGV[4])
end
return 1
",
    )
});

/// KEYS: versions, then the pooled, paused and stopped sweep indexes. ARGV: id, version,
/// the index it belongs to (1 to 3, 0: none), its position there. Puts the record in its
/// index alone, when it is still at that version. Returns the entries added or dropped.
static REINDEX: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
local changed = 0
for index = 1, 3 do
  if index == tonumber(ARGV[3]) then
    changed = changed + redis.call('ZADD', KEYS[index + 1], 'CH', ARGV[4], ARGV[1])
  else
    changed = changed + redis.call('ZREM', KEYS[index + 1], ARGV[1])
  end
end
return changed
",
    )
});

/// Records a reindex reads at a time.
const REINDEX_PAGE: usize = 256;

/// KEYS: the lease, its token. ARGV: holder, TTL in milliseconds. Returns the token when
/// `holder` has the lease (a new one when it just took it), 0 when another holder has it.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if holder == ARGV[1] then
  local token = redis.call('GET', KEYS[2])
  if token then return tonumber(token) end
end
return redis.call('INCR', KEYS[2])
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
    /// Puts `records` in their sweep indexes (see `reindex_sandboxes`): where each stands
    /// is read in one round trip, and only a misplaced one costs a version-checked fix.
    async fn reindex(&self, records: &[StoredSandbox]) -> StoreResult<usize> {
        if records.is_empty() {
            return Ok(0);
        }
        let mut connection = self.connection();
        let indexes = SweepIndex::ALL.map(sweep_key);
        let mut positions = redis::pipe();
        for record in records {
            for key in &indexes {
                positions.zscore(key, &record.runtime_id);
            }
        }
        let positions: Vec<Option<i64>> = positions
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        let mut changed = 0;
        for (record, found) in records.iter().zip(positions.chunks(indexes.len())) {
            let place = record.sweep_index();
            let expected = SweepIndex::ALL.map(|index| {
                place.and_then(|(belongs, position)| (belongs == index).then_some(position))
            });
            if found == expected.as_slice() {
                continue;
            }
            // The script numbers the indexes from 1, 0 for none.
            let (number, position) = place.map_or((0, 0), |(belongs, position)| {
                (belongs.ordinal() + 1, position)
            });
            let fixed: usize = REINDEX
                .key(VERSIONS)
                .key(&indexes[0])
                .key(&indexes[1])
                .key(&indexes[2])
                .arg(&record.runtime_id)
                .arg(record.version)
                .arg(number)
                .arg(position)
                .invoke_async(&mut connection)
                .await
                .map_err(unavailable)?;
            changed += fixed;
        }
        Ok(changed)
    }

    async fn records(&self, ids: &[String]) -> StoreResult<Vec<StoredSandbox>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut connection = self.connection();
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
        let mut connection = self.connection();
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
        let mut connection = self.connection();
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

    async fn swept_sandboxes(
        &self,
        index: SweepIndex,
        until_ms: i64,
        limit: usize,
    ) -> StoreResult<Vec<StoredSandbox>> {
        let key = sweep_key(index);
        let mut connection = self.connection();
        let ids: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(&key)
            .arg("-inf")
            .arg(until_ms)
            .arg("LIMIT")
            .arg(0)
            .arg(i64::try_from(limit).unwrap_or(-1))
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let records: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
            .arg(RECORDS)
            .arg(&ids)
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        // A member without a record was deleted by a writer that did not know the
        // index; runtime ids are never reused, so it can go without a check.
        let gone: Vec<&String> = ids
            .iter()
            .zip(&records)
            .filter_map(|(id, record)| record.is_none().then_some(id))
            .collect();
        if !gone.is_empty() {
            redis::cmd("ZREM")
                .arg(&key)
                .arg(gone)
                .query_async::<i64>(&mut connection)
                .await
                .map_err(unavailable)?;
        }
        records.iter().flatten().map(|data| decode(data)).collect()
    }

    async fn reindex_sandboxes(&self) -> StoreResult<usize> {
        let mut connection = self.connection();
        let mut cursor = 0_u64;
        let mut changed = 0;
        loop {
            let (next, page): (u64, Vec<(String, Vec<u8>)>) = redis::cmd("HSCAN")
                .arg(RECORDS)
                .arg(cursor)
                .arg("COUNT")
                .arg(REINDEX_PAGE)
                .query_async(&mut connection)
                .await
                .map_err(unavailable)?;
            let records = page
                .iter()
                .map(|(_, data)| decode(data))
                .collect::<StoreResult<Vec<_>>>()?;
            changed += self.reindex(&records).await?;
            if next == 0 {
                return Ok(changed);
            }
            cursor = next;
        }
    }

    async fn warm_sandboxes(
        &self,
        claim_key: &str,
        limit: usize,
    ) -> StoreResult<Vec<StoredSandbox>> {
        let mut connection = self.connection();
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
        fence: Option<&Fence>,
    ) -> StoreResult<bool> {
        let (fence_key, fence_token) = fence_parts(fence);
        let json = serde_json::to_vec(next).map_err(corrupt)?;
        let previous_warm = previous.and_then(StoredSandbox::warm_index);
        let next_warm = next.warm_index();
        let previous_sweep = previous.and_then(StoredSandbox::sweep_index);
        let next_sweep = next.sweep_index();
        let mut connection = self.write_connection();
        let answer: i64 = PUT
            .key(RECORDS)
            .key(VERSIONS)
            .key(SESSIONS)
            .key(warm_key(previous_warm.unwrap_or_default()))
            .key(warm_key(next_warm.unwrap_or_default()))
            .key(sweep_key(
                previous_sweep.map_or(SweepIndex::Pooled, |(index, _)| index),
            ))
            .key(sweep_key(
                next_sweep.map_or(SweepIndex::Pooled, |(index, _)| index),
            ))
            .key(fence_key)
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
            .arg(flag(previous_sweep.is_some()))
            .arg(flag(next_sweep.is_some()))
            .arg(next_sweep.map_or(0, |(_, position)| position))
            .arg(fence_token)
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)?;
        let written = written(answer, fence)?;
        if written {
            self.replicated(&mut connection).await?;
        }
        Ok(written)
    }

    async fn delete_sandbox(
        &self,
        current: &StoredSandbox,
        fence: Option<&Fence>,
    ) -> StoreResult<bool> {
        let (fence_key, fence_token) = fence_parts(fence);
        let warm = current.warm_index();
        let sweep = current.sweep_index();
        let mut connection = self.write_connection();
        let answer: i64 = DELETE
            .key(RECORDS)
            .key(VERSIONS)
            .key(SESSIONS)
            .key(warm_key(warm.unwrap_or_default()))
            .key(sweep_key(
                sweep.map_or(SweepIndex::Pooled, |(index, _)| index),
            ))
            .key(fence_key)
            .arg(&current.runtime_id)
            .arg(current.version)
            .arg(flag(warm.is_some()))
            .arg(current.session_id.as_deref().unwrap_or_default())
            .arg(flag(sweep.is_some()))
            .arg(fence_token)
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)?;
        let deleted = written(answer, fence)?;
        if deleted {
            self.replicated(&mut connection).await?;
        }
        Ok(deleted)
    }

    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> StoreResult<Option<u64>> {
        let mut connection = self.write_connection();
        let token: u64 = ACQUIRE
            .key(lease_key(name))
            .key(lease_token_key(name))
            .arg(holder)
            .arg(ttl.as_millis().max(1) as u64)
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)?;
        if token > 0 {
            // A token lost with a primary that died before its replicas had it could be
            // handed out again: the lease is the holder's once they have it.
            self.replicated(&mut connection).await?;
        }
        Ok((token > 0).then_some(token))
    }

    async fn release_lease(&self, name: &str, holder: &str) -> StoreResult<()> {
        let mut connection = self.connection();
        RELEASE
            .key(lease_key(name))
            .arg(holder)
            .invoke_async::<i64>(&mut connection)
            .await
            .map(drop)
            .map_err(unavailable)
    }
}
