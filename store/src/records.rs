//! What the store keeps, and how a conversation is indexed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use uuid::Uuid;

/// A conversation as the catalog keeps it. Serialized as JSON, so a stored record can be
/// read with `redis-cli` or any JSON tool.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StoredConversation {
    pub id: Uuid,
    /// Bumped by every write; compare-and-swap compares it.
    pub version: u64,
    /// Who sent it: `sandbox:<id>` for a sandbox-issued key, `static:<fingerprint>` for a
    /// configured key. Later deliveries from anyone else are refused.
    pub owner: String,
    pub execution_status: String,
    /// The record's `updated_at` in microseconds since the epoch: the order of deliveries.
    pub updated_at: Option<i64>,
    /// When the latest applied delivery arrived, microseconds since the epoch.
    pub received_at: i64,
    pub deleted: bool,
    pub parent_id: Option<Uuid>,
    pub tags: BTreeMap<String, String>,
    pub model: Option<String>,
    pub lifecycle: Vec<LifecycleEvent>,
    /// The ConversationInfo as received, secrets redacted.
    pub record: Box<RawValue>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LifecycleKind {
    Start,
    Pause,
    Resume,
    Delete,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleEvent {
    pub kind: LifecycleKind,
    pub execution_status: String,
    pub updated_at: Option<i64>,
    pub received_at: i64,
}

/// What the catalog needs of a record to place it in its indexes, kept beside the record:
/// a scan reads heads, and a query decodes only the records it answers with. A reader of
/// one conversation never decodes its children's records, nor a tenant's query another
/// tenant's (their records can be megabytes each).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationHead {
    pub id: Uuid,
    /// The record's version it was taken from: a head that does not match the record's
    /// (an older replica rewrote the record without it) is not used.
    pub version: u64,
    pub owner: String,
    pub parent_id: Option<Uuid>,
    pub tags: BTreeMap<String, String>,
    /// The record's JSON, in bytes: what answering with it costs (pages are bounded in
    /// bytes).
    pub size: usize,
}

/// A secondary index of the catalog.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum IndexKey {
    All,
    Owner(String),
    /// Every conversation naming the parent, whoever sent it (the runtime API's view).
    Parent(Uuid),
    /// Tag keys are lowercase alphanumeric, so `key=value` is unambiguous.
    Tag(String, String),
    /// One sender's conversations naming the parent: a parent's children are those its
    /// own sender posted, so another tenant's records naming it are never read with it.
    OwnerParent(String, Uuid),
    /// One sender's conversations with the tag: a tenant's tag query reads its own.
    OwnerTag(String, String, String),
}

impl IndexKey {
    /// The index's name inside a backend.
    pub fn encode(&self) -> String {
        match self {
            Self::All => "all".to_owned(),
            Self::Owner(owner) => format!("owner:{owner}"),
            Self::Parent(parent) => format!("parent:{parent}"),
            Self::Tag(key, value) => format!("tag:{key}={value}"),
            // The parent is of fixed length, and the owner's length is spelled out: no
            // two indexes share a name.
            Self::OwnerParent(owner, parent) => format!("owner-parent:{parent}:{owner}"),
            Self::OwnerTag(owner, key, value) => {
                format!("owner-tag:{}:{owner}:{key}={value}", owner.len())
            }
        }
    }

    /// Whether a record with this head belongs in this index now (readers re-check stale
    /// hits).
    pub fn matches(&self, head: &ConversationHead) -> bool {
        match self {
            Self::All => true,
            Self::Owner(owner) => &head.owner == owner,
            Self::Parent(parent) => head.parent_id == Some(*parent),
            Self::Tag(key, value) => head.tags.get(key) == Some(value),
            Self::OwnerParent(owner, parent) => {
                &head.owner == owner && head.parent_id == Some(*parent)
            }
            Self::OwnerTag(owner, key, value) => {
                &head.owner == owner && head.tags.get(key) == Some(value)
            }
        }
    }
}

/// Every index a conversation of this owner, parent and tags is a member of.
fn index_keys(
    owner: &str,
    parent_id: Option<Uuid>,
    tags: &BTreeMap<String, String>,
) -> Vec<IndexKey> {
    let mut keys = Vec::with_capacity(4 + 2 * tags.len());
    keys.push(IndexKey::All);
    keys.push(IndexKey::Owner(owner.to_owned()));
    if let Some(parent) = parent_id {
        keys.push(IndexKey::Parent(parent));
        keys.push(IndexKey::OwnerParent(owner.to_owned(), parent));
    }
    for (key, value) in tags {
        keys.push(IndexKey::Tag(key.clone(), value.clone()));
        keys.push(IndexKey::OwnerTag(
            owner.to_owned(),
            key.clone(),
            value.clone(),
        ));
    }
    keys
}

impl ConversationHead {
    /// Every index the record it heads is a member of.
    pub fn index_keys(&self) -> Vec<IndexKey> {
        index_keys(&self.owner, self.parent_id, &self.tags)
    }
}

impl StoredConversation {
    /// Its head: what its index entries are re-checked against.
    pub fn head(&self) -> ConversationHead {
        ConversationHead {
            id: self.id,
            version: self.version,
            owner: self.owner.clone(),
            parent_id: self.parent_id,
            tags: self.tags.clone(),
            size: self.record.get().len(),
        }
    }

    /// Every index this conversation is a member of.
    pub fn index_keys(&self) -> Vec<IndexKey> {
        index_keys(&self.owner, self.parent_id, &self.tags)
    }

    /// The index keys of this record that `next_keys` (a later version's) no longer has:
    /// the entries a write of that version leaves stale. Linear in the keys: a record
    /// re-tagged with 150,000 tags took 100 s to compare them pairwise, holding every
    /// other write of the embedded store meanwhile.
    pub fn index_keys_dropped_by(&self, next_keys: &[IndexKey]) -> Vec<IndexKey> {
        let kept: std::collections::HashSet<&IndexKey> = next_keys.iter().collect();
        self.index_keys()
            .into_iter()
            .filter(|key| !kept.contains(key))
            .collect()
    }
}

/// An LLM profile saved through the settings endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredProfile {
    pub name: String,
    pub preserve_existing_api_key: bool,
    pub model: String,
    pub base_url: String,
    pub extra_headers: BTreeMap<String, String>,
}

/// A record of `owner`, for tests: its id the nil one, its body empty.
#[cfg(test)]
pub(crate) fn sample(
    owner: &str,
    parent: Option<Uuid>,
    tags: &[(&str, &str)],
) -> StoredConversation {
    StoredConversation {
        id: Uuid::nil(),
        version: 1,
        owner: owner.to_owned(),
        execution_status: "idle".to_owned(),
        updated_at: None,
        received_at: 0,
        deleted: false,
        parent_id: parent,
        tags: tags
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect(),
        model: None,
        lifecycle: Vec::new(),
        record: RawValue::from_string("{}".to_owned()).expect("JSON"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::sample as record;

    #[test]
    fn the_keys_a_new_version_drops_are_the_stale_ones() {
        let parent = Uuid::from_u128(7);
        let before = record("a", Some(parent), &[("team", "x"), ("env", "prod")]);
        let after = record("b", None, &[("team", "x"), ("env", "dev")]);
        assert_eq!(
            before.index_keys_dropped_by(&after.index_keys()),
            [
                IndexKey::Owner("a".into()),
                IndexKey::Parent(parent),
                IndexKey::OwnerParent("a".into(), parent),
                IndexKey::Tag("env".into(), "prod".into()),
                IndexKey::OwnerTag("a".into(), "env".into(), "prod".into()),
                IndexKey::OwnerTag("a".into(), "team".into(), "x".into()),
            ]
        );
        assert!(
            before
                .index_keys_dropped_by(&before.index_keys())
                .is_empty()
        );
    }
}
