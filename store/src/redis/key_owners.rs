//! Redis's index of keys by owner (user, team, alias): a set of tokens per owner,
//! `sandgate:{gateway-keys}:owned:<kind>:<id>`, changed in the script that writes the
//! key (on the keys' slot), so that a team's keys are found without reading every key.
//!
//! A key is written only if its record is still the one read before (else read again),
//! so that the entries it leaves are those of the record it replaces. An entry may
//! outlive its key's ownership for a moment (a delete racing an update): reads check
//! each record, so an entry too many is never a key too many.
//!
//! `OWNERS_INDEXED` says the index is whole: a store written before it existed is
//! indexed once, at connect.

use std::sync::LazyLock;

use redis::{AsyncCommands, Script};

use super::keys::{RECORDS, tell_replicas};
use super::{RedisStore, corrupt, unavailable};
use crate::keys::{KeyOwner, StoredKey, oldest_first};
use crate::{StoreError, StoreResult};

const OWNERS_INDEXED: &str = "sandgate:{gateway-keys}:owners-indexed";

/// Records read per `HMGET`.
const READ_BATCH: usize = 1_000;

/// Attempts at writing a key whose record changes under the write, before giving up.
const PUT_ATTEMPTS: usize = 8;

pub(super) fn owner_set(owner: &KeyOwner) -> String {
    format!(
        "sandgate:{{gateway-keys}}:owned:{}:{}",
        owner.kind(),
        owner.id()
    )
}

/// KEYS: the records, then the owner sets the old record is in, then the new one's.
/// ARGV: token, the new record, `1` to create only, `1` when a record was read, that
/// record, the number of old owner sets. Answers 1 (written), 0 (a create found a key),
/// -1 (the record changed since it was read: read again).
static PUT_KEY: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local current = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[3] == '1' and current then return 0 end
if ARGV[4] == '1' then
  if current ~= ARGV[5] then return -1 end
elseif current then
  return -1
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local old = tonumber(ARGV[6])
for i = 2, 1 + old do redis.call('SREM', KEYS[i], ARGV[1]) end
for i = 2 + old, #KEYS do redis.call('SADD', KEYS[i], ARGV[1]) end
return 1
",
    )
});

fn decode(data: &[u8]) -> StoreResult<StoredKey> {
    serde_json::from_slice(data).map_err(corrupt)
}

impl RedisStore {
    /// Writes `key` (with `create`, only where no key has its token) and moves its
    /// owner entries, in one step on the keys' slot.
    pub(super) async fn put_key_indexed(&self, key: &StoredKey, create: bool) -> StoreResult<bool> {
        let data = serde_json::to_vec(key).map_err(corrupt)?;
        let new_sets: Vec<String> = key.owners().iter().map(owner_set).collect();
        let mut connection = self.write_connection();
        for _ in 0..PUT_ATTEMPTS {
            let read: Option<Vec<u8>> = if create {
                None
            } else {
                connection
                    .hget(RECORDS, &key.token)
                    .await
                    .map_err(unavailable)?
            };
            let old_sets: Vec<String> = match &read {
                Some(data) => decode(data)?.owners().iter().map(owner_set).collect(),
                None => Vec::new(),
            };
            let mut invocation = PUT_KEY.prepare_invoke();
            invocation.key(RECORDS);
            for set in old_sets.iter().chain(&new_sets) {
                invocation.key(set);
            }
            invocation
                .arg(&key.token)
                .arg(&data)
                .arg(u8::from(create))
                .arg(u8::from(read.is_some()))
                .arg(read.unwrap_or_default())
                .arg(old_sets.len());
            let outcome: i64 = invocation
                .invoke_async(&mut connection)
                .await
                .map_err(unavailable)?;
            match outcome {
                1 => {
                    self.replicated(&mut connection).await?;
                    tell_replicas(&mut connection).await;
                    return Ok(true);
                }
                0 => return Ok(false),
                _ => continue,
            }
        }
        Err(StoreError::Unavailable(format!(
            "key {} kept changing while it was written; try again",
            key.token
        )))
    }

    /// The owner sets each of `tokens`' records is in (none for a key that is gone).
    pub(super) async fn owner_sets_of(&self, tokens: &[String]) -> StoreResult<Vec<Vec<String>>> {
        let records = self.key_records(tokens).await?;
        Ok(records
            .into_iter()
            .map(|key| {
                key.map(|key| key.owners().iter().map(owner_set).collect())
                    .unwrap_or_default()
            })
            .collect())
    }

    /// The records of `tokens`, in order (`None`: no such key).
    async fn key_records(&self, tokens: &[String]) -> StoreResult<Vec<Option<StoredKey>>> {
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for batch in tokens.chunks(READ_BATCH) {
            pipe.cmd("HMGET").arg(RECORDS).arg(batch);
        }
        let batches: Vec<Vec<Option<Vec<u8>>>> = pipe
            .query_async(&mut self.connection())
            .await
            .map_err(unavailable)?;
        batches
            .into_iter()
            .flatten()
            .map(|data| data.as_deref().map(decode).transpose())
            .collect()
    }

    pub(super) async fn owned_keys(&self, owner: &KeyOwner) -> StoreResult<Vec<StoredKey>> {
        let tokens: Vec<String> = self
            .connection()
            .smembers(owner_set(owner))
            .await
            .map_err(unavailable)?;
        let mut keys: Vec<StoredKey> = self
            .key_records(&tokens)
            .await?
            .into_iter()
            .flatten()
            .filter(|key| owner.owns(key))
            .collect();
        oldest_first(&mut keys);
        Ok(keys)
    }

    /// Indexes every key of a store written before the index, once (replicas doing it at
    /// once add the same entries).
    pub(super) async fn index_key_owners(&self) -> StoreResult<()> {
        let mut connection = self.connection();
        let indexed: bool = connection
            .exists(OWNERS_INDEXED)
            .await
            .map_err(unavailable)?;
        if indexed {
            return Ok(());
        }
        let keys: Vec<StoredKey> = self.all_records(RECORDS).await?;
        let mut pipe = redis::pipe();
        for key in &keys {
            for owner in key.owners() {
                pipe.cmd("SADD")
                    .arg(owner_set(&owner))
                    .arg(&key.token)
                    .ignore();
            }
        }
        pipe.cmd("SET").arg(OWNERS_INDEXED).arg(1).ignore();
        pipe.query_async::<()>(&mut connection)
            .await
            .map_err(unavailable)?;
        if !keys.is_empty() {
            tracing::info!(keys = keys.len(), "indexed the gateway's keys by owner");
        }
        Ok(())
    }
}
