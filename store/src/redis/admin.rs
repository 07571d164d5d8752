//! Runtime management in Redis.
//!
//! - `sandgate:challenge:<challenge>`: a challenge's JSON, with a TTL; taken with `GETDEL`.
//! - `sandgate:rate:<key>`: a rate limit's count in its current window, which expires with
//!   the window (`INCR`, and `PEXPIRE` on the window's first hit).
//! - `sandgate:{warm}:configs`: a hash, name → saved configuration's JSON;
//!   `sandgate:{warm}:images`: a hash, image → the name using it;
//!   `sandgate:{warm}:version`: a random number replaced on every change. The three share a
//!   hash tag, so the scripts that keep them consistent run on one Cluster slot.
//! - the runtime API key's quotas: see [`super::quota`].

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use redis::{AsyncCommands, Script};

use super::{RedisStore, corrupt, unavailable};
use crate::StoreResult;
use crate::admin::{
    ChallengeStore, PutWarmConfig, RateCount, RateLimitStore, StartAdmission, StartQuota,
    StoredChallenge, StoredWarmConfig, WarmConfigSnapshot, WarmConfigStore,
};

const CONFIGS: &str = "sandgate:{warm}:configs";
const IMAGES: &str = "sandgate:{warm}:images";
const VERSION: &str = "sandgate:{warm}:version";

/// KEYS: configs, images, version. ARGV: name, image, JSON, new version.
/// Returns `""` when saved, or the name already using the image.
static PUT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local owner = redis.call('HGET', KEYS[2], ARGV[2])
if owner and owner ~= ARGV[1] then return owner end
local previous = redis.call('HGET', KEYS[1], ARGV[1])
if previous then
  local image = cjson.decode(previous)['image']
  if image ~= ARGV[2] and redis.call('HGET', KEYS[2], image) == ARGV[1] then
    redis.call('HDEL', KEYS[2], image)
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
redis.call('SET', KEYS[3], ARGV[4])
return ''
",
    )
});

/// KEYS: configs, images, version. ARGV: name, new version. Returns 1 when deleted.
static DELETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local previous = redis.call('HGET', KEYS[1], ARGV[1])
if not previous then return 0 end
local image = cjson.decode(previous)['image']
if redis.call('HGET', KEYS[2], image) == ARGV[1] then redis.call('HDEL', KEYS[2], image) end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('SET', KEYS[3], ARGV[2])
return 1
",
    )
});

/// KEYS: the counter. ARGV: the window in milliseconds. Returns the count and the
/// milliseconds until the window ends. A counter left without an expiry (it cannot
/// happen inside this script, but a foreign write could) gets one, rather than counting
/// forever.
static HIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local count = redis.call('INCR', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
if count == 1 or ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
end
return {count, ttl}
",
    )
});

fn challenge_key(challenge: &str) -> String {
    format!("sandgate:challenge:{challenge}")
}

/// A version no other write produced: a random number, so that even a flushed and refilled
/// database never repeats one that a reader still holds.
fn new_version() -> u64 {
    rand::random::<u64>() | 1
}

#[async_trait]
impl ChallengeStore for RedisStore {
    async fn put_challenge(
        &self,
        challenge: &str,
        record: &StoredChallenge,
        ttl: Duration,
    ) -> StoreResult<()> {
        let data = serde_json::to_vec(record).map_err(corrupt)?;
        let mut connection = self.write_connection();
        redis::cmd("SET")
            .arg(challenge_key(challenge))
            .arg(data)
            .arg("PX")
            .arg(ttl.as_millis().max(1) as u64)
            .query_async::<()>(&mut connection)
            .await
            .map_err(unavailable)?;
        self.replicated(&mut connection).await
    }

    async fn take_challenge(&self, challenge: &str) -> StoreResult<Option<StoredChallenge>> {
        let mut connection = self.write_connection();
        let data: Option<Vec<u8>> = connection
            .get_del(challenge_key(challenge))
            .await
            .map_err(unavailable)?;
        // A challenge taken on a primary that dies before its replicas know could be
        // taken again on the new one: single use holds only once they have the take.
        self.replicated(&mut connection).await?;
        data.map(|data| serde_json::from_slice(&data).map_err(corrupt))
            .transpose()
    }
}

#[async_trait]
impl WarmConfigStore for RedisStore {
    async fn warm_config_version(&self) -> StoreResult<u64> {
        let mut connection = self.connection();
        let version: Option<u64> = connection.get(VERSION).await.map_err(unavailable)?;
        Ok(version.unwrap_or(0))
    }

    async fn warm_configs(&self) -> StoreResult<WarmConfigSnapshot> {
        let mut connection = self.connection();
        let (version, entries): (Option<u64>, Vec<(String, Vec<u8>)>) = redis::pipe()
            .atomic()
            .get(VERSION)
            .hgetall(CONFIGS)
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        let mut configs = entries
            .into_iter()
            .map(|(name, data)| Ok((name, serde_json::from_slice(&data).map_err(corrupt)?)))
            .collect::<StoreResult<Vec<_>>>()?;
        configs.sort_by(|(a, _), (b, _)| a.cmp(b));
        Ok(WarmConfigSnapshot {
            version: version.unwrap_or(0),
            configs,
        })
    }

    async fn put_warm_config(
        &self,
        name: &str,
        config: &StoredWarmConfig,
    ) -> StoreResult<PutWarmConfig> {
        let data = serde_json::to_vec(config).map_err(corrupt)?;
        let mut connection = self.write_connection();
        let owner: String = PUT
            .key(CONFIGS)
            .key(IMAGES)
            .key(VERSION)
            .arg(name)
            .arg(&config.image)
            .arg(data)
            .arg(new_version())
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)?;
        self.replicated(&mut connection).await?;
        Ok(if owner.is_empty() {
            PutWarmConfig::Saved
        } else {
            PutWarmConfig::ImageTaken { by: owner }
        })
    }

    async fn delete_warm_config(&self, name: &str) -> StoreResult<bool> {
        let mut connection = self.write_connection();
        let deleted = DELETE
            .key(CONFIGS)
            .key(IMAGES)
            .key(VERSION)
            .arg(name)
            .arg(new_version())
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)?;
        self.replicated(&mut connection).await?;
        Ok(deleted)
    }
}

#[async_trait]
impl RateLimitStore for RedisStore {
    async fn hit(&self, key: &str, window: Duration) -> StoreResult<RateCount> {
        let mut connection = self.connection();
        let (count, resets_in_ms): (u64, i64) = HIT
            .key(format!("sandgate:rate:{key}"))
            .arg(window.as_millis().max(1) as u64)
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)?;
        Ok(RateCount {
            count,
            resets_in: Duration::from_millis(resets_in_ms.max(0) as u64),
        })
    }

    async fn count(&self, key: &str) -> StoreResult<u64> {
        let mut connection = self.connection();
        let count: Option<u64> = redis::cmd("GET")
            .arg(format!("sandgate:rate:{key}"))
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        Ok(count.unwrap_or(0))
    }

    async fn admit_start(&self, quota: &StartQuota<'_>) -> StoreResult<StartAdmission> {
        super::quota::admit_start(self, quota).await
    }

    async fn release_start(&self, key: &str, session: &str) -> StoreResult<()> {
        super::quota::release_start(self, key, session).await
    }
}
