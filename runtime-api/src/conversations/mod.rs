//! The Conversations service: the webhook's record store and the catalog reads.

pub mod events;
mod lifecycle;
mod listing;
mod view;
mod webhook;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use sandgate_proto::conversations::v1::conversations_server::Conversations;
use sandgate_proto::conversations::v1::{
    self as pb, AppendEventsRequest, AppendEventsResponse, GetConversationRequest,
    GetConversationResponse, ListConversationsRequest, ListConversationsResponse,
    ListEventsRequest, ListEventsResponse, UpdateTagsRequest, UpdateTagsResponse, UpsertRequest,
    UpsertResponse, append_events_request,
};
use sandgate_proto::error::{ErrorCode, ErrorDetail};
use serde_json::Value;
use tonic::{Request, Response, Status};
use uuid::Uuid;

use crate::auth::{Authenticator, Principal, Reader};
use crate::validation;
use sandgate_conversation::LocItem;
use sandgate_store::{Activity, EventPage, EventRetention, Store, StoredConversation};

/// How often a write retries when concurrent writers keep winning the compare-and-swap.
const MAX_WRITE_ATTEMPTS: usize = 64;
/// A list's page size when the request names none (0): the REST document's default for
/// `limit`.
pub const DEFAULT_PAGE_SIZE: usize = 100;
const MAX_PAGE_SIZE: usize = 1000;
/// The most a list page's records weigh together, past its first: well under the 64 MiB
/// a gRPC message may take, so that large records shorten a page and never fail it.
const MAX_PAGE_BYTES: usize = 16 * 1024 * 1024;
/// The most children `sub_conversation_ids` lists.
const MAX_CHILDREN: usize = 10_000;

/// Registers the catalog's metrics with their help text.
pub fn describe_metrics() {
    metrics::describe_counter!(
        "sandgate_events_total",
        "agent-server events received, by outcome: stored, duplicate (stored before), rejected (kept as a dead letter)"
    );
    metrics::describe_counter!(
        "sandgate_events_dropped_total",
        "stored agent-server events dropped by retention (per conversation count, or age)"
    );
}

pub struct ConversationsService {
    store: Store,
    auth: Arc<Authenticator>,
    retention: EventRetention,
    /// Marks the sandbox behind a delivery or an event batch active (idle pause).
    activity: Arc<Activity>,
}

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_micros() as i64)
}

fn parse_id(id: &str) -> Result<Uuid, Status> {
    Uuid::parse_str(id).map_err(|err| {
        validation::single(
            "uuid_parsing",
            vec![LocItem::Key("id".into())],
            format!("Input should be a valid UUID, {err}"),
        )
        .into()
    })
}

/// Concurrent writers kept winning the compare-and-swap: 503, so the sender retries.
fn contended(id: Uuid) -> Status {
    ErrorDetail::new(
        ErrorCode::Unavailable,
        format!("Too many concurrent updates of conversation {id}; retry"),
    )
    .into()
}

fn not_found(id: &str) -> Status {
    ErrorDetail::new(ErrorCode::NotFound, format!("Conversation {id} not found")).into()
}

impl ConversationsService {
    pub fn new(
        store: Store,
        auth: Arc<Authenticator>,
        retention: EventRetention,
        activity: Arc<Activity>,
    ) -> Self {
        Self {
            store,
            auth,
            retention,
            activity,
        }
    }

    /// Marks the sandbox that sent something active, when a sandbox sent it.
    async fn active(&self, principal: &Principal) {
        if let Principal::Sandbox(runtime_id) = principal {
            self.activity.sandbox(runtime_id).await;
        }
    }

    /// Compare-and-swap of `next` over `previous`; once it is written, the indexes the
    /// record left are told so (readers skip such members meanwhile).
    async fn swap(
        &self,
        previous: Option<&StoredConversation>,
        next: &StoredConversation,
    ) -> Result<bool, Status> {
        let expected = previous.map_or(0, |previous| previous.version);
        if !self
            .store
            .conversations
            .compare_and_swap(expected, next)
            .await
            .map_err(ErrorDetail::from)?
        {
            return Ok(false);
        }
        if let Some(previous) = previous {
            let stale = previous.index_keys_dropped_by(&next.index_keys());
            if !stale.is_empty()
                && let Err(err) = self
                    .store
                    .conversations
                    .drop_stale_entries(next.id, &stale)
                    .await
            {
                // The write stands; a stale member only costs readers a skip.
                tracing::warn!(conversation = %next.id, error = %err, "cannot drop stale index entries");
            }
        }
        Ok(true)
    }

    /// The record, when `reader` may see it.
    async fn readable(
        &self,
        reader: &Reader,
        id: Uuid,
    ) -> Result<Option<StoredConversation>, Status> {
        let stored = self
            .store
            .conversations
            .get(id)
            .await
            .map_err(ErrorDetail::from)?;
        Ok(stored.filter(|stored| match reader {
            Reader::RuntimeApi => true,
            Reader::Session(principal) => stored.owner == principal.owner(),
        }))
    }

    /// Applies what a batch's newest state update says of the conversation, as a delivery
    /// would: never over a newer record, never to another owner's record.
    async fn apply_change(
        &self,
        id: Uuid,
        owner: &str,
        change: &events::StateChange,
    ) -> Result<(), Status> {
        for _ in 0..MAX_WRITE_ATTEMPTS {
            let Some(previous) = self
                .store
                .conversations
                .get(id)
                .await
                .map_err(ErrorDetail::from)?
            else {
                // The conversation's own delivery will bring the record.
                return Ok(());
            };
            if previous.owner != owner {
                return Ok(());
            }
            let Some(next) = lifecycle::apply_change(&previous, change, now_micros()) else {
                return Ok(());
            };
            if self.swap(Some(&previous), &next).await? {
                tracing::info!(conversation = %id, status = %next.execution_status, "conversation updated by an event");
                return Ok(());
            }
        }
        Err(contended(id))
    }

    /// Whether `reader` may read the conversation's events: the runtime API key reads all;
    /// a session key reads them when its sandbox sent them and, once the conversation has
    /// a record, sent that too. (The record's sender and the events' sender are one sandbox
    /// in practice; when they differ, neither reads the other's.)
    async fn events_readable(&self, reader: &Reader, id: Uuid) -> Result<bool, Status> {
        let events = self
            .store
            .events
            .event_stats(id)
            .await
            .map_err(ErrorDetail::from)?;
        let record = self
            .store
            .conversations
            .get(id)
            .await
            .map_err(ErrorDetail::from)?;
        if events.is_none() && record.is_none() {
            return Ok(false);
        }
        Ok(match reader {
            Reader::RuntimeApi => true,
            Reader::Session(principal) => {
                let owner = principal.owner();
                events.is_none_or(|events| events.owner == owner)
                    && record.is_none_or(|record| record.owner == owner)
            }
        })
    }

    async fn view(&self, stored: &StoredConversation) -> Result<pb::Conversation, Status> {
        // Events of another sender are not this record's (see `events_readable`).
        let events = self
            .store
            .events
            .event_stats(stored.id)
            .await
            .map_err(ErrorDetail::from)?
            .filter(|events| events.owner == stored.owner);
        Ok(view::conversation(
            stored,
            &self.children(stored).await?,
            events.as_ref(),
        ))
    }

    /// The oldest event timestamp a reader is shown (older ones are past retention).
    fn oldest_listed(&self) -> i64 {
        let age = i64::try_from(self.retention.max_age_seconds)
            .unwrap_or(i64::MAX)
            .saturating_mul(1_000_000);
        now_micros().saturating_sub(age)
    }
}

#[tonic::async_trait]
impl Conversations for ConversationsService {
    async fn upsert(
        &self,
        request: Request<UpsertRequest>,
    ) -> Result<Response<UpsertResponse>, Status> {
        let (principal, conversation) = self.admit(request).await?;
        self.active(&principal).await;
        self.record(&principal, conversation).await?;
        Ok(Response::new(UpsertResponse { success: true }))
    }

    async fn get_conversation(
        &self,
        request: Request<GetConversationRequest>,
    ) -> Result<Response<GetConversationResponse>, Status> {
        let reader = self.auth.reader(request.metadata()).await?;
        let id = parse_id(&request.get_ref().id)?;
        let stored = self
            .readable(&reader, id)
            .await?
            .ok_or_else(|| not_found(&request.get_ref().id))?;
        Ok(Response::new(GetConversationResponse {
            conversation: Some(self.view(&stored).await?),
        }))
    }

    async fn list_conversations(
        &self,
        request: Request<ListConversationsRequest>,
    ) -> Result<Response<ListConversationsResponse>, Status> {
        let reader = self.auth.reader(request.metadata()).await?;
        Ok(Response::new(
            self.list(&reader, request.into_inner()).await?,
        ))
    }

    async fn update_tags(
        &self,
        request: Request<UpdateTagsRequest>,
    ) -> Result<Response<UpdateTagsResponse>, Status> {
        let reader = self.auth.reader(request.metadata()).await?;
        let request = request.into_inner();
        let id = parse_id(&request.id)?;
        let tags: serde_json::Map<String, serde_json::Value> = request
            .tags
            .into_iter()
            .map(|(key, value)| (key, serde_json::Value::from(value)))
            .collect();
        let tags: BTreeMap<String, String> =
            sandgate_conversation::validate_tags(&serde_json::Value::Object(tags))
                .map_err(validation::failure)?;
        for _ in 0..MAX_WRITE_ATTEMPTS {
            let stored = self
                .readable(&reader, id)
                .await?
                .ok_or_else(|| not_found(&request.id))?;
            let mut next = stored.clone();
            next.version += 1;
            next.tags = tags.clone();
            if self.swap(Some(&stored), &next).await? {
                tracing::info!(conversation = %id, "tags updated");
                return Ok(Response::new(UpdateTagsResponse {
                    conversation: Some(self.view(&next).await?),
                }));
            }
        }
        Err(contended(id))
    }

    async fn append_events(
        &self,
        request: Request<AppendEventsRequest>,
    ) -> Result<Response<AppendEventsResponse>, Status> {
        let (metadata, _, request) = request.into_parts();
        let principal = self.auth.session(&metadata).await?;
        self.active(&principal).await;
        let owner = principal.owner();
        let id = parse_id(&request.conversation_id)?;
        let body = match request.body {
            Some(append_events_request::Body::Json(json)) if !json.is_empty() => {
                sandgate_conversation::parse_json(&json)
                    .map_err(|err| validation::failure(vec![err]))?
            }
            Some(append_events_request::Body::Other(_)) => Value::Null,
            _ => return Err(validation::single("missing", Vec::new(), "Field required").into()),
        };
        let received_at = now_micros();
        let batch = events::sort(body, received_at).ok_or_else(|| {
            validation::single("list_type", Vec::new(), "Input should be a valid list")
        })?;
        let record = self
            .store
            .conversations
            .get(id)
            .await
            .map_err(ErrorDetail::from)?;
        let refused = || -> Status {
            tracing::warn!(conversation = %id, sender = %owner, "events for a conversation owned by another sender");
            ErrorDetail::new(ErrorCode::Unauthenticated, "Unauthorized").into()
        };
        let owns_record = match record {
            Some(record) if record.owner != owner => return Err(refused()),
            Some(_) => true,
            None => false,
        };
        let append = || {
            self.store.events.append_events(
                id,
                &owner,
                &batch.events,
                &batch.dead_letters,
                self.retention,
                received_at,
            )
        };
        let mut outcome = append().await.map_err(ErrorDetail::from)?;
        if outcome.is_none() && owns_record {
            // Another sender posted events first and the record's own write has not
            // dropped them yet: the record says whose they are.
            self.drop_squatted_events(id, &owner).await?;
            outcome = append().await.map_err(ErrorDetail::from)?;
        }
        let outcome = outcome.ok_or_else(refused)?;
        metrics::counter!("sandgate_events_total", "outcome" => "stored")
            .increment(u64::from(outcome.stored));
        metrics::counter!("sandgate_events_total", "outcome" => "duplicate")
            .increment(u64::from(outcome.duplicates));
        metrics::counter!("sandgate_events_total", "outcome" => "rejected")
            .increment(batch.dead_letters.len() as u64);
        metrics::counter!("sandgate_events_dropped_total").increment(outcome.dropped);
        for letter in &batch.dead_letters {
            tracing::warn!(conversation = %id, reason = %letter.reason, "event kept as a dead letter");
        }
        if batch.change != events::StateChange::default() {
            self.apply_change(id, &owner, &batch.change).await?;
        }
        tracing::info!(
            conversation = %id,
            stored = outcome.stored,
            duplicates = outcome.duplicates,
            rejected = batch.dead_letters.len(),
            dropped = outcome.dropped,
            "events recorded"
        );
        Ok(Response::new(AppendEventsResponse {
            success: true,
            stored: outcome.stored,
            duplicates: outcome.duplicates,
            rejected: batch.dead_letters.len() as u32,
        }))
    }

    async fn list_events(
        &self,
        request: Request<ListEventsRequest>,
    ) -> Result<Response<ListEventsResponse>, Status> {
        let reader = self.auth.reader(request.metadata()).await?;
        let query = request.into_inner();
        let id = parse_id(&query.conversation_id)?;
        if !self.events_readable(&reader, id).await? {
            return Err(not_found(&query.conversation_id));
        }
        let after = match query.page_token.as_str() {
            "" => None,
            token if sandgate_store::events::is_order_key(token) => Some(token.to_owned()),
            _ => {
                return Err(validation::single(
                    "value_error",
                    vec![LocItem::Key("page_token".into())],
                    "Value error, not a page token of this list",
                )
                .into());
            }
        };
        let limit = match query.page_size as usize {
            0 => DEFAULT_PAGE_SIZE,
            size => size.min(MAX_PAGE_SIZE),
        };
        let oldest = self.oldest_listed();
        let mut page = EventPage {
            after,
            // Small pages still read in batches worth a round trip.
            limit: limit.max(16),
            descending: query.descending,
        };
        let mut found = Vec::new();
        let mut last_key = None;
        let mut more = false;
        'scan: loop {
            let batch = self
                .store
                .events
                .list_events(id, &page)
                .await
                .map_err(ErrorDetail::from)?;
            let exhausted = batch.len() < page.limit;
            for event in batch {
                page.after = Some(event.order_key.clone());
                let kind = view::event_kind(&event);
                if event.timestamp < oldest
                    || (!query.kinds.is_empty() && !query.kinds.contains(&kind))
                {
                    continue;
                }
                if found.len() == limit {
                    more = true;
                    break 'scan;
                }
                found.push(view::event(&event, kind));
                last_key = page.after.clone();
            }
            if exhausted {
                break;
            }
        }
        let next_page_token = match (more, last_key) {
            (true, Some(key)) => key,
            _ => String::new(),
        };
        Ok(Response::new(ListEventsResponse {
            events: found,
            next_page_token,
        }))
    }
}
