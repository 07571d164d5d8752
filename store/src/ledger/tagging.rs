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

    /// The tags of `conversations`: those remembered, the others read at once.
    async fn tags_of(
        &self,
        conversations: BTreeSet<String>,
    ) -> StoreResult<HashMap<String, Arc<[String]>>> {
        let mut known = HashMap::new();
        let mut unknown = Vec::new();
        if let Ok(remembered) = self.tags.lock() {
            for conversation in conversations {
                match remembered.get(&conversation) {
                    Some((tags, since)) if since.elapsed() < TAGS_KEPT_FOR => {
                        known.insert(conversation, tags.clone());
                    }
                    _ => unknown.extend(Uuid::try_parse(&conversation).ok()),
                }
            }
        }
        if unknown.is_empty() {
            return Ok(known);
        }
        let mut read: HashMap<String, Arc<[String]>> = unknown
            .iter()
            .map(|id| (id.simple().to_string(), Arc::from([])))
            .collect();
        for record in self.catalog.get_many(&unknown).await? {
            read.insert(record.id.simple().to_string(), counter_ids(&record.tags));
        }
        self.remember(read.iter().map(|(id, tags)| (id.clone(), tags.clone())));
        known.extend(read);
        Ok(known)
    }

    /// `counts` and, for each conversation's, one per tag of that conversation.
    async fn tagged(&self, counts: &[LedgerCount]) -> StoreResult<Vec<LedgerCount>> {
        let named: BTreeSet<String> = counts
            .iter()
            .filter(|count| count.scope == LedgerScope::Conversation)
            .map(|count| conversation_id(&count.id).into_owned())
            .collect();
        if named.is_empty() {
            return Ok(counts.to_vec());
        }
        let tags = self.tags_of(named).await?;
        let mut all = counts.to_vec();
        for count in counts {
            if count.scope != LedgerScope::Conversation {
                continue;
            }
            for tag in tags
                .get(conversation_id(&count.id).as_ref())
                .into_iter()
                .flat_map(|tags| tags.iter())
            {
                all.push(LedgerCount {
                    scope: LedgerScope::Tag,
                    id: tag.clone(),
                    ..count.clone()
                });
            }
        }
        Ok(all)
    }
}

/// A conversation's tags as the ids of their counters.
fn counter_ids(tags: &BTreeMap<String, String>) -> Arc<[String]> {
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
