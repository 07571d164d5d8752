//! Agent-server events in Redis. A conversation's keys share its hash tag `{ev:<id>}`, so
//! the one script that appends a batch runs on one Cluster slot:
//! - `sandgate:{ev:<id>}:meta`: a hash, `owner` (who posted first) and `seq` (arrivals);
//! - `sandgate:{ev:<id>}:ids`: a hash, event id → order key (idempotency);
//! - `sandgate:{ev:<id>}:data`: a hash, order key → `<event id>\n<event JSON>`;
//! - `sandgate:{ev:<id>}:order`: a sorted set of order keys, all score 0, read in lexical
//!   order (timestamp, then arrival);
//! - `sandgate:{ev:<id>}:dead`: a list of dead letters' JSON, newest first, capped.
//!
//! Every append renews the keys' TTL to the retention age, so a conversation that stops
//! posting is forgotten whole once its newest event is that old.

use std::sync::LazyLock;

use async_trait::async_trait;
use redis::{AsyncCommands, Script};
use uuid::Uuid;

use super::{RedisStore, corrupt, unavailable};
use crate::StoreResult;
use crate::events::{
    AppendOutcome, DeadLetter, EventPage, EventRetention, EventStats, EventStore, MAX_DEAD_LETTERS,
    NewEvent, StoredEvent, encode_event, order_key_floor, order_key_timestamp, stored_event,
};

/// The most events one append drops for retention; later appends drop the rest (readers
/// never list an event past the age limit meanwhile).
const MAX_DROPS_PER_APPEND: usize = 1_000;

fn keys(conversation: Uuid) -> [String; 5] {
    ["meta", "ids", "data", "order", "dead"]
        .map(|part| format!("sandgate:{{ev:{}}}:{part}", conversation.simple()))
}

/// KEYS: meta, ids, data, order, dead.
/// ARGV: owner, max events, TTL seconds, age floor (an order key), max drops, max dead
/// letters, event count n, then per event: id, timestamp half of its order key, value;
/// then dead letter count m and m dead letters' JSON.
/// Returns {1, stored, duplicates, dropped}, or {0} when another owner posted first.
static APPEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner and owner ~= ARGV[1] then return {0} end
if not owner then redis.call('HSET', KEYS[1], 'owner', ARGV[1]) end
local n = tonumber(ARGV[7])
local stored, duplicates = 0, 0
local i = 8
for _ = 1, n do
  local id, stamp, value = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  i = i + 3
  if redis.call('HEXISTS', KEYS[2], id) == 1 then
    duplicates = duplicates + 1
  else
    local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
    local key = stamp .. string.format('%016x', seq)
    redis.call('HSET', KEYS[2], id, key)
    redis.call('HSET', KEYS[3], key, value)
    redis.call('ZADD', KEYS[4], 0, key)
    stored = stored + 1
  end
end
local m = tonumber(ARGV[i])
for j = 1, m do redis.call('LPUSH', KEYS[5], ARGV[i + j]) end
if m > 0 then redis.call('LTRIM', KEYS[5], 0, tonumber(ARGV[6]) - 1) end
local budget = tonumber(ARGV[5])
local function drop(victims)
  for _, key in ipairs(victims) do
    local value = redis.call('HGET', KEYS[3], key)
    if value then
      local newline = string.find(value, '\n', 1, true)
      if newline then redis.call('HDEL', KEYS[2], string.sub(value, 1, newline - 1)) end
      redis.call('HDEL', KEYS[3], key)
    end
    redis.call('ZREM', KEYS[4], key)
  end
  budget = budget - #victims
  return #victims
end
local dropped = drop(redis.call('ZRANGEBYLEX', KEYS[4], '-', '(' .. ARGV[4], 'LIMIT', 0, budget))
local excess = redis.call('ZCARD', KEYS[4]) - tonumber(ARGV[2])
if excess > 0 and budget > 0 then
  dropped = dropped + drop(redis.call('ZRANGE', KEYS[4], 0, math.min(excess, budget) - 1))
end
for k = 1, 5 do redis.call('EXPIRE', KEYS[k], ARGV[3]) end
return {1, stored, duplicates, dropped}
",
    )
});

/// KEYS: meta, ids, data, order, dead. ARGV: the owner whose events are forgotten.
/// Returns 1 when they were, 0 when the events are another owner's (or there are none).
static FORGET: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
return 1
",
    )
});

#[async_trait]
impl EventStore for RedisStore {
    async fn forget_events(&self, conversation: Uuid, owner: &str) -> StoreResult<bool> {
        let mut invocation = FORGET.prepare_invoke();
        for key in keys(conversation) {
            invocation.key(key);
        }
        invocation.arg(owner);
        let mut connection = self.write_connection();
        let forgotten: bool = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)?;
        self.replicated(&mut connection).await?;
        Ok(forgotten)
    }

    async fn append_events(
        &self,
        conversation: Uuid,
        owner: &str,
        events: &[NewEvent],
        dead_letters: &[DeadLetter],
        retention: EventRetention,
        now: i64,
    ) -> StoreResult<Option<AppendOutcome>> {
        let age_micros = i64::try_from(retention.max_age_seconds)
            .unwrap_or(i64::MAX)
            .saturating_mul(1_000_000);
        let mut invocation = APPEND.prepare_invoke();
        for key in keys(conversation) {
            invocation.key(key);
        }
        invocation
            .arg(owner)
            .arg(retention.max_per_conversation)
            .arg(retention.max_age_seconds.max(1))
            .arg(order_key_floor(now.saturating_sub(age_micros)))
            .arg(MAX_DROPS_PER_APPEND)
            .arg(MAX_DEAD_LETTERS)
            .arg(events.len());
        for event in events {
            let floor = order_key_floor(event.timestamp);
            invocation
                .arg(&event.id)
                .arg(&floor[..16])
                .arg(encode_event(&event.id, &event.json));
        }
        invocation.arg(dead_letters.len());
        for letter in dead_letters {
            invocation.arg(serde_json::to_vec(letter).map_err(corrupt)?);
        }
        let mut connection = self.write_connection();
        let answer: Vec<u64> = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)?;
        self.replicated(&mut connection).await?;
        Ok(match answer.as_slice() {
            [1, stored, duplicates, dropped] => Some(AppendOutcome {
                stored: *stored as u32,
                duplicates: *duplicates as u32,
                dropped: *dropped,
            }),
            _ => None,
        })
    }

    async fn event_stats(&self, conversation: Uuid) -> StoreResult<Option<EventStats>> {
        let [meta, _, _, order, _] = keys(conversation);
        let mut connection = self.connection();
        let (owner, count, newest): (Option<String>, u64, Vec<String>) = redis::pipe()
            .hget(meta, "owner")
            .zcard(&order)
            .zrange(&order, -1, -1)
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        Ok(owner.map(|owner| EventStats {
            owner,
            count,
            last_event_at: newest.first().and_then(|key| order_key_timestamp(key)),
        }))
    }

    async fn list_events(
        &self,
        conversation: Uuid,
        page: &EventPage,
    ) -> StoreResult<Vec<StoredEvent>> {
        let [_, _, data, order, _] = keys(conversation);
        let mut connection = self.connection();
        let limit = page.limit as isize;
        let order_keys: Vec<String> = match (&page.after, page.descending) {
            (None, false) => connection.zrangebylex_limit(&order, "-", "+", 0, limit),
            (Some(after), false) => {
                connection.zrangebylex_limit(&order, format!("({after}"), "+", 0, limit)
            }
            (None, true) => connection.zrevrangebylex_limit(&order, "+", "-", 0, limit),
            (Some(after), true) => {
                connection.zrevrangebylex_limit(&order, format!("({after}"), "-", 0, limit)
            }
        }
        .await
        .map_err(unavailable)?;
        if order_keys.is_empty() {
            return Ok(Vec::new());
        }
        let values: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
            .arg(&data)
            .arg(&order_keys)
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        order_keys
            .into_iter()
            .zip(values)
            // A key whose value is gone was dropped between the two reads.
            .filter_map(|(key, value)| value.map(|value| stored_event(key, &value)))
            .collect()
    }

    async fn dead_letters(&self, conversation: Uuid) -> StoreResult<Vec<DeadLetter>> {
        let [_, _, _, _, dead] = keys(conversation);
        let mut connection = self.connection();
        let letters: Vec<Vec<u8>> = connection
            .lrange(dead, 0, MAX_DEAD_LETTERS as isize - 1)
            .await
            .map_err(unavailable)?;
        letters
            .iter()
            .map(|letter| serde_json::from_slice(letter).map_err(corrupt))
            .collect()
    }
}
