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
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::state::AppState;
use crate::{body, metadata};

pub async fn receive(
    State(state): State<AppState>,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
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
    Ok(Json(json!({ "success": response.success })))
}

/// An agent-server's event batch. The answer counts what was stored, what was a repeat
/// and what became a dead letter; senders read only its success.
pub async fn receive_events(
    State(state): State<AppState>,
    Path(conversation_id): Path<String>,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
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
    Ok(Json(json!({
        "success": response.success,
        "stored": response.stored,
        "duplicates": response.duplicates,
        "rejected": response.rejected,
    })))
}
