//! The runtime API key's quotas in Redis, admitted by one script so that replicas sharing
//! the store count together, exactly:
//!
//! - `sandgate:quota:{<key>}:pending`: a sorted set, session → until when its admitted
//!   start counts as held whatever the sandbox records show;
//! - `sandgate:quota:{<key>}:starts`: a sorted set of the starts admitted, scored by when:
//!   the rate counts those of the last window.
//!
//! Both share a hash tag (one Cluster slot). Time is the Redis server's, one clock for
//! every replica.

use std::sync::LazyLock;

use redis::Script;

use super::{RedisStore, unavailable};
use crate::StoreResult;
use crate::admin::{StartAdmission, StartQuota};

/// KEYS: pending, starts. ARGV: max runtimes (-1: none), start rate (-1: none), the
/// rate's window (ms), pending for (ms), the session, a unique id for the start, then the
/// sessions the records show held. Returns `{0}` admitted, `{1, holding}` past
/// `max_runtimes`, `{2}` past the start rate.
static ADMIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local max, rate = tonumber(ARGV[1]), tonumber(ARGV[2])
local window, pending_for = tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if max >= 0 then
  local held = {}
  local holding = 0
  for i = 7, #ARGV do
    if not held[ARGV[i]] then
      held[ARGV[i]] = true
      holding = holding + 1
    end
  end
  for _, session in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    if not held[session] then
      holding = holding + 1
    end
  end
  if holding >= max then
    return {1, holding}
  end
end
if rate >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  if redis.call('ZCARD', KEYS[2]) >= rate then
    return {2, 0}
  end
  redis.call('ZADD', KEYS[2], now, ARGV[6])
  redis.call('PEXPIRE', KEYS[2], window)
end
redis.call('ZADD', KEYS[1], now + pending_for, ARGV[5])
redis.call('PEXPIRE', KEYS[1], pending_for)
return {0, 0}
",
    )
});

fn key_of(key: &str, what: &str) -> String {
    format!("sandgate:quota:{{{key}}}:{what}")
}

pub(super) async fn admit_start(
    store: &RedisStore,
    quota: &StartQuota<'_>,
) -> StoreResult<StartAdmission> {
    let mut connection = store.write_connection();
    let mut script = ADMIT.key(key_of(quota.key, "pending"));
    script
        .key(key_of(quota.key, "starts"))
        .arg(
            quota
                .max_runtimes
                .map_or(-1, |max| i64::try_from(max).unwrap_or(i64::MAX)),
        )
        .arg(quota.start_rate.map_or(-1, |(rate, _)| i64::from(rate)))
        .arg(
            quota
                .start_rate
                .map_or(1, |(_, window)| window.as_millis().max(1) as u64),
        )
        .arg(quota.pending_for.as_millis().max(1) as u64)
        .arg(quota.session)
        .arg(uuid::Uuid::new_v4().to_string());
    for session in quota.held {
        script.arg(session);
    }
    let (decision, holding): (i64, u64) = script
        .invoke_async(&mut connection)
        .await
        .map_err(unavailable)?;
    store.replicated(&mut connection).await?;
    Ok(match decision {
        0 => StartAdmission::Admitted,
        1 => StartAdmission::MaxRuntimes { holding },
        _ => StartAdmission::StartRate,
    })
}

pub(super) async fn release_start(store: &RedisStore, key: &str, session: &str) -> StoreResult<()> {
    let mut connection = store.write_connection();
    redis::cmd("ZREM")
        .arg(key_of(key, "pending"))
        .arg(session)
        .query_async::<()>(&mut connection)
        .await
        .map_err(unavailable)
}
