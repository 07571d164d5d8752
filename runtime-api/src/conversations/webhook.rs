//! The conversation webhook (`Upsert`): a delivery admitted (parsed and validated, on the
//! borrowed fast path when it can be), then recorded by compare-and-swap, ordered by
//! `updated_at` and refused when another sender owns the conversation.

use sandgate_conversation::{ConversationSummary, ValidConversation};
use sandgate_proto::conversations::v1::{UpsertRequest, upsert_request};
use sandgate_proto::error::{ErrorCode, ErrorDetail};
use std::collections::BTreeMap;
use tonic::{Request, Status};
use uuid::Uuid;

use super::lifecycle::{self, Order};
use super::{ConversationsService, MAX_WRITE_ATTEMPTS, contended, now_micros};
use crate::auth::Principal;
use crate::validation;

/// A delivery that validated: its redacted record, serialized, and its summary.
type Admitted = (Box<serde_json::value::RawValue>, ConversationSummary);

impl ConversationsService {
    /// Parses and validates a delivery. Malformed JSON is answered before the caller is
    /// authenticated, as the reference receiver does; everything else after.
    pub(super) async fn admit(
        &self,
        request: Request<UpsertRequest>,
    ) -> Result<(Principal, Admitted), Status> {
        let (metadata, _, body) = request.into_parts();
        let size = match &body.body {
            Some(upsert_request::Body::Json(json)) => json.len(),
            _ => 0,
        };
        // Most deliveries validate: the borrowed fast path settles them without a `Value`.
        let (fast, parsed, body) = sandgate_proto::heavy::judged(size, move || {
            let fast = match &body.body {
                Some(upsert_request::Body::Json(json)) => {
                    sandgate_conversation::validate_body(json)
                }
                _ => None,
            };
            let parsed = match (&fast, &body.body) {
                (None, Some(upsert_request::Body::Json(json))) if !json.is_empty() => {
                    Some(sandgate_conversation::parse_json(json))
                }
                _ => None,
            };
            (fast, parsed, body.body)
        })
        .await?;
        if let Some((record, summary)) = fast {
            let principal = self.auth.session(&metadata).await?;
            return Ok((principal, (record, summary)));
        }
        let parsed = parsed
            .transpose()
            .map_err(|err| validation::failure(vec![err]))?;
        let principal = self.auth.session(&metadata).await?;
        let value = match (parsed, body) {
            (Some(value), _) => value,
            (None, Some(upsert_request::Body::Other(_))) => {
                return Err(validation::single(
                    "model_attributes_type",
                    Vec::new(),
                    "Input should be a valid dictionary or object to extract fields from",
                )
                .into());
            }
            (None, _) => {
                return Err(validation::single("missing", Vec::new(), "Field required").into());
            }
        };
        let ValidConversation { record, summary } =
            sandgate_proto::heavy::judged(size, move || {
                sandgate_conversation::validate_conversation(value)
            })
            .await?
            .map_err(validation::failure)?;
        let record = serde_json::value::to_raw_value(&record).map_err(|err| {
            ErrorDetail::new(
                ErrorCode::Internal,
                format!("cannot encode the record: {err}"),
            )
        })?;
        Ok((principal, (record, summary)))
    }

    /// Writes a validated delivery: ordered by `updated_at`, atomic against concurrent
    /// deliveries for the same id, refused when another sender owns the conversation. The
    /// conversation's tags as they now are.
    pub(super) async fn record(
        &self,
        principal: &Principal,
        admitted: Admitted,
    ) -> Result<BTreeMap<String, String>, Status> {
        let (record, summary) = admitted;
        let owner = principal.owner();
        let id = summary.id;
        let mut creation_counted = false;
        for _ in 0..MAX_WRITE_ATTEMPTS {
            let previous = self
                .store
                .conversations
                .get(id)
                .await
                .map_err(ErrorDetail::from)?;
            if let Some(previous) = &previous {
                if previous.owner != owner {
                    tracing::warn!(conversation = %id, sender = %owner, "delivery for a conversation owned by another sender");
                    return Err(ErrorDetail::new(ErrorCode::Unauthenticated, "Unauthorized").into());
                }
                match lifecycle::order(previous, summary.updated_at, &record) {
                    Order::Newer => {}
                    order => {
                        self.store
                            .conversations
                            .settled()
                            .await
                            .map_err(ErrorDetail::from)?;
                        tracing::info!(conversation = %id, ?order, "delivery acknowledged without a write");
                        return Ok(previous.tags.clone());
                    }
                }
            }
            if previous.is_none() && !creation_counted {
                super::creation_rate::count(&self.store, self.creation_rate, &owner).await?;
                creation_counted = true;
            }
            let next = lifecycle::next_record(
                previous.as_ref(),
                &summary,
                record.clone(),
                owner.clone(),
                now_micros(),
            );
            if self.swap(previous.as_ref(), &next).await? {
                if previous.is_none() {
                    self.drop_squatted_events(id, &owner).await?;
                }
                tracing::info!(
                    conversation = %id,
                    status = %next.execution_status,
                    version = next.version,
                    lifecycle = ?next.lifecycle.last().filter(|event| event.received_at == next.received_at).map(|event| event.kind),
                    "conversation recorded"
                );
                return Ok(next.tags);
            }
        }
        Err(contended(id))
    }

    /// Events posted before the conversation's record are held for the record's owner:
    /// once the record names it, events another sender posted are dropped, so whoever
    /// posts first cannot lock the owner out of its own conversation (its events would be
    /// refused for good). The owner's own events are its already: nothing to adopt.
    pub(super) async fn drop_squatted_events(&self, id: Uuid, owner: &str) -> Result<(), Status> {
        let Some(events) = self
            .store
            .events
            .event_stats(id)
            .await
            .map_err(ErrorDetail::from)?
        else {
            return Ok(());
        };
        if events.owner != owner
            && self
                .store
                .events
                .forget_events(id, &events.owner)
                .await
                .map_err(ErrorDetail::from)?
        {
            tracing::warn!(conversation = %id, squatter = %events.owner, "dropped events another sender posted before the conversation's record");
        }
        Ok(())
    }
}
