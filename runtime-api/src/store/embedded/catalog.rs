//! The catalog's heads in the embedded store: what an index scan reads instead of the
//! records (see [`ConversationHead`]), and the upgrade that gives a database written
//! before heads and per-tenant indexes existed both, once, when it is opened.

use redb::{ReadableTable, ReadableTableMetadata, TableDefinition, WriteTransaction};
use uuid::Uuid;

use super::{CONVERSATIONS, INDEX, decode_conversation, index_entry, unavailable};
use crate::store::{ConversationHead, StoreError, StoreResult, StoredConversation};

/// id → the record's [`ConversationHead`] as JSON.
pub(super) const HEADS: TableDefinition<&str, &[u8]> = TableDefinition::new("conversation_heads");
/// name → value: which layout the catalog's tables follow.
const LAYOUT: TableDefinition<&str, u64> = TableDefinition::new("catalog_layout");
/// Heads and the per-tenant indexes (`OwnerParent`, `OwnerTag`).
const HEADS_LAYOUT: u64 = 2;

fn corrupt(err: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(err.to_string())
}

pub(super) fn encode_head(conversation: &StoredConversation) -> StoreResult<Vec<u8>> {
    serde_json::to_vec(&conversation.head()).map_err(corrupt)
}

pub(super) fn decode_head(bytes: &[u8]) -> StoreResult<ConversationHead> {
    serde_json::from_slice(bytes).map_err(corrupt)
}

/// The head of `id`, from its own table; from the record itself where an older writer
/// left none (the upgrade below writes them all, this only covers a race with it).
pub(super) fn head_of(
    heads: &impl ReadableTable<&'static str, &'static [u8]>,
    conversations: &impl ReadableTable<&'static str, &'static [u8]>,
    id: &str,
) -> StoreResult<Option<ConversationHead>> {
    if let Some(head) = heads.get(id).map_err(unavailable)? {
        return decode_head(head.value()).map(Some);
    }
    conversations
        .get(id)
        .map_err(unavailable)?
        .map(|record| decode_conversation(record.value()).map(|record| record.head()))
        .transpose()
}

/// Gives every record written under an older layout its head and its per-tenant index
/// entries, in the opening transaction: queries never miss one afterwards.
pub(super) fn upgrade(txn: &WriteTransaction) -> StoreResult<()> {
    let mut layout = txn.open_table(LAYOUT).map_err(unavailable)?;
    let current = layout
        .get("version")
        .map_err(unavailable)?
        .map(|version| version.value());
    let mut heads = txn.open_table(HEADS).map_err(unavailable)?;
    if current.is_some_and(|version| version >= HEADS_LAYOUT) {
        return Ok(());
    }
    let conversations = txn.open_table(CONVERSATIONS).map_err(unavailable)?;
    let mut index = txn.open_table(INDEX).map_err(unavailable)?;
    if conversations.len().map_err(unavailable)? > 0 {
        tracing::info!("giving the catalog's records heads and per-tenant index entries");
    }
    for entry in conversations.iter().map_err(unavailable)? {
        let (id, bytes) = entry.map_err(unavailable)?;
        let record = decode_conversation(bytes.value())?;
        let id = id.value();
        for key in record.index_keys() {
            index
                .insert(index_entry(&key.encode(), id).as_str(), ())
                .map_err(unavailable)?;
        }
        heads
            .insert(id, encode_head(&record)?.as_slice())
            .map_err(unavailable)?;
    }
    layout
        .insert("version", HEADS_LAYOUT)
        .map_err(unavailable)?;
    Ok(())
}

/// The ids in `ids` order, as the conversations table keys them.
pub(super) fn keys(ids: &[Uuid]) -> Vec<String> {
    ids.iter().map(Uuid::to_string).collect()
}
