//! The reconciler's lease in Redis and its fencing token (see the keys in the parent
//! module): taken and kept by one holder at a time, its token raised in every bucket on a
//! cluster before the holder writes, so that no earlier holder's fenced write lands.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::KIND;
use crate::StoreResult;
use crate::redis::{RedisStore, unavailable};

fn lease_key(name: &str) -> String {
    format!("sandgate:{{{KIND}}}:lease:{name}")
}

fn lease_token_key(name: &str) -> String {
    format!("sandgate:{{{KIND}}}:lease-token:{name}")
}

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

impl RedisStore {
    /// Takes (or keeps) the lease `name` for `holder`; its fencing token, none when another
    /// holder has it (see `SandboxStore::acquire_lease`).
    pub(super) async fn acquire(
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

    /// Gives up the lease `name`, when `holder` has it.
    pub(super) async fn release(&self, name: &str, holder: &str) -> StoreResult<()> {
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
