//! `POST /api/v1/webhooks/conversations` → `Conversations.Upsert`, and
//! `POST /api/v1/webhooks/events/{conversation_id}` → `Conversations.AppendEvents`.

use axum::Json;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use bytes::Bytes;
use http::HeaderMap;
use sandgate_proto::conversations::v1::{
    AppendEventsRequest, UpsertRequest, append_events_request, upsert_request,
};
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::{ApiError, DetailBody, ValidationBody};
use crate::openapi::ConversationInfo;
use crate::state::AppState;
use crate::{body, metadata};

/// The answer to a delivery that was stored.
#[derive(Serialize, ToSchema)]
pub(crate) struct Success {
    #[schema(default = true)]
    success: bool,
}

/// What became of an event batch.
#[derive(Serialize, ToSchema)]
pub(crate) struct EventBatchResult {
    success: bool,
    /// Events stored by this batch
    stored: u32,
    /// Events stored before (a re-sent batch), not stored again
    duplicates: u32,
    /// Events that failed validation, kept in the conversation's dead-letter list with the
    /// reason
    rejected: u32,
}

#[utoipa::path(
    post,
    path = "/api/v1/webhooks/conversations",
    operation_id = "on_conversation_update_api_v1_webhooks_conversations_post",
    tag = "Webhooks",
    summary = "Callback for when a conversation starts, pauses, resumes or deletes",
    description = "Idempotent and ordered: a repeated delivery stores once; a delivery whose updated_at is older than the stored record's is acknowledged without overwriting it. Secrets in the record are redacted before it is stored or logged. Malformed JSON is answered 422 before the key is checked.",
    security(("APIKeyHeader" = [])),
    request_body(content = ConversationInfo),
    responses(
        (status = 200, description = "Stored (or already stored)", body = Success),
        (status = 401, description = "Missing or invalid X-Session-API-Key, or the conversation belongs to another sandbox", body = DetailBody),
        (status = 413, description = "Body larger than the configured limit", body = DetailBody),
        (status = 422, description = "Validation error", body = ValidationBody),
        (
            status = 429,
            description = "The key created `WEBHOOK_NEW_CONVERSATIONS_RATE` new conversations in its window; its existing ones still take deliveries",
            headers(("Retry-After" = u32, description = "Seconds until the key's window ends")),
            body = DetailBody,
        ),
        (status = 503, description = "The store is unavailable; retry", body = DetailBody),
    ),
)]
pub async fn receive(
    State(state): State<AppState>,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<Success>, ApiError> {
    let payload = body::buffered(payload, state.body_limit)?;
    let message = UpsertRequest {
        body: Some(if body::is_json(&headers) {
            upsert_request::Body::Json(payload)
        } else {
            upsert_request::Body::Other(payload)
        }),
    };
    let response = state
        .conversations
        .clone()
        .upsert(metadata::request(&headers, message))
        .await?
        .into_inner();
    Ok(Json(Success {
        success: response.success,
    }))
}

// An agent-server's event batch. The answer counts what was stored, what was a repeat
// and what became a dead letter; senders read only its success.
#[utoipa::path(
    post,
    path = "/api/v1/webhooks/events/{conversation_id}",
    operation_id = "on_event_api_v1_webhooks_events__conversation_id__post",
    tag = "Webhooks",
    summary = "Callback with a batch of a conversation's agent-server events",
    description = "Idempotent by event id; events are ordered by timestamp, then arrival. An event that fails validation never refuses the batch: it is kept in the conversation's dead-letter list with the reason and counted. Secrets are redacted before anything is stored or logged. A ConversationStateUpdateEvent of execution_status or title updates the conversation's record unless the record is newer.",
    security(("APIKeyHeader" = [])),
    params((
        "conversation_id" = String,
        Path,
        description = "The conversation id: hex (as the agent-server sends it), hyphenated, braced or as a URN",
        pattern = r"^([0-9a-fA-F]{32}|(urn:uuid:)?[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|\{[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\})$",
    )),
    request_body(
        content = Vec<serde_json::Value>,
        description = "Agent-server events (AgentEvent). The batch is taken whatever its items: an item that is not a valid event becomes a dead letter, counted in `rejected`, and never stalls the others",
    ),
    responses(
        (status = 200, description = "Durable", body = EventBatchResult),
        (status = 401, description = "Missing or invalid X-Session-API-Key, or the conversation belongs to another sender", body = DetailBody),
        (status = 413, description = "Body larger than the configured limit", body = DetailBody),
        (status = 422, description = "The body is not a JSON list, or the conversation id is not a UUID", body = ValidationBody),
        (status = 503, description = "The store is unavailable; retry", body = DetailBody),
    ),
)]
pub async fn receive_events(
    State(state): State<AppState>,
    Path(conversation_id): Path<String>,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<EventBatchResult>, ApiError> {
    let payload = body::buffered(payload, state.body_limit)?;
    let message = AppendEventsRequest {
        conversation_id,
        body: Some(if body::is_json(&headers) {
            append_events_request::Body::Json(payload)
        } else {
            append_events_request::Body::Other(payload)
        }),
    };
    let response = state
        .conversations
        .clone()
        .append_events(metadata::request(&headers, message))
        .await?
        .into_inner();
    Ok(Json(EventBatchResult {
        success: response.success,
        stored: response.stored,
        duplicates: response.duplicates,
        rejected: response.rejected,
    }))
}
