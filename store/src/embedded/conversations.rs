//! Conversations in the embedded backend: each record with its version, the secondary
//! indexes' entries (`<index>\0<id>`) moved in the record's own write, and the catalog's
//! scans over them.

use std::ops::Bound;

use async_trait::async_trait;
use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use uuid::Uuid;

use super::{EmbeddedStore, Write, catalog, unavailable};
use crate::{
    ConversationHead, ConversationStore, IndexKey, StoreError, StoreResult, StoredConversation,
};

/// id → version (8 bytes, big endian) followed by the record's JSON.
pub(super) const CONVERSATIONS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("conversations");
/// `<index>\0<id>` → nothing: a member of a secondary index.
pub(super) const INDEX: TableDefinition<&str, ()> = TableDefinition::new("conversation_index");

pub(super) fn index_entry(index: &str, id: &str) -> String {
    format!("{index}\0{id}")
}

pub(super) fn encode_conversation(conversation: &StoredConversation) -> StoreResult<Vec<u8>> {
    let mut bytes = conversation.version.to_be_bytes().to_vec();
    serde_json::to_writer(&mut bytes, conversation)
        .map_err(|err| StoreError::Corrupt(err.to_string()))?;
    Ok(bytes)
}

fn decode_version(bytes: &[u8]) -> StoreResult<u64> {
    let head: [u8; 8] = bytes
        .get(..8)
        .and_then(|head| head.try_into().ok())
        .ok_or_else(|| StoreError::Corrupt("conversation entry shorter than its version".into()))?;
    Ok(u64::from_be_bytes(head))
}

pub(super) fn decode_conversation(bytes: &[u8]) -> StoreResult<StoredConversation> {
    serde_json::from_slice(bytes.get(8..).unwrap_or_default())
        .map_err(|err| StoreError::Corrupt(err.to_string()))
}

/// Writes `next` when the stored version is `expected` (0: no record yet), its index
/// entries and head moved in the same transaction; whether it wrote.
pub(super) fn swap(
    conversations: &mut redb::Table<&str, &[u8]>,
    index: &mut redb::Table<&str, ()>,
    heads: &mut redb::Table<&str, &[u8]>,
    expected: u64,
    next: &StoredConversation,
) -> StoreResult<bool> {
    let id = next.id.to_string();
    let previous = match conversations.get(id.as_str()).map_err(unavailable)? {
        Some(entry) => {
            let bytes = entry.value();
            if decode_version(bytes)? != expected {
                return Ok(false);
            }
            Some(decode_conversation(bytes)?)
        }
        None if expected != 0 => return Ok(false),
        None => None,
    };
    let new_keys = next.index_keys();
    if let Some(previous) = previous {
        for stale in previous.index_keys_dropped_by(&new_keys) {
            index
                .remove(index_entry(&stale.encode(), &id).as_str())
                .map_err(unavailable)?;
        }
    }
    for key in &new_keys {
        index
            .insert(index_entry(&key.encode(), &id).as_str(), ())
            .map_err(unavailable)?;
    }
    heads
        .insert(id.as_str(), catalog::encode_head(next)?.as_slice())
        .map_err(unavailable)?;
    conversations
        .insert(id.as_str(), encode_conversation(next)?.as_slice())
        .map_err(unavailable)?;
    Ok(true)
}

#[async_trait]
impl ConversationStore for EmbeddedStore {
    async fn get(&self, id: Uuid) -> StoreResult<Option<StoredConversation>> {
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(CONVERSATIONS).map_err(unavailable)?;
            let entry = table.get(id.to_string().as_str()).map_err(unavailable)?;
            entry
                .map(|entry| decode_conversation(entry.value()))
                .transpose()
        })
        .await
    }

    async fn compare_and_swap(
        &self,
        expected: u64,
        next: &StoredConversation,
    ) -> StoreResult<bool> {
        let next = next.clone();
        self.submit(|reply| Write::Swap {
            expected,
            next,
            reply,
        })
        .await
    }

    async fn scan(
        &self,
        index: &IndexKey,
        after: Option<Uuid>,
        limit: usize,
    ) -> StoreResult<Vec<ConversationHead>> {
        let prefix = index.encode();
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let members = txn.open_table(INDEX).map_err(unavailable)?;
            let heads = txn.open_table(catalog::HEADS).map_err(unavailable)?;
            let conversations = txn.open_table(CONVERSATIONS).map_err(unavailable)?;
            let start = match after {
                Some(after) => Bound::Excluded(index_entry(&prefix, &after.to_string())),
                None => Bound::Included(format!("{prefix}\0")),
            };
            let end = Bound::Excluded(format!("{prefix}\u{1}"));
            let range = members
                .range::<&str>((
                    start.as_ref().map(String::as_str),
                    end.as_ref().map(String::as_str),
                ))
                .map_err(unavailable)?;
            let mut found = Vec::new();
            for member in range {
                if found.len() == limit {
                    break;
                }
                let (entry, ()) = member
                    .map(|(key, value)| (key, value.value()))
                    .map_err(unavailable)?;
                let Some(id) = entry.value().rsplit('\0').next().map(str::to_owned) else {
                    continue;
                };
                if let Some(head) = catalog::head_of(&heads, &conversations, &id)? {
                    found.push(head);
                }
            }
            Ok(found)
        })
        .await
    }

    async fn get_many(&self, ids: &[Uuid]) -> StoreResult<Vec<StoredConversation>> {
        let keys = catalog::keys(ids);
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(CONVERSATIONS).map_err(unavailable)?;
            let mut found = Vec::with_capacity(keys.len());
            for key in &keys {
                if let Some(entry) = table.get(key.as_str()).map_err(unavailable)? {
                    found.push(decode_conversation(entry.value())?);
                }
            }
            Ok(found)
        })
        .await
    }

    async fn drop_stale_entries(&self, _id: Uuid, _stale: &[IndexKey]) -> StoreResult<()> {
        // `swap` already moved the entries, in the record's own transaction.
        Ok(())
    }
}
