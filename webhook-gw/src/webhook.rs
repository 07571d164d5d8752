//! `POST /api/v1/webhooks/conversations` → `Conversations.Upsert`.

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use bytes::Bytes;
use http::HeaderMap;
use sandgate_proto::conversations::v1::{UpsertRequest, upsert_request};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::{AppState, body, metadata};

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
