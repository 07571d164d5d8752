//! Admission and settlement of the gateway's calls in Redis (see [`crate::admission`]):
//! one script each, on the `{gateway-keys}` slot, so that every replica's calls are
//! admitted one after the other against the same counters. Per scope (named by
//! [`BudgetScope::name`]):
//!
//! - its spend: the key's counter (`spend:<token>`), the session's (`session:<token>:<s>`),
//!   else `budget:<name>`, a hash of `window` and its `spend`;
//! - `holds:<name>`: a hash, hold id → amount, with `#reserved` (their sum), `#count`,
//!   and `#until`: when it and the leases expire, by Redis's clock (set to twice the
//!   lease ahead whenever a new hold's lease would outlive it, or the scope held nothing;
//!   so their time to live is not read and set at every call);
//! - `leases:<name>`: a sorted set, hold id → when its lease ends (milliseconds); the
//!   scope's next admission drops the holds whose lease has passed;
//! - `rpm:<name>:<minute>` and `tpm:<name>:<minute>`: the minute's calls and tokens,
//!   expiring two minutes on.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use redis::Script;

use super::keys::{RECORDS, session_key, spend_key};
use super::{RedisStore, unavailable};
use crate::StoreResult;
use crate::admission::{Admission, BudgetScope, Refusal, Settlement, minute};
use crate::keys::SESSION_SPEND_TTL_MS;

fn tagged(kind: &str, name: &str) -> String {
    format!("sandgate:{{gateway-keys}}:{kind}:{name}")
}

/// The key of a scope's spend counter, and whether it is a session's (a plain number
/// that expires) rather than a window's hash.
fn counter(scope: &BudgetScope) -> (String, bool) {
    match scope {
        BudgetScope::Key(token) => (spend_key(token), false),
        BudgetScope::Session { token, session } => (session_key(token, session), true),
        other => (tagged("budget", &other.name()), false),
    }
}

/// KEYS: per scope its counter, holds, leases, rpm and tpm. ARGV: the hold id, its
/// amount, now, when its lease ends, the lease in milliseconds, the most to hold, then per
/// scope its kind (`s`: a session counter), window, max budget, max parallel, rpm and tpm
/// limits (`''`: none). Returns `{'held', amount...}` when admitted: per scope what it
/// holds (a string: the call's amount, or with a budget up to a quarter of its room,
/// within the most), else `{'budget', i, spent, reserved}` or `{'rate', i, in_flight,
/// requests, tokens}` for the first scope (0-based) refused.
static ADMIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local hold, amount, now, expiry, lease = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local most = tonumber(ARGV[6])
local n = #KEYS / 5
local function arg(i, j) return ARGV[6 + 6 * i + j] end
local function key(i, j) return KEYS[5 * i + j] end
local refresh = {}
local held = {}
-- Redis's own clock for the keys' expiry: the replicas' clocks may disagree.
local time = redis.call('TIME')
local clock = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
for i = 0, n - 1 do
  local kind, window, max, par, rpm, tpm = arg(i, 1), arg(i, 2), arg(i, 3), arg(i, 4), arg(i, 5), arg(i, 6)
  local holds, leases = key(i, 2), key(i, 3)
  local count = 0
  refresh[i] = true
  held[i] = amount
  if max ~= '' or par ~= '' then
    local expired = redis.call('ZRANGEBYSCORE', leases, '-inf', now)
    for _, gone in ipairs(expired) do
      local held = redis.call('HGET', holds, gone)
      if held then
        redis.call('HDEL', holds, gone)
        redis.call('HINCRBYFLOAT', holds, '#reserved', '-' .. held)
        redis.call('HINCRBY', holds, '#count', -1)
      end
    end
    if #expired > 0 then redis.call('ZREMRANGEBYSCORE', leases, '-inf', now) end
    local state = redis.call('HMGET', holds, '#reserved', '#count', '#until')
    local reserved = tonumber(state[1] or '0') or 0
    count = tonumber(state[2] or '0') or 0
    if count <= 0 then reserved, count = 0, 0 end
    -- An empty scope's leases may be gone (an emptied sorted set is deleted): set again.
    refresh[i] = count == 0 or (tonumber(state[3] or '0') or 0) < clock + tonumber(lease)
    if max ~= '' then
      local spent = 0
      if kind == 's' then
        spent = tonumber(redis.call('GET', key(i, 1)) or '0') or 0
      else
        local stored = redis.call('HMGET', key(i, 1), 'window', 'spend')
        if stored[1] == window then spent = tonumber(stored[2] or '0') or 0 end
      end
      if spent + reserved >= tonumber(max) then
        return {'budget', i, tostring(spent), tostring(reserved)}
      end
      -- A share: a quarter of the room left, within the most, never below the amount.
      local share = math.min(most, (tonumber(max) - spent - reserved) / 4)
      if share > tonumber(amount) then held[i] = tostring(share) end
    end
  end
  if par ~= '' or rpm ~= '' or tpm ~= '' then
    local requests = tonumber(redis.call('GET', key(i, 4)) or '0') or 0
    local tokens = tonumber(redis.call('GET', key(i, 5)) or '0') or 0
    if (par ~= '' and count >= tonumber(par)) or (rpm ~= '' and requests >= tonumber(rpm))
      or (tpm ~= '' and tokens >= tonumber(tpm)) then
      return {'rate', i, count, requests, tokens}
    end
  end
end
for i = 0, n - 1 do
  local max, par, rpm = arg(i, 3), arg(i, 4), arg(i, 5)
  if max ~= '' or par ~= '' then
    local holds, leases = key(i, 2), key(i, 3)
    redis.call('HINCRBYFLOAT', holds, '#reserved', held[i])
    redis.call('HINCRBY', holds, '#count', 1)
    redis.call('ZADD', leases, expiry, hold)
    -- Kept as long as the longest lease in them (replicas may have different ones).
    if refresh[i] then
      redis.call('HSET', holds, hold, held[i], '#until', clock + 2 * tonumber(lease))
      redis.call('PEXPIRE', holds, 2 * tonumber(lease))
      redis.call('PEXPIRE', leases, 2 * tonumber(lease))
    else
      redis.call('HSET', holds, hold, held[i])
    end
  end
  if rpm ~= '' then
    redis.call('INCR', key(i, 4))
    redis.call('PEXPIRE', key(i, 4), 120000)
  end
end
local answer = {'held'}
for i = 0, n - 1 do answer[i + 2] = held[i] end
return answer
",
    )
});

/// KEYS: the key records, per spend item its counter and tpm counter, per consumed share
/// its scopes' holds, then per group of releases its scope's holds and leases. ARGV: the
/// session TTL, the number of spend items, per item its kind (`s`: a session counter), its
/// key's token (`''`: a scope that outlives keys), window, amount and tokens, the number
/// of consumed shares, per share its hold id, the amount taken off it and its number of
/// scopes, then per group of releases (one scope's, at most [`RELEASES_AT_ONCE`]) their
/// number and their hold ids. Spend first, then shares, then releases: no moment counts
/// neither. A group's holds go in one command each (read,
/// deleted, their sum taken off), whatever their number.
static SETTLE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local ttl, items = ARGV[1], tonumber(ARGV[2])
local a = 3
for i = 0, items - 1 do
  local counter, tpm = KEYS[2 + 2 * i], KEYS[3 + 2 * i]
  local kind, token, window, amount, tokens = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  a = a + 5
  if token == '' or redis.call('HEXISTS', KEYS[1], token) == 1 then
    if kind == 's' then
      redis.call('INCRBYFLOAT', counter, amount)
      redis.call('PEXPIRE', counter, ttl)
    else
      if redis.call('HGET', counter, 'window') ~= window then
        redis.call('HSET', counter, 'window', window, 'spend', '0')
      end
      redis.call('HINCRBYFLOAT', counter, 'spend', amount)
    end
  end
  if tokens ~= '0' then
    redis.call('INCRBY', tpm, tokens)
    redis.call('PEXPIRE', tpm, 120000)
  end
end
local k = 2 + 2 * items
local consumed = tonumber(ARGV[a])
a = a + 1
for _ = 1, consumed do
  local hold, amount, m = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  a = a + 3
  for j = 0, m - 1 do
    local held = tonumber(redis.call('HGET', KEYS[k + j], hold) or '')
    if held then
      local taken = math.min(held, amount)
      redis.call('HINCRBYFLOAT', KEYS[k + j], hold, -taken)
      redis.call('HINCRBYFLOAT', KEYS[k + j], '#reserved', -taken)
    end
  end
  k = k + m
end
while a <= #ARGV do
  local n, holds, leases = tonumber(ARGV[a]), KEYS[k], KEYS[k + 1]
  local ids = {unpack(ARGV, a + 1, a + n)}
  a, k = a + 1 + n, k + 2
  local sum, count = 0, 0
  for _, held in ipairs(redis.call('HMGET', holds, unpack(ids))) do
    if held then sum, count = sum + tonumber(held), count + 1 end
  end
  if count > 0 then
    redis.call('HDEL', holds, unpack(ids))
    redis.call('HINCRBYFLOAT', holds, '#reserved', -sum)
    if redis.call('HINCRBY', holds, '#count', -count) <= 0 then
      redis.call('HSET', holds, '#reserved', '0', '#count', '0')
    end
  end
  redis.call('ZREM', leases, unpack(ids))
end
return items
",
    )
});

/// A scope's releases in one group of the settlement script at most (within Lua's
/// bound on a call's arguments).
const RELEASES_AT_ONCE: usize = 1000;

fn limit<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(String::new, |value| value.to_string())
}

fn number(value: &redis::Value) -> f64 {
    match value {
        redis::Value::Int(number) => *number as f64,
        redis::Value::BulkString(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| text.parse().ok())
            .unwrap_or(0.0),
        _ => 0.0,
    }
}

pub(super) async fn admit(
    store: &RedisStore,
    admission: &Admission,
) -> StoreResult<Result<Vec<f64>, Refusal>> {
    let minute = minute(admission.now_ms);
    let mut invocation = ADMIT.prepare_invoke();
    invocation
        .arg(&admission.hold)
        .arg(admission.amount)
        .arg(admission.now_ms)
        .arg(admission.now_ms.saturating_add(admission.lease_ms))
        .arg(admission.lease_ms)
        .arg(admission.most.max(admission.amount));
    for limits in &admission.scopes {
        let name = limits.scope.name();
        let (counter, session) = counter(&limits.scope);
        invocation
            .key(counter)
            .key(tagged("holds", &name))
            .key(tagged("leases", &name))
            .key(tagged("rpm", &format!("{name}:{minute}")))
            .key(tagged("tpm", &format!("{name}:{minute}")))
            .arg(if session { "s" } else { "w" })
            .arg(limits.window)
            .arg(limit(limits.max_budget))
            .arg(limit(limits.max_parallel_requests))
            .arg(limit(limits.rpm_limit))
            .arg(limit(limits.tpm_limit));
    }
    let mut connection = store.write_connection();
    let answer: redis::Value = invocation
        .invoke_async(&mut connection)
        .await
        .map_err(unavailable)?;
    let redis::Value::Array(parts) = answer else {
        return Err(crate::StoreError::Corrupt(
            "the admission script's answer".into(),
        ));
    };
    if matches!(parts.first(), Some(redis::Value::BulkString(kind)) if kind == b"held") {
        return Ok(Ok(parts[1..].iter().map(number).collect()));
    }
    let scope = parts
        .get(1)
        .map(|index| number(index) as usize)
        .and_then(|index| admission.scopes.get(index))
        .map(|limits| limits.scope.clone())
        .ok_or_else(|| crate::StoreError::Corrupt("the admission script's answer".into()))?;
    let value = |index: usize| parts.get(index).map_or(0.0, number);
    let budget = matches!(parts.first(), Some(redis::Value::BulkString(kind)) if kind == b"budget");
    Ok(Err(if budget {
        Refusal::Budget {
            max_budget: admission
                .scopes
                .iter()
                .find(|limits| limits.scope == scope)
                .and_then(|limits| limits.max_budget)
                .unwrap_or(0.0),
            scope,
            spent: value(2),
            reserved: value(3),
        }
    } else {
        Refusal::Rate {
            scope,
            in_flight: value(2) as u64,
            requests: value(3) as u64,
            tokens: value(4) as u64,
        }
    }))
}

fn corrupt(err: impl std::fmt::Display) -> crate::StoreError {
    crate::StoreError::Corrupt(err.to_string())
}

/// What each scope spent in its window: one read of their counters, all on one slot.
pub(super) async fn budget_spend(
    store: &RedisStore,
    scopes: &[(BudgetScope, u64)],
) -> StoreResult<Vec<f64>> {
    if scopes.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for (scope, _) in scopes {
        match counter(scope) {
            (counter, true) => pipe.cmd("GET").arg(counter),
            (counter, false) => pipe.cmd("HMGET").arg(counter).arg("window").arg("spend"),
        };
    }
    let mut connection = store.connection();
    let values: Vec<redis::Value> = pipe
        .query_async(&mut connection)
        .await
        .map_err(unavailable)?;
    let spend = |value: Option<String>| value.and_then(|value| value.parse::<f64>().ok());
    scopes
        .iter()
        .zip(values)
        .map(|((scope, window), value)| {
            let spent = if counter(scope).1 {
                spend(redis::from_redis_value(value).map_err(corrupt)?)
            } else {
                let (counted, spent): (Option<u64>, Option<String>) =
                    redis::from_redis_value(value).map_err(corrupt)?;
                spend(spent).filter(|_| counted == Some(*window))
            };
            Ok(spent.unwrap_or(0.0))
        })
        .collect()
}

/// Sets `scope`'s spend in `window` (a scope that outlives keys: no key to check).
pub(super) async fn set_budget_spend(
    store: &RedisStore,
    scope: &BudgetScope,
    window: u64,
    spend: f64,
) -> StoreResult<()> {
    let (counter, _) = counter(scope);
    let mut connection = store.write_connection();
    redis::cmd("HSET")
        .arg(counter)
        .arg("window")
        .arg(window)
        .arg("spend")
        .arg(spend)
        .query_async::<()>(&mut connection)
        .await
        .map_err(unavailable)?;
    store.replicated(&mut connection).await?;
    // Every replica gives back its shares of the scope's budget, granted on the spend
    // before.
    super::keys::publish(&mut connection, super::orgs::ORGS_CHANGED).await;
    Ok(())
}

pub(super) async fn settle(store: &RedisStore, settlement: &Settlement) -> StoreResult<()> {
    if settlement.spend.is_empty()
        && settlement.consumed.is_empty()
        && settlement.releases.is_empty()
    {
        return Ok(());
    }
    let minute = minute(settlement.now_ms);
    let mut invocation = SETTLE.prepare_invoke();
    invocation
        .key(RECORDS)
        .arg(SESSION_SPEND_TTL_MS)
        .arg(settlement.spend.len());
    for item in &settlement.spend {
        let (counter, session) = counter(&item.scope);
        invocation
            .key(counter)
            .key(tagged("tpm", &format!("{}:{minute}", item.scope.name())))
            .arg(if session { "s" } else { "w" })
            .arg(item.scope.key_token().unwrap_or(""))
            .arg(item.window)
            .arg(item.amount)
            .arg(item.tokens);
    }
    invocation.arg(settlement.consumed.len());
    for consume in &settlement.consumed {
        invocation
            .arg(&consume.hold)
            .arg(consume.amount)
            .arg(consume.scopes.len());
        for scope in &consume.scopes {
            invocation.key(tagged("holds", &scope.name()));
        }
    }
    // Released holds by scope: a busy replica's settlement releases many calls' holds of
    // the same few scopes.
    let mut releases: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for release in &settlement.releases {
        for scope in &release.scopes {
            releases
                .entry(scope.name())
                .or_default()
                .push(&release.hold);
        }
    }
    for (name, holds) in &releases {
        for group in holds.chunks(RELEASES_AT_ONCE) {
            invocation
                .key(tagged("holds", name))
                .key(tagged("leases", name))
                .arg(group.len())
                .arg(group);
        }
    }
    let mut connection = store.write_connection();
    invocation
        .invoke_async::<i64>(&mut connection)
        .await
        .map_err(unavailable)?;
    // Spend changes publish nothing: the gateway's kept reads are of key records, and a
    // budget is judged by the store's admission, not by what a replica kept.
    store.replicated(&mut connection).await
}
