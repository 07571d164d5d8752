//! The conversation catalog on Redis: records swapped by version in one script, their
//! heads, and the index entries scans read (see the layout in [`super`]).

use std::sync::PoisonError;

use async_trait::async_trait;
use redis::AsyncCommands;
use uuid::Uuid;

use super::{RedisStore, conversation_key, corrupt, keyed, unavailable};
use crate::{ConversationHead, ConversationStore, IndexKey, StoreResult, StoredConversation};

#[async_trait]
impl ConversationStore for RedisStore {
    async fn get(&self, id: Uuid) -> StoreResult<Option<StoredConversation>> {
        let mut connection = self.connection();
        let data: Option<Vec<u8>> = connection
            .hget(conversation_key(id), "d")
            .await
            .map_err(unavailable)?;
        data.map(|data| serde_json::from_slice(&data).map_err(corrupt))
            .transpose()
    }

    async fn compare_and_swap(
        &self,
        expected: u64,
        next: &StoredConversation,
    ) -> StoreResult<bool> {
        // The record and a few hundred bytes of bookkeeping, written without regrowing.
        let mut data = Vec::with_capacity(next.record.get().len() + 512);
        serde_json::to_writer(&mut data, next).map_err(corrupt)?;
        let head = serde_json::to_vec(&next.head()).map_err(corrupt)?;
        let member = next.id.to_string();
        // Every index holds it in the same bucket.
        let bucket = self.layout.bucket(next.id.as_bytes());
        let swap = |invocation: &mut redis::ScriptInvocation<'_>| {
            invocation
                .key(conversation_key(next.id))
                .arg(expected)
                .arg(next.version)
                .arg(&data)
                .arg(&head);
        };
        let mut connection = self.write_connection();
        if self.layout.is_cluster() {
            // Index entries first (on their own slots), as on one Redis: an index may hold
            // a member whose write then lost the race (readers re-check), but never misses
            // a written one.
            let entries = next
                .index_keys()
                .iter()
                .map(|index| keyed("ZADD", bucket.index_key(&index.encode()), (0, &member)))
                .collect();
            // On the write's lane: its WAIT covers them too.
            self.spread_on::<redis::Value>(&connection, entries).await?;
            let mut invocation = self.swap.prepare_invoke();
            swap(&mut invocation);
            // Loads the script again where a node has forgotten it.
            let swapped: bool = invocation
                .invoke_async(&mut connection)
                .await
                .map_err(unavailable)?;
            if swapped {
                self.replicated(&mut connection).await?;
            }
            return Ok(swapped);
        }
        // Index entries first, in the same round trip.
        let mut pipe = redis::pipe();
        for index in next.index_keys() {
            pipe.zadd(bucket.index_key(&index.encode()), &member, 0)
                .ignore();
        }
        let mut invocation = self.swap.prepare_invoke();
        swap(&mut invocation);
        pipe.invoke_script(&invocation);
        let (swapped,): (bool,) = match pipe.query_async(&mut connection).await {
            // A pipeline sends the script by its hash only, and a restarted (or failed
            // over, or flushed) server has forgotten it: load it again and retry once, or
            // every delivery would be refused until Sandgate restarts. The index entries
            // the first attempt may have added are idempotent.
            Err(err)
                if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                tracing::info!("Redis lost the compare-and-swap script; loading it again");
                self.swap
                    .prepare_invoke()
                    .load_async(&mut connection)
                    .await
                    .map_err(unavailable)?;
                pipe.query_async(&mut connection)
                    .await
                    .map_err(unavailable)?
            }
            answer => answer.map_err(unavailable)?,
        };
        if swapped {
            self.replicated(&mut connection).await?;
        }
        Ok(swapped)
    }

    /// A no-op write's acknowledgement: the write it repeats may have been made on any
    /// lane, and may still be waiting for its replicas, so every lane waits.
    async fn settled(&self) -> StoreResult<()> {
        if self.min_replicas_ack == 0 {
            return Ok(());
        }
        let lanes = self
            .primary
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .lanes
            .clone();
        futures::future::try_join_all(
            lanes
                .into_iter()
                .map(|mut lane| async move { self.replicated(&mut lane).await }),
        )
        .await
        .map(drop)
    }

    async fn scan(
        &self,
        index: &IndexKey,
        after: Option<Uuid>,
        limit: usize,
    ) -> StoreResult<Vec<ConversationHead>> {
        let min = after.map_or_else(|| "-".to_owned(), |after| format!("({after}"));
        let encoded = index.encode();
        // Each bucket's first `limit` after `after`, merged: the first `limit` of all.
        let pages: Vec<Vec<String>> = self
            .spread(
                self.layout
                    .buckets()
                    .map(|bucket| {
                        let range = (&min, "+", "LIMIT", 0, limit);
                        keyed("ZRANGEBYLEX", bucket.index_key(&encoded), range)
                    })
                    .collect(),
            )
            .await?;
        let mut ids: Vec<String> = pages.into_iter().flatten().collect();
        if self.layout.is_cluster() {
            ids.sort_unstable();
            ids.dedup();
            ids.truncate(limit);
        }
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let heads: Vec<(Option<u64>, Option<Vec<u8>>)> = self
            .spread(
                ids.iter()
                    .map(|id| keyed("HMGET", conversation_key(id), ("v", "h")))
                    .collect(),
            )
            .await?;
        let heads = heads
            .into_iter()
            .map(|(version, head)| {
                let head = head
                    .map(|head| serde_json::from_slice::<ConversationHead>(&head))
                    .transpose()
                    .map_err(corrupt)?;
                // A head of another version than the record's is an older writer's leftover.
                Ok(head.filter(|head| Some(head.version) == version))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        // Records without a current head (written by an older version) are read whole.
        let headless: Vec<Uuid> = ids
            .iter()
            .zip(&heads)
            .filter(|(_, head)| head.is_none())
            .filter_map(|(id, _)| Uuid::parse_str(id).ok())
            .collect();
        let mut whole = self.get_many(&headless).await?.into_iter().peekable();
        let mut found = Vec::with_capacity(ids.len());
        for (id, head) in ids.iter().zip(heads) {
            match head {
                Some(head) => found.push(head),
                None => {
                    if let Some(record) = whole.next_if(|record| record.id.to_string() == *id) {
                        found.push(record.head());
                    }
                }
            }
        }
        Ok(found)
    }

    async fn get_many(&self, ids: &[Uuid]) -> StoreResult<Vec<StoredConversation>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let records: Vec<Option<Vec<u8>>> = self
            .spread(
                ids.iter()
                    .map(|id| keyed("HGET", conversation_key(id), "d"))
                    .collect(),
            )
            .await?;
        records
            .into_iter()
            .flatten()
            .map(|data| serde_json::from_slice(&data).map_err(corrupt))
            .collect()
    }

    async fn drop_stale_entries(&self, id: Uuid, stale: &[IndexKey]) -> StoreResult<()> {
        let member = id.to_string();
        let bucket = self.layout.bucket(id.as_bytes());
        self.spread::<redis::Value>(
            stale
                .iter()
                .map(|index| keyed("ZREM", bucket.index_key(&index.encode()), &member))
                .collect(),
        )
        .await
        .map(drop)
    }
}
