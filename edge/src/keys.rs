//! The model gateway's key management (LiteLLM's `/key/*` endpoints) → the ModelGateway
//! service's `ManageKeys`: the bodies and queries pass as LiteLLM's JSON, which the
//! service reads; errors in OpenAI's shape, as on the gateway's other routes.

use std::collections::HashMap;

use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, header};
use sandgate_proto::error::ErrorCode;
use sandgate_proto::models::v1::{KeyOperation, ManageKeysRequest};

use crate::metadata;
use crate::models::{GatewayError, body, client};
use crate::state::AppState;

async fn manage(
    state: &AppState,
    headers: &HeaderMap,
    operation: KeyOperation,
    body: Bytes,
) -> Result<Response, GatewayError> {
    let answer = client(state)?
        .manage_keys(metadata::request(
            headers,
            ManageKeysRequest {
                operation: operation.into(),
                body,
            },
        ))
        .await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], answer.body).into_response())
}

/// A query's parameters as the JSON object the service reads.
fn query_object(
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Bytes, GatewayError> {
    let Query(query) = query
        .map_err(|rejection| GatewayError::new(ErrorCode::BadRequest, rejection.body_text()))?;
    Ok(Bytes::from(serde_json::to_vec(&query).unwrap_or_default()))
}

/// `POST /key/generate`.
pub async fn generate(
    State(state): State<AppState>,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Response, GatewayError> {
    manage(&state, &headers, KeyOperation::Generate, body(payload)?).await
}

/// `POST /key/update`.
pub async fn update(
    State(state): State<AppState>,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Response, GatewayError> {
    manage(&state, &headers, KeyOperation::Update, body(payload)?).await
}

/// `POST /key/delete`.
pub async fn delete(
    State(state): State<AppState>,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Response, GatewayError> {
    manage(&state, &headers, KeyOperation::Delete, body(payload)?).await
}

/// `GET /key/info?key=…`: without `key`, the caller's own.
pub async fn info(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, GatewayError> {
    manage(&state, &headers, KeyOperation::Info, query_object(query)?).await
}

/// `GET /key/list?page=&size=&return_full_object=&key_alias=&user_id=&team_id=`.
pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, GatewayError> {
    manage(&state, &headers, KeyOperation::List, query_object(query)?).await
}
