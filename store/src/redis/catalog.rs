//! The one-off upgrade of a catalog written before heads and per-tenant indexes: every
//! record gets its head (`h`) and its entries in the per-tenant indexes, so that tenant
//! queries, which scan only those, miss none of them. Run when a replica connects, until
//! one has finished it (a marker key says so); replicas running it at once do the same
//! idempotent writes.

use std::sync::LazyLock;

use redis::{AsyncCommands, Script};
use uuid::Uuid;

use super::{RedisStore, conversation_key, corrupt, keyed, unavailable};
use crate::{IndexKey, StoreResult};

/// Which layout the catalog follows; absent: the one before heads.
const LAYOUT_KEY: &str = "sandgate:catalog-layout";
const HEADS_LAYOUT: u64 = 2;
/// Records upgraded per round.
const BATCH: usize = 256;

/// KEYS: the record. ARGV: the version the head was taken from, the head. Writes it only
/// over that version: a record written since has its own.
static PUT_HEAD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('HGET', KEYS[1], 'v') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'h', ARGV[2])
return 1
",
    )
});

impl RedisStore {
    pub(super) async fn upgrade_catalog(&self) -> StoreResult<()> {
        let mut connection = self.connection();
        let layout: Option<u64> = connection.get(LAYOUT_KEY).await.map_err(unavailable)?;
        if layout.is_some_and(|layout| layout >= HEADS_LAYOUT) {
            return Ok(());
        }
        let mut after: Option<Uuid> = None;
        let mut upgraded = 0usize;
        loop {
            // Heads of records without one are taken from the records themselves.
            let heads = crate::ConversationStore::scan(self, &IndexKey::All, after, BATCH).await?;
            let Some(last) = heads.last() else { break };
            after = Some(last.id);
            let mut entries = Vec::new();
            for head in &heads {
                let member = head.id.to_string();
                let bucket = self.layout.bucket(head.id.as_bytes());
                entries.extend(
                    head.index_keys().iter().map(|index| {
                        keyed("ZADD", bucket.index_key(&index.encode()), (0, &member))
                    }),
                );
            }
            self.spread::<redis::Value>(entries).await?;
            for head in &heads {
                let encoded = serde_json::to_vec(head).map_err(corrupt)?;
                let mut invocation = PUT_HEAD.prepare_invoke();
                invocation
                    .key(conversation_key(head.id))
                    .arg(head.version)
                    .arg(encoded);
                invocation
                    .invoke_async::<()>(&mut connection)
                    .await
                    .map_err(unavailable)?;
            }
            upgraded += heads.len();
            if heads.len() < BATCH {
                break;
            }
        }
        if upgraded > 0 {
            tracing::info!(
                records = upgraded,
                "gave the catalog's records heads and per-tenant index entries"
            );
        }
        connection
            .set::<_, _, ()>(LAYOUT_KEY, HEADS_LAYOUT)
            .await
            .map_err(unavailable)
    }
}
