//! The Conversations service: the webhook's record store and the catalog reads.

pub mod creation_rate;
mod event_log;
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
    UpsertResponse,
};
use sandgate_proto::error::{ErrorCode, ErrorDetail};
use tonic::{Request, Response, Status};
use uuid::Uuid;

use crate::auth::{Authenticator, Principal, Reader};
use crate::validation;
use sandgate_conversation::LocItem;
use sandgate_store::{Activity, EventRetention, Store, StoredConversation};

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
    /// New conversations each sender may create per window; `None`, unbounded.
    creation_rate: Option<creation_rate::CreationRate>,
    /// The sandboxes linked to the conversation they serve, in the ledger.
    links: crate::ledger::SessionLinks,
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
            creation_rate: Some(creation_rate::DEFAULT_CREATION_RATE),
            links: Default::default(),
        }
    }

    /// Bounds the conversations each sender may create per window (`None`: unbounded).
    #[must_use]
    pub fn with_creation_rate(mut self, rate: Option<creation_rate::CreationRate>) -> Self {
        self.creation_rate = rate;
        self
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
        let id = conversation.1.id.simple().to_string();
        let tags = self.record(&principal, conversation).await?;
        // Its counts, this update's first, go under its tags as they now are.
        self.store.ledger.note_tags(&id, &tags);
        crate::ledger::add(&self.store, &id, sandgate_store::Measure::Webhooks, 1.0).await;
        if let Principal::Sandbox(runtime_id) = &principal {
            self.links.link(&self.store, runtime_id, &id).await;
        }
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
        self.append(request).await
    }

    async fn list_events(
        &self,
        request: Request<ListEventsRequest>,
    ) -> Result<Response<ListEventsResponse>, Status> {
        self.events_page(request).await
    }
}
