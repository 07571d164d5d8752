//! Sandboxes in Redis. A sandbox's keys are those of its bucket (see
//! [`Layout`](super::cluster::Layout)), whose hash tag is `{sandboxes}` on one Redis and
//! `{sandboxes:<n>}` on a cluster, so that the scripts that keep records and indexes
//! consistent run on one slot while a cluster's sandboxes spread over its masters. In
//! each bucket (`<tag>` its hash tag):
//! - `sandgate:<tag>:records`: a hash, runtime id → the record's JSON;
//! - `sandgate:<tag>:versions`: a hash, runtime id → the record's version;
//! - `sandgate:<tag>:sessions`: a hash, session id → runtime id;
//! - `sandgate:<tag>:warm:<claim key>`: a set of the warm sandboxes a start with that claim
//!   key may take;
//! - `sandgate:<tag>:sweep:<pooled|paused|stopped>`: a sorted set per sweep index, runtime
//!   id → its position there (see [`SweepIndex`]);
//! - `sandgate:<tag>:lease-token:<name>`: the highest fencing token of the lease `name`
//!   this bucket has seen, which its fenced writes check.
//!
//! And once, in `{sandboxes}`:
//! - `sandgate:{sandboxes}:lease:<name>`: the holder of a lease, with a TTL;
//! - `sandgate:{sandboxes}:lease-token:<name>`: the lease's fencing token, which grows
//!   each time the lease passes to a holder (no TTL: it must never go back). On one Redis
//!   it is also the bucket's; on a cluster a holder raises every bucket's to it before it
//!   writes, so that no write of an earlier holder lands from then on.

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use rand::seq::SliceRandom;
use redis::Script;

use super::cluster::Bucket;
use super::{RedisStore, corrupt, keyed, unavailable};
use crate::sandboxes::{Fence, SandboxStore, StoredSandbox, SweepIndex};
use crate::{StoreError, StoreResult};

/// The hash tag's kind, and the lease's keys' tag.
const KIND: &str = "sandboxes";

fn lease_key(name: &str) -> String {
    format!("sandgate:{{{KIND}}}:lease:{name}")
}

fn lease_token_key(name: &str) -> String {
    format!("sandgate:{{{KIND}}}:lease-token:{name}")
}

/// One bucket's keys.
struct Keys(String);

impl Keys {
    fn of(bucket: Bucket) -> Self {
        Self(bucket.tag(KIND))
    }

    fn records(&self) -> String {
        format!("sandgate:{}:records", self.0)
    }

    fn versions(&self) -> String {
        format!("sandgate:{}:versions", self.0)
    }

    fn sessions(&self) -> String {
        format!("sandgate:{}:sessions", self.0)
    }

    fn warm(&self, claim_key: &str) -> String {
        format!("sandgate:{}:warm:{claim_key}", self.0)
    }

    fn sweep(&self, index: SweepIndex) -> String {
        format!("sandgate:{}:sweep:{}", self.0, index.name())
    }

    fn lease_token(&self, name: &str) -> String {
        format!("sandgate:{}:lease-token:{name}", self.0)
    }

    /// A write's fence as a script's key and argument: this bucket's token of the lease
    /// and the holder's, or (unfenced) a token key no lease uses and an empty token, which
    /// the script skips.
    fn fence(&self, fence: Option<&Fence>) -> (String, String) {
        match fence {
            Some(fence) => (self.lease_token(&fence.lease), fence.token.to_string()),
            None => (self.lease_token(""), String::new()),
        }
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
/// Returns 1 when written, 0 at another version, -1 when the fence's lease moved on (the
/// bucket has seen a higher token; one it has not seen yet it keeps from then on).
static PUT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if ARGV[12] ~= '' then
  local seen = tonumber(redis.call('GET', KEYS[8]) or '0')
  if tonumber(ARGV[12]) < seen then return -1 end
  if tonumber(ARGV[12]) > seen then redis.call('SET', KEYS[8], ARGV[12]) end
end
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
/// the fence's lease moved on (as [`PUT`]).
static DELETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if ARGV[6] ~= '' then
  local seen = tonumber(redis.call('GET', KEYS[6]) or '0')
  if tonumber(ARGV[6]) < seen then return -1 end
  if tonumber(ARGV[6]) > seen then redis.call('SET', KEYS[6], ARGV[6]) end
end
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
for index = 1, 4 do
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

/// KEYS: a bucket's token of a lease. ARGV: the lease's token. Raises the bucket's to it.
static RAISE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if tonumber(ARGV[1]) > tonumber(redis.call('GET', KEYS[1]) or '0') then
  redis.call('SET', KEYS[1], ARGV[1])
end
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
    /// The keys of the bucket that holds `runtime_id`.
    fn sandbox_keys(&self, runtime_id: &str) -> Keys {
        Keys::of(self.layout.bucket(runtime_id.as_bytes()))
    }

    /// Every bucket's keys.
    fn every_bucket(&self) -> impl Iterator<Item = Keys> {
        self.layout.buckets().map(Keys::of)
    }

    /// Puts `records`, all of one bucket, in their sweep indexes (see
    /// `reindex_sandboxes`): where each stands is read in one round trip, and only a
    /// misplaced one costs a version-checked fix.
    async fn reindex(&self, keys: &Keys, records: &[StoredSandbox]) -> StoreResult<usize> {
        if records.is_empty() {
            return Ok(0);
        }
        let mut connection = self.connection();
        let indexes = SweepIndex::ALL.map(|index| keys.sweep(index));
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
                .key(keys.versions())
                .key(&indexes[0])
                .key(&indexes[1])
                .key(&indexes[2])
                .key(&indexes[3])
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

    /// The records of `ids` that exist, each read from its bucket (one `HMGET` per
    /// bucket).
    async fn records(&self, ids: &[String]) -> StoreResult<Vec<StoredSandbox>> {
        let mut buckets: Vec<(String, Vec<&String>)> = Vec::new();
        for id in ids {
            let key = self.sandbox_keys(id).records();
            match buckets.iter_mut().find(|(records, _)| *records == key) {
                Some((_, members)) => members.push(id),
                None => buckets.push((key, vec![id])),
            }
        }
        let records: Vec<Vec<Option<Vec<u8>>>> = self
            .spread(
                buckets
                    .into_iter()
                    .map(|(key, members)| keyed("HMGET", key, members))
                    .collect(),
            )
            .await?;
        records
            .iter()
            .flatten()
            .flatten()
            .map(|data| decode(data))
            .collect()
    }

    /// One bucket's sandboxes in `index` up to `until_ms`, at most `limit` of them.
    async fn swept_in_bucket(
        &self,
        keys: Keys,
        index: SweepIndex,
        until_ms: i64,
        limit: usize,
    ) -> StoreResult<Vec<StoredSandbox>> {
        let key = keys.sweep(index);
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
            .arg(keys.records())
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

    /// One bucket's sweep indexes repaired (see `reindex_sandboxes`).
    async fn reindex_bucket(&self, keys: Keys) -> StoreResult<usize> {
        let mut connection = self.connection();
        let mut cursor = 0_u64;
        let mut changed = 0;
        loop {
            let (next, page): (u64, Vec<(String, Vec<u8>)>) = redis::cmd("HSCAN")
                .arg(keys.records())
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
            changed += self.reindex(&keys, &records).await?;
            if next == 0 {
                return Ok(changed);
            }
            cursor = next;
        }
    }
}

#[async_trait]
impl SandboxStore for RedisStore {
    async fn sandboxes(&self) -> StoreResult<Vec<StoredSandbox>> {
        let buckets: Vec<Vec<(String, Vec<u8>)>> = self
            .spread(
                self.every_bucket()
                    .map(|keys| {
                        let mut command = redis::cmd("HGETALL");
                        command.arg(keys.records());
                        command
                    })
                    .collect(),
            )
            .await?;
        buckets
            .iter()
            .flatten()
            .map(|(_, data)| decode(data))
            .collect()
    }

    async fn sandbox(&self, runtime_id: &str) -> StoreResult<Option<StoredSandbox>> {
        let mut connection = self.connection();
        let data: Option<Vec<u8>> = redis::cmd("HGET")
            .arg(self.sandbox_keys(runtime_id).records())
            .arg(runtime_id)
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        data.map(|data| decode(&data)).transpose()
    }

    async fn sandbox_for_session(&self, session_id: &str) -> StoreResult<Option<StoredSandbox>> {
        // A session's entry is in its sandbox's bucket: every bucket is asked.
        let ids: Vec<Option<String>> = self
            .spread(
                self.every_bucket()
                    .map(|keys| keyed("HGET", keys.sessions(), session_id))
                    .collect(),
            )
            .await?;
        match ids.into_iter().flatten().next() {
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
        let buckets = futures::future::try_join_all(
            self.every_bucket()
                .map(|keys| self.swept_in_bucket(keys, index, until_ms, limit)),
        )
        .await?;
        let mut records: Vec<StoredSandbox> = buckets.into_iter().flatten().collect();
        if self.layout.is_cluster() {
            // The first `limit` of all: each bucket's first `limit`, merged by position.
            records.sort_by_key(|record| record.sweep_index().map(|(_, position)| position));
            records.truncate(limit);
        }
        Ok(records)
    }

    async fn reindex_sandboxes(&self) -> StoreResult<usize> {
        let changed = futures::future::try_join_all(
            self.every_bucket().map(|keys| self.reindex_bucket(keys)),
        )
        .await?;
        Ok(changed.into_iter().sum())
    }

    async fn warm_sandboxes(
        &self,
        claim_key: &str,
        limit: usize,
    ) -> StoreResult<Vec<StoredSandbox>> {
        let buckets: Vec<Vec<String>> = self
            .spread(
                self.every_bucket()
                    .map(|keys| keyed("SRANDMEMBER", keys.warm(claim_key), limit))
                    .collect(),
            )
            .await?;
        let mut ids: Vec<String> = buckets.into_iter().flatten().collect();
        if self.layout.is_cluster() {
            // Random candidates of all the buckets, as SRANDMEMBER picks from one.
            ids.shuffle(&mut rand::rng());
            ids.truncate(limit);
        }
        self.records(&ids).await
    }

    async fn put_sandbox(
        &self,
        previous: Option<&StoredSandbox>,
        next: &StoredSandbox,
        fence: Option<&Fence>,
    ) -> StoreResult<bool> {
        let keys = self.sandbox_keys(&next.runtime_id);
        let (fence_key, fence_token) = keys.fence(fence);
        let json = serde_json::to_vec(next).map_err(corrupt)?;
        let previous_warm = previous.and_then(StoredSandbox::warm_index);
        let next_warm = next.warm_index();
        let previous_sweep = previous.and_then(StoredSandbox::sweep_index);
        let next_sweep = next.sweep_index();
        let mut connection = self.write_connection();
        let answer: i64 = PUT
            .key(keys.records())
            .key(keys.versions())
            .key(keys.sessions())
            .key(keys.warm(previous_warm.unwrap_or_default()))
            .key(keys.warm(next_warm.unwrap_or_default()))
            .key(keys.sweep(previous_sweep.map_or(SweepIndex::Pooled, |(index, _)| index)))
            .key(keys.sweep(next_sweep.map_or(SweepIndex::Pooled, |(index, _)| index)))
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
        let keys = self.sandbox_keys(&current.runtime_id);
        let (fence_key, fence_token) = keys.fence(fence);
        let warm = current.warm_index();
        let sweep = current.sweep_index();
        let mut connection = self.write_connection();
        let answer: i64 = DELETE
            .key(keys.records())
            .key(keys.versions())
            .key(keys.sessions())
            .key(keys.warm(warm.unwrap_or_default()))
            .key(keys.sweep(sweep.map_or(SweepIndex::Pooled, |(index, _)| index)))
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
        if token == 0 {
            return Ok(None);
        }
        if self.layout.is_cluster() {
            // Every bucket learns the token before the holder writes: from then on no
            // earlier holder's write lands anywhere.
            futures::future::try_join_all(self.every_bucket().map(|keys| {
                let mut connection = connection.clone();
                async move {
                    RAISE
                        .key(keys.lease_token(name))
                        .arg(token)
                        .invoke_async::<i64>(&mut connection)
                        .await
                }
            }))
            .await
            .map_err(unavailable)?;
        }
        // A token lost with a primary that died before its replicas had it could be
        // handed out again: the lease is the holder's once they have it (and, on a
        // cluster, every bucket's copy of it).
        self.replicated(&mut connection).await?;
        Ok(Some(token))
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
