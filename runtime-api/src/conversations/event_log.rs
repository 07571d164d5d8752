//! The service's event calls: a batch appended (sorted into events and dead letters,
//! stored once each under the record's sender, the state changes it carries applied to
//! the record) and the events read back a page at a time.

use sandgate_proto::conversations::v1::{
    AppendEventsRequest, AppendEventsResponse, ListEventsRequest, ListEventsResponse,
    append_events_request,
};
use sandgate_proto::error::{ErrorCode, ErrorDetail};
use serde_json::Value;
use tonic::{Request, Response, Status};

use crate::validation;
use sandgate_conversation::LocItem;
use sandgate_store::EventPage;

use super::{
    ConversationsService, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, events, not_found, now_micros,
    parse_id, view,
};

impl ConversationsService {
    /// `AppendEvents`: the batch sorted into events and dead letters, stored once each,
    /// and the state changes it carries applied to the record.
    pub(super) async fn append(
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
                sandgate_proto::heavy::judged(json.len(), move || {
                    sandgate_conversation::parse_json(&json).map_err(Box::new)
                })
                .await?
                .map_err(|err| validation::failure(vec![*err]))?
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
        crate::ledger::add(
            &self.store,
            &id.simple().to_string(),
            sandgate_store::Measure::Events,
            f64::from(outcome.stored),
        )
        .await;
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

    /// `ListEvents`: a page of a readable conversation's events, in order, filtered by
    /// kind, without those older than `oldest_listed`.
    pub(super) async fn events_page(
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
