//! Session owners in Redis: `sandgate:session-owner:<session digest>`, the owner, with a
//! TTL renewed by each claim of its owner.

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use redis::Script;

use super::{RedisStore, unavailable};
use crate::StoreResult;
use crate::session_owners::SessionOwnerStore;

fn owner_key(session: &str) -> String {
    format!("sandgate:session-owner:{session}")
}

/// KEYS: the session's owner key. ARGV: the claimant, the TTL in milliseconds. Returns
/// the owner: the claimant when there was none (set with the TTL), else the one there
/// (its TTL renewed when it is the claimant).
static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local owner = redis.call('GET', KEYS[1])
if not owner then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return ARGV[1]
end
if owner == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return owner
",
    )
});

#[async_trait]
impl SessionOwnerStore for RedisStore {
    async fn claim_session(
        &self,
        session: &str,
        owner: &str,
        ttl: Duration,
    ) -> StoreResult<String> {
        let mut connection = self.write_connection();
        let owner: String = CLAIM
            .key(owner_key(session))
            .arg(owner)
            .arg(ttl.as_millis().max(1) as u64)
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)?;
        self.replicated(&mut connection).await?;
        Ok(owner)
    }

    async fn own_session(&self, session: &str, owner: &str, ttl: Duration) -> StoreResult<()> {
        let mut connection = self.write_connection();
        redis::cmd("SET")
            .arg(owner_key(session))
            .arg(owner)
            .arg("PX")
            .arg(ttl.as_millis().max(1) as u64)
            .query_async::<()>(&mut connection)
            .await
            .map_err(unavailable)?;
        self.replicated(&mut connection).await
    }
}
