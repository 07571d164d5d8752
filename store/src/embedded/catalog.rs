//! The catalog's heads in the embedded store: what an index scan reads instead of the
//! records (see [`ConversationHead`]), and the upgrade that gives a database written
//! before heads and per-tenant indexes existed both, once, when it is opened.

use redb::{ReadableTable, ReadableTableMetadata, TableDefinition, WriteTransaction};
use uuid::Uuid;

use super::conversations::{CONVERSATIONS, INDEX, decode_conversation, index_entry};
use super::unavailable;
use crate::{ConversationHead, StoreError, StoreResult, StoredConversation};

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

#[cfg(test)]
mod tests {
    use serde_json::value::RawValue;

    use super::*;
    use crate::{ConversationStore, EmbeddedStore, IndexKey};

    /// A data directory written before heads and per-tenant indexes: its records are
    /// found by tenant queries, with their heads, once it is opened.
    #[tokio::test]
    async fn a_database_from_before_heads_is_upgraded_on_open() {
        let dir = tempfile::tempdir().expect("temp dir");
        let parent = Uuid::new_v4();
        let old = StoredConversation {
            id: Uuid::new_v4(),
            version: 2,
            owner: "static:abc".into(),
            execution_status: "running".into(),
            updated_at: None,
            received_at: 1,
            deleted: false,
            parent_id: Some(parent),
            tags: [("team".to_owned(), "a".to_owned())].into(),
            model: None,
            lifecycle: Vec::new(),
            record: RawValue::from_string(r#"{"title":"old"}"#.into()).expect("raw"),
        };
        {
            let db = redb::Database::create(dir.path().join("sandgate.redb")).expect("create");
            let txn = db.begin_write().expect("write");
            {
                let mut table = txn.open_table(CONVERSATIONS).expect("table");
                let bytes = super::super::conversations::encode_conversation(&old).expect("encode");
                table
                    .insert(old.id.to_string().as_str(), bytes.as_slice())
                    .expect("insert");
            }
            txn.commit().expect("commit");
        }
        let store = EmbeddedStore::open(dir.path().to_path_buf())
            .await
            .expect("open");
        for index in [
            IndexKey::OwnerParent("static:abc".into(), parent),
            IndexKey::OwnerTag("static:abc".into(), "team".into(), "a".into()),
            IndexKey::Parent(parent),
        ] {
            let heads = store.scan(&index, None, 10).await.expect("scan");
            assert_eq!(heads, [old.head()], "{index:?}");
        }
    }
}
