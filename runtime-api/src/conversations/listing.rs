//! The catalog's list reads: which index a query scans, and how a page is bounded. A
//! scan reads heads (see `store::ConversationHead`), never records, and a tenant's scans
//! stay within its own index entries: another tenant's records, however many or large,
//! are never read for it. Only the records a page answers with are read whole.

use sandgate_proto::conversations::v1::{ListConversationsRequest, ListConversationsResponse};
use sandgate_proto::error::ErrorDetail;
use serde_json::Value;
use tonic::Status;
use uuid::Uuid;

use super::{
    ConversationsService, DEFAULT_PAGE_SIZE, MAX_CHILDREN, MAX_PAGE_BYTES, MAX_PAGE_SIZE, parse_id,
};
use crate::auth::Reader;
use crate::validation;
use sandgate_store::{ConversationHead, IndexKey, StoredConversation};

impl ConversationsService {
    /// The heads of live members of `index` that pass `keep`, from `after` on: at most
    /// `limit` of them, and past the first, no more than `max_bytes` of records together.
    /// `true` when more may follow. No record is decoded.
    async fn collect(
        &self,
        index: &IndexKey,
        mut after: Option<Uuid>,
        limit: usize,
        max_bytes: usize,
        keep: impl Fn(&ConversationHead) -> bool,
    ) -> Result<(Vec<ConversationHead>, bool), Status> {
        // Small pages still scan in batches worth a round trip.
        let batch_size = limit.clamp(16, MAX_PAGE_SIZE);
        let mut found = Vec::new();
        let mut bytes = 0usize;
        loop {
            let batch = self
                .store
                .conversations
                .scan(index, after, batch_size)
                .await
                .map_err(ErrorDetail::from)?;
            let exhausted = batch.len() < batch_size;
            for head in batch {
                after = Some(head.id);
                // A stale member (left by a write that lost its race or moved on) is
                // skipped, never repaired here: a reader's query writes nothing.
                if index.matches(&head) && keep(&head) {
                    bytes = bytes.saturating_add(head.size);
                    if !found.is_empty() && bytes > max_bytes {
                        return Ok((found, true));
                    }
                    found.push(head);
                    if found.len() == limit {
                        return Ok((found, true));
                    }
                }
            }
            if exhausted {
                return Ok((found, false));
            }
        }
    }

    /// The children of `parent` that its own sender posted: naming a parent links a
    /// conversation to it only within one tenant. Their ids come from the index and their
    /// heads: no child's record is read (another tenant's cannot slow this read).
    pub(super) async fn children(&self, parent: &StoredConversation) -> Result<Vec<Uuid>, Status> {
        let index = IndexKey::OwnerParent(parent.owner.clone(), parent.id);
        let (children, _) = self
            .collect(&index, None, MAX_CHILDREN, usize::MAX, |_| true)
            .await?;
        Ok(children.iter().map(|child| child.id).collect())
    }

    /// One page of `query` as `reader` may see it.
    pub(super) async fn list(
        &self,
        reader: &Reader,
        query: ListConversationsRequest,
    ) -> Result<ListConversationsResponse, Status> {
        let parent = (!query.parent_id.is_empty())
            .then(|| parse_id(&query.parent_id))
            .transpose()?;
        let after = (!query.page_token.is_empty())
            .then(|| parse_id(&query.page_token))
            .transpose()?;
        let limit = match query.page_size as usize {
            0 => DEFAULT_PAGE_SIZE,
            size => size.min(MAX_PAGE_SIZE),
        };
        // Tag filters follow the tag rule, so that `key=value` names one index only.
        let filter: serde_json::Map<String, Value> = query
            .tags
            .iter()
            .map(|(key, value)| (key.clone(), Value::from(value.as_str())))
            .collect();
        sandgate_conversation::validate_tags(&Value::Object(filter))
            .map_err(validation::failure)?;
        let owner = match &reader {
            Reader::RuntimeApi => None,
            Reader::Session(principal) => Some(principal.owner()),
        };
        // Children are the parent's only when its own sender posted them.
        let parent_owner = match parent {
            Some(parent) => self
                .store
                .conversations
                .get(parent)
                .await
                .map_err(ErrorDetail::from)?
                .map(|parent| parent.owner),
            None => None,
        };
        // The most selective index drives the scan; the other conditions filter it. A
        // tenant's scans stay within its own entries: another tenant's records, however
        // many or large, are never read for it.
        let tag = query.tags.iter().next();
        let index = match (parent, tag, &owner) {
            (Some(parent), _, _) => match (&parent_owner, &owner) {
                (Some(parent_owner), _) => IndexKey::OwnerParent(parent_owner.clone(), parent),
                (None, Some(owner)) => IndexKey::OwnerParent(owner.clone(), parent),
                (None, None) => IndexKey::Parent(parent),
            },
            (None, Some((key, value)), Some(owner)) => {
                IndexKey::OwnerTag(owner.clone(), key.clone(), value.clone())
            }
            (None, Some((key, value)), None) => IndexKey::Tag(key.clone(), value.clone()),
            (None, None, Some(owner)) => IndexKey::Owner(owner.clone()),
            (None, None, None) => IndexKey::All,
        };
        let keep = |head: &ConversationHead| {
            parent.is_none_or(|parent| head.parent_id == Some(parent))
                && query
                    .tags
                    .iter()
                    .all(|(key, value)| head.tags.get(key) == Some(value))
                && owner.as_ref().is_none_or(|owner| &head.owner == owner)
                && parent_owner
                    .as_ref()
                    .is_none_or(|parent_owner| &head.owner == parent_owner)
        };
        let (heads, mut more) = self
            .collect(&index, after, limit, MAX_PAGE_BYTES, keep)
            .await?;
        let ids: Vec<Uuid> = heads.iter().map(|head| head.id).collect();
        let records = self
            .store
            .conversations
            .get_many(&ids)
            .await
            .map_err(ErrorDetail::from)?;
        // Bounded in bytes as well as in count: a large record shortens the page, and the
        // next page starts after the last one answered. The first always goes.
        let mut conversations = Vec::with_capacity(records.len());
        let mut bytes = 0usize;
        let mut last = None;
        for stored in &records {
            // Moved on since its head was read: skipped, as a stale member is.
            let head = stored.head();
            if !index.matches(&head) || !keep(&head) {
                continue;
            }
            let view = self.view(stored).await?;
            bytes = bytes.saturating_add(prost::Message::encoded_len(&view));
            if !conversations.is_empty() && bytes > MAX_PAGE_BYTES {
                more = true;
                break;
            }
            conversations.push(view);
            last = Some(stored.id);
        }
        if last.is_none() {
            last = heads.last().map(|head| head.id);
        }
        let next_page_token = match (more, last) {
            (true, Some(last)) => last.to_string(),
            _ => String::new(),
        };
        Ok(ListConversationsResponse {
            conversations,
            next_page_token,
        })
    }
}
