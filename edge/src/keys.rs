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

use crate::client::ClientAddress;
use crate::gateway_types::{KeyErrors, OpenAIError};
use crate::key_types::{
    DeleteKeys, DeletedKeys, GenerateKey, GeneratedKey, KeyInfo, KeyInfoAnswer, KeyPage, UpdateKey,
};
use crate::metadata;
use crate::models::{GatewayError, body, client};
use crate::params::KeysPageSize;
use crate::state::AppState;

async fn manage(
    state: &AppState,
    headers: &HeaderMap,
    address: ClientAddress,
    operation: KeyOperation,
    body: Bytes,
) -> Result<Response, GatewayError> {
    let answer = client(state)?
        .manage_keys(metadata::request_for(
            headers,
            address,
            ManageKeysRequest {
                operation: operation.into(),
                body,
            },
        ))
        .await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], answer.body).into_response())
}

/// A query's parameters as the JSON object the service reads.
pub(crate) fn query_object(
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Bytes, GatewayError> {
    let Query(query) = query
        .map_err(|rejection| GatewayError::new(ErrorCode::BadRequest, rejection.body_text()))?;
    Ok(Bytes::from(serde_json::to_vec(&query).unwrap_or_default()))
}

/// `POST /key/generate`.
#[utoipa::path(
    post,
    path = "/key/generate",
    operation_id = "generate_key",
    tag = "Model gateway",
    summary = "A virtual key: its models, budgets and expiry (LiteLLM's `/key/generate`)",
    security(("MasterKey" = [])),
    request_body(content = GenerateKey),
    responses(
        (status = 200, description = "The key, shown once, and what is kept of it", body = GeneratedKey),
        (status = 400, description = "A field of the wrong type or out of bounds, or a limit this gateway does not enforce", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: key management is the master key's", body = OpenAIError),
        (status = 409, description = "The key alias, or the chosen key, is another key's (the master key's included)", body = OpenAIError),
        (status = 413, description = "Body larger than the configured limit", body = OpenAIError),
    ),
)]
pub async fn generate(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        KeyOperation::Generate,
        body(payload)?,
    )
    .await
}

/// `POST /key/update`.
#[utoipa::path(
    post,
    path = "/key/update",
    operation_id = "update_key",
    tag = "Model gateway",
    summary = "Changes the fields the body names (LiteLLM's `/key/update`)",
    security(("MasterKey" = [])),
    request_body(content = UpdateKey),
    responses(
        (status = 200, description = "The key as it is now", body = KeyInfo),
        (status = 400, description = "No `key`, or a field of the wrong type or out of bounds", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: key management is the master key's", body = OpenAIError),
        (status = 404, description = "No such key", body = OpenAIError),
        (status = 409, description = "The key alias is another key's", body = OpenAIError),
        (status = 413, description = "Body larger than the configured limit", body = OpenAIError),
    ),
)]
pub async fn update(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        KeyOperation::Update,
        body(payload)?,
    )
    .await
}

/// `POST /key/delete`.
#[utoipa::path(
    post,
    path = "/key/delete",
    operation_id = "delete_keys",
    tag = "Model gateway",
    summary = "Deletes keys, by key, token or alias: all of them or none",
    security(("MasterKey" = [])),
    request_body(content = DeleteKeys),
    responses(
        (status = 200, description = "What was deleted, as named", body = DeletedKeys),
        (status = 400, description = "Neither `keys` nor `key_aliases`", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: key management is the master key's", body = OpenAIError),
        (status = 404, description = "A named key does not exist: none was deleted", body = OpenAIError),
        (status = 413, description = "Body larger than the configured limit", body = OpenAIError),
    ),
)]
pub async fn delete(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        KeyOperation::Delete,
        body(payload)?,
    )
    .await
}

/// `GET /key/info?key=…`: without `key`, the caller's own.
#[utoipa::path(
    get,
    path = "/key/info",
    operation_id = "key_info",
    tag = "Model gateway",
    summary = "One key's settings and spend: `key` names it (the key or its token); without it, the caller's own",
    security(("MasterKey" = [])),
    params(("key" = Option<String>, Query, description = "The key, or (better: it keeps the key out of access logs) its sha256 hex")),
    responses(
        (status = 200, description = "The key", body = KeyInfoAnswer),
        (status = 400, description = "The master key named no key", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key asking for another key's info", body = OpenAIError),
        (status = 404, description = "No such key", body = OpenAIError),
    ),
)]
pub async fn info(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        KeyOperation::Info,
        query_object(query)?,
    )
    .await
}

/// `GET /key/list?page=&size=&return_full_object=&key_alias=&user_id=&team_id=`.
#[utoipa::path(
    get,
    path = "/key/list",
    operation_id = "list_keys",
    tag = "Model gateway",
    summary = "The keys, oldest first, a page at a time: their tokens, or whole with `return_full_object`",
    security(("MasterKey" = [])),
    params(
        ("page" = Option<u64>, Query, minimum = 1, description = "Page number, from 1"),
        KeysPageSize,
        ("return_full_object" = Option<bool>, Query),
        ("key_alias" = Option<String>, Query),
        ("user_id" = Option<String>, Query),
        ("team_id" = Option<String>, Query),
    ),
    responses(
        (status = 200, description = "A page", body = KeyPage),
        (status = 400, description = "`page` or `size` not a positive whole number", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: key management is the master key's", body = OpenAIError),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        KeyOperation::List,
        query_object(query)?,
    )
    .await
}
