//! The ledger by tag: what a conversation counts is counted again for each tag its
//! catalog record carries when the count is written (`project:` → `alpha`), so a rollup
//! by a tag's key is a read of counters like any other, never a scan of conversations.
//!
//! Each conversation's tags are remembered for [`TAGS_KEPT_FOR`]: the runtime API tells
//! them as it records an update ([`LedgerStore::note_tags`]), so counting a delivery reads
//! nothing; for the others (a gateway's calls, in another process), a batch of counts
//! costs one catalog read of the conversations it names that are not remembered. A tag
//! changed later counts from then on (the days before stay with the value they had),
//! within [`TAGS_KEPT_FOR`] on a process that was not told.
//!
//! A batch whose catalog read fails is not written (the writer keeps it and tries again):
//! a count is never written without its tags.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use uuid::Uuid;

use super::{
    ConversationOwner, LedgerCount, LedgerRows, LedgerScope, LedgerStore, conversation_id, tag_id,
};
use crate::{ConversationStore, StoreResult};

/// How long a conversation's tags are remembered.
pub const TAGS_KEPT_FOR: Duration = Duration::from_secs(5);
/// Conversations remembered at most; past it the memory starts again.
const MAX_REMEMBERED: usize = 100_000;

/// A conversation's tags as counter ids, and since when they are known.
type Remembered = (Arc<[String]>, Instant);

/// `inner`, each conversation's counts also added to its tags'.
pub struct Tagging {
    inner: Arc<dyn LedgerStore>,
    catalog: Arc<dyn ConversationStore>,
    tags: Mutex<HashMap<String, Remembered>>,
}

impl Tagging {
    pub fn new(inner: Arc<dyn LedgerStore>, catalog: Arc<dyn ConversationStore>) -> Self {
        Self {
            inner,
            catalog,
            tags: Mutex::default(),
        }
    }

    /// Remembers the tags of `conversations`, at once.
    fn remember(&self, conversations: impl IntoIterator<Item = (String, Arc<[String]>)>) {
        if let Ok(mut remembered) = self.tags.lock() {
            let now = Instant::now();
            for (conversation, tags) in conversations {
                if remembered.len() >= MAX_REMEMBERED {
                    remembered.clear();
                }
                remembered.insert(conversation, (tags, now));
            }
        }
    }

    /// The tags of each of `counts`' conversations, by the count's index: those
    /// remembered, the others read at once (one catalog read for all of them). An id
    /// that is no catalog id (a sandbox session's own, say) has none.
    async fn tags_of(&self, counts: &[LedgerCount]) -> StoreResult<Vec<(usize, Arc<[String]>)>> {
        let mut known = Vec::new();
        let mut unknown: Vec<(usize, Uuid)> = Vec::new();
        if let Ok(remembered) = self.tags.lock() {
            for (index, count) in counts.iter().enumerate() {
                if count.scope != LedgerScope::Conversation {
                    continue;
                }
                let conversation = conversation_id(&count.id);
                match remembered.get(conversation.as_ref()) {
                    Some((tags, since)) if since.elapsed() < TAGS_KEPT_FOR => {
                        known.push((index, tags.clone()));
                    }
                    _ => unknown.extend(Uuid::try_parse(&conversation).ok().map(|id| (index, id))),
                }
            }
        }
        if unknown.is_empty() {
            return Ok(known);
        }
        let ids: Vec<Uuid> = unknown
            .iter()
            .map(|(_, id)| *id)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut read: HashMap<Uuid, Arc<[String]>> = HashMap::with_capacity(ids.len());
        for record in self.catalog.get_many(&ids).await? {
            read.insert(record.id, counter_ids(&record.tags));
        }
        self.remember(ids.iter().map(|id| {
            let tags = read.get(id).cloned().unwrap_or_else(no_tags);
            (id.simple().to_string(), tags)
        }));
        known.extend(
            unknown
                .into_iter()
                .filter_map(|(index, id)| read.get(&id).map(|tags| (index, tags.clone()))),
        );
        Ok(known)
    }

    /// `counts` and, for each conversation's, one per tag of that conversation; `counts`
    /// alone (not copied) when none has a tag.
    async fn tagged<'a>(&self, counts: &'a [LedgerCount]) -> StoreResult<Cow<'a, [LedgerCount]>> {
        let mut extra = Vec::new();
        for (index, tags) in self.tags_of(counts).await? {
            let count = &counts[index];
            extra.extend(tags.iter().map(|tag| LedgerCount {
                scope: LedgerScope::Tag,
                id: tag.clone(),
                ..count.clone()
            }));
        }
        if extra.is_empty() {
            return Ok(Cow::Borrowed(counts));
        }
        let mut all = Vec::with_capacity(counts.len() + extra.len());
        all.extend_from_slice(counts);
        all.append(&mut extra);
        Ok(Cow::Owned(all))
    }
}

/// The tags of a conversation that has none, shared (no allocation per conversation).
fn no_tags() -> Arc<[String]> {
    static NONE: std::sync::OnceLock<Arc<[String]>> = std::sync::OnceLock::new();
    NONE.get_or_init(|| Arc::from([])).clone()
}

/// A conversation's tags as the ids of their counters.
fn counter_ids(tags: &BTreeMap<String, String>) -> Arc<[String]> {
    if tags.is_empty() {
        return no_tags();
    }
    tags.iter().map(|(key, value)| tag_id(key, value)).collect()
}

#[async_trait]
impl LedgerStore for Tagging {
    async fn add_ledger(&self, counts: &[LedgerCount]) -> StoreResult<()> {
        let counts = self.tagged(counts).await?;
        self.inner.add_ledger(&counts).await
    }

    fn note_tags(&self, conversation: &str, tags: &BTreeMap<String, String>) {
        self.remember([(
            conversation_id(conversation).into_owned(),
            counter_ids(tags),
        )]);
    }

    async fn ledger_of(
        &self,
        scope: LedgerScope,
        ids: &[String],
        from: u32,
        to: u32,
    ) -> StoreResult<LedgerRows> {
        self.inner.ledger_of(scope, ids, from, to).await
    }

    async fn ledger_ids(
        &self,
        scope: LedgerScope,
        from: u32,
        to: u32,
        within: &str,
        after: &str,
        limit: usize,
    ) -> StoreResult<(Vec<String>, u64)> {
        self.inner
            .ledger_ids(scope, from, to, within, after, limit)
            .await
    }

    async fn own_conversations(&self, owners: &[(String, ConversationOwner)]) -> StoreResult<()> {
        self.inner.own_conversations(owners).await
    }

    async fn conversation_owners(
        &self,
        conversations: &[String],
    ) -> StoreResult<HashMap<String, ConversationOwner>> {
        self.inner.conversation_owners(conversations).await
    }

    async fn ledger_days(
        &self,
        scope: LedgerScope,
        id: &str,
        from: u32,
        to: u32,
    ) -> StoreResult<Vec<(u32, BTreeMap<super::Measure, f64>)>> {
        self.inner.ledger_days(scope, id, from, to).await
    }

    async fn conversation_models(&self, conversation: &str) -> StoreResult<Vec<String>> {
        self.inner.conversation_models(conversation).await
    }

    async fn link_session(&self, session: &str, conversation: &str) -> StoreResult<()> {
        self.inner.link_session(session, conversation).await
    }

    async fn session_conversation(&self, session: &str) -> StoreResult<Option<String>> {
        self.inner.session_conversation(session).await
    }

    async fn conversation_session(&self, conversation: &str) -> StoreResult<Option<String>> {
        self.inner.conversation_session(conversation).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Measure;
    use crate::{Backend, Store, StoredConversation};

    fn conversation(tags: &[(&str, &str)]) -> StoredConversation {
        StoredConversation {
            id: Uuid::new_v4(),
            ..crate::records::sample("static:abc", None, tags)
        }
    }

    fn today() -> u32 {
        crate::day_of(crate::now_ms())
    }

    fn webhook(conversation: &StoredConversation) -> LedgerCount {
        LedgerCount {
            day: today(),
            scope: LedgerScope::Conversation,
            id: conversation.id.simple().to_string(),
            measure: Measure::Webhooks,
            amount: 1.0,
        }
    }

    /// A conversation's counts go under its tags whether this process was told them (a
    /// delivery it recorded) or reads them from the catalog (another process's), and a
    /// conversation without tags, or unknown to the catalog, counts under none.
    #[tokio::test]
    async fn counts_go_under_the_tags_told_or_read_from_the_catalog() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(&Backend::Embedded {
            data_dir: dir.path().to_owned(),
        })
        .await
        .expect("open");
        let ledger = Tagging::new(store.ledger.clone(), store.conversations.clone());
        let told = conversation(&[("project", "alpha")]);
        let stored = conversation(&[("project", "beta"), ("stage", "prod")]);
        let untagged = conversation(&[]);
        let unknown = conversation(&[("project", "gamma")]);
        for record in [&stored, &untagged] {
            assert!(
                store
                    .conversations
                    .compare_and_swap(0, record)
                    .await
                    .expect("stored")
            );
        }
        ledger.note_tags(&told.id.simple().to_string(), &told.tags);
        let counts: Vec<LedgerCount> = [&told, &stored, &untagged, &unknown]
            .into_iter()
            .map(webhook)
            .collect();
        ledger.add_ledger(&counts).await.expect("added");
        ledger.add_ledger(&counts[1..2]).await.expect("added again");

        let tags = [
            ("project", "alpha"),
            ("project", "beta"),
            ("stage", "prod"),
            ("project", "gamma"),
        ]
        .map(|(key, value)| tag_id(key, value));
        let rows = ledger
            .ledger_of(LedgerScope::Tag, &tags, today(), today())
            .await
            .expect("read");
        let webhooks = |tag: &String| {
            rows.get(tag)
                .and_then(|row| row.get(&Measure::Webhooks))
                .copied()
                .unwrap_or(0.0)
        };
        assert_eq!(
            tags.iter().map(webhooks).collect::<Vec<_>>(),
            [1.0, 2.0, 2.0, 0.0],
            "{rows:?}"
        );
    }
}
