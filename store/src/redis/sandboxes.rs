//! Sandboxes in Redis. A sandbox's keys are those of its bucket (see
//! [`Layout`](super::cluster::Layout)), whose hash tag is `{sandboxes}` on one Redis and
//! `{sandboxes:<n>}` on a cluster, so that the scripts that keep records and indexes
//! consistent run on one slot while a cluster's sandboxes spread over its masters. In
//! each bucket (`<tag>` its hash tag):
//! - `sandgate:<tag>:records`: a hash, runtime id → the record's JSON;
//! - `sandgate:<tag>:versions`: a hash, runtime id → the record's version;
//! - `sandgate:<tag>:sessions`: a hash, session id → runtime id;
//! - `sandgate:<tag>:addresses`: a hash, source address → runtime id, of the live
//!   sandboxes (`StoredSandbox::address_index`);
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
//!
//! The lease's scripts are in [`leases`], the sweep indexes' reads and repair in [`sweep`].

mod leases;
mod sweep;

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use rand::seq::SliceRandom;
use redis::Script;

use super::cluster::Bucket;
use super::{RedisStore, corrupt, keyed, unavailable};
use crate::sandboxes::{Fence, SandboxStore, StoredSandbox, SweepIndex};
use crate::{StoreError, StoreResult};

/// A Pub/Sub channel told of every write that changes what the address index answers
/// (`SandboxStore::address_changes`).
const ADDRESSES_CHANGED: &str = "sandgate:sandboxes:addresses-changed";

/// The hash tag's kind, and the lease's keys' tag.
const KIND: &str = "sandboxes";

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

    fn addresses(&self) -> String {
        format!("sandgate:{}:addresses", self.0)
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
/// index, next sweep index, the fence's lease token, addresses.
/// ARGV: id, expected version, next version, JSON, in previous warm set (0/1), in next
/// warm set (0/1), previous session, next session, in previous sweep index (0/1), in next
/// sweep index (0/1), position in the next sweep index, the fence's token ('' unfenced),
/// previous address, next address ('' for none).
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
if ARGV[13] ~= '' and ARGV[13] ~= ARGV[14] and redis.call('HGET', KEYS[9], ARGV[13]) == ARGV[1] then
  redis.call('HDEL', KEYS[9], ARGV[13])
end
if ARGV[14] ~= '' then redis.call('HSET', KEYS[9], ARGV[14], ARGV[1]) end
return 1
",
    )
});

/// KEYS: records, versions, sessions, warm set, sweep index, the fence's lease token,
/// addresses.
/// ARGV: id, expected version, in the warm set (0/1), session, in the sweep index (0/1),
/// the fence's token ('' unfenced), address ('' for none). Returns 1 when deleted, 0 at another version, -1 when
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
if ARGV[7] ~= '' and redis.call('HGET', KEYS[7], ARGV[7]) == ARGV[1] then
  redis.call('HDEL', KEYS[7], ARGV[7])
end
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

    async fn sandbox_at_address(&self, address: &str) -> StoreResult<Option<StoredSandbox>> {
        // An address's entry is in its sandbox's bucket: every bucket is asked.
        let ids: Vec<Option<String>> = self
            .spread(
                self.every_bucket()
                    .map(|keys| keyed("HGET", keys.addresses(), address))
                    .collect(),
            )
            .await?;
        for id in ids.into_iter().flatten() {
            let record = self.sandbox(&id).await?;
            if let Some(record) = record.filter(|record| record.address_index() == Some(address)) {
                return Ok(Some(record));
            }
        }
        Ok(None)
    }

    fn address_changes(&self) -> tokio::sync::watch::Receiver<Option<u64>> {
        self.followed(&self.address_changes, ADDRESSES_CHANGED)
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
            .key(keys.addresses())
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
            .arg(
                previous
                    .and_then(StoredSandbox::address_index)
                    .unwrap_or_default(),
            )
            .arg(next.address_index().unwrap_or_default())
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)?;
        let written = written(answer, fence)?;
        if written {
            self.replicated(&mut connection).await?;
            if StoredSandbox::moves_address(previous, Some(next)) {
                super::keys::publish(&mut connection, ADDRESSES_CHANGED).await;
            }
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
            .key(keys.addresses())
            .arg(&current.runtime_id)
            .arg(current.version)
            .arg(flag(warm.is_some()))
            .arg(current.session_id.as_deref().unwrap_or_default())
            .arg(flag(sweep.is_some()))
            .arg(fence_token)
            .arg(current.address_index().unwrap_or_default())
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)?;
        let deleted = written(answer, fence)?;
        if deleted {
            self.replicated(&mut connection).await?;
            if StoredSandbox::moves_address(Some(current), None) {
                super::keys::publish(&mut connection, ADDRESSES_CHANGED).await;
            }
        }
        Ok(deleted)
    }

    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> StoreResult<Option<u64>> {
        self.acquire(name, holder, ttl).await
    }

    async fn release_lease(&self, name: &str, holder: &str) -> StoreResult<()> {
        self.release(name, holder).await
    }
}
