//! The ledger by tag: what a conversation counts is counted again for each tag its
//! catalog record carries when the count is written (`project:` → `alpha`), so a rollup
//! by a tag's key is a read of counters like any other, never a scan of conversations. A
//! batch of counts costs one catalog read, of the conversations it names; a tag changed
//! later counts from then on (the days before stay with the value they had).
//!
//! A batch whose catalog read fails is not written (the writer keeps it and tries again):
//! a count is never written without its tags.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use uuid::Uuid;

use super::{
    ConversationOwner, LedgerCount, LedgerRows, LedgerScope, LedgerStore, conversation_id, tag_id,
};
use crate::{ConversationStore, StoreResult};

/// `inner`, each conversation's counts also added to its tags'.
pub struct Tagging {
    inner: Arc<dyn LedgerStore>,
    catalog: Arc<dyn ConversationStore>,
}

impl Tagging {
    pub fn new(inner: Arc<dyn LedgerStore>, catalog: Arc<dyn ConversationStore>) -> Self {
        Self { inner, catalog }
    }

    /// `counts` and, for each conversation's, one per tag of that conversation.
    async fn tagged(&self, counts: &[LedgerCount]) -> StoreResult<Vec<LedgerCount>> {
        let named: BTreeSet<Uuid> = counts
            .iter()
            .filter(|count| count.scope == LedgerScope::Conversation)
            .filter_map(|count| Uuid::try_parse(&count.id).ok())
            .collect();
        if named.is_empty() {
            return Ok(counts.to_vec());
        }
        let ids: Vec<Uuid> = named.into_iter().collect();
        let tags: HashMap<String, Vec<String>> = self
            .catalog
            .get_many(&ids)
            .await?
            .into_iter()
            .filter(|record| !record.tags.is_empty())
            .map(|record| {
                let ids = record
                    .tags
                    .iter()
                    .map(|(key, value)| tag_id(key, value))
                    .collect();
                (record.id.simple().to_string(), ids)
            })
            .collect();
        let mut all = counts.to_vec();
        for count in counts {
            if count.scope != LedgerScope::Conversation {
                continue;
            }
            for tag in tags
                .get(conversation_id(&count.id).as_ref())
                .into_iter()
                .flatten()
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

#[async_trait]
impl LedgerStore for Tagging {
    async fn add_ledger(&self, counts: &[LedgerCount]) -> StoreResult<()> {
        let counts = self.tagged(counts).await?;
        self.inner.add_ledger(&counts).await
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
