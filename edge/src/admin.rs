//! Runtime management (spec 4.1) → the RuntimeAdmin service: admin login, API keys and warm
//! runtime configurations.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use sandgate_proto::admin::v1::{
    ConfigSource, DeleteWarmRuntimeConfigRequest, GetChallengeRequest, ListApiKeysRequest,
    ListWarmRuntimeConfigsRequest, LoginRequest, PutWarmRuntimeConfigRequest,
    WarmRuntimeConfigEntry, put_warm_runtime_config_request,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::client::ClientAddress;
use crate::error::ApiError;
use crate::state::{AppState, RenderedList};
use crate::{body, metadata};

#[derive(Deserialize)]
struct LoginBody {
    challenge: String,
    hash: String,
}

/// A configuration as listed: spec 2.2, with the whole body so it can be templated.
#[derive(Serialize)]
pub struct ConfigEntry {
    name: String,
    image: String,
    source: &'static str,
    count: i64,
    working_dir: String,
    command: Vec<String>,
    environment: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_as_user: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_as_group: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fs_group: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fuse_s3_mount: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<Vec<String>>,
}

fn rest_entry(entry: WarmRuntimeConfigEntry, warnings: Option<Vec<String>>) -> ConfigEntry {
    let source = match entry.source() {
        ConfigSource::File => "file",
        ConfigSource::Db | ConfigSource::Unspecified => "db",
    };
    let config = entry.config.unwrap_or_default();
    ConfigEntry {
        name: entry.name,
        image: config.image,
        source,
        count: entry.count,
        working_dir: config.working_dir,
        command: config.command,
        environment: config.environment.into_iter().collect(),
        run_as_user: config.run_as_user,
        run_as_group: config.run_as_group,
        fs_group: config.fs_group,
        fuse_s3_mount: config.fuse_s3_mount,
        warnings,
    }
}

pub async fn challenge(
    State(state): State<AppState>,
    client: ClientAddress,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let challenge = state
        .admin
        .clone()
        .get_challenge(metadata::request_for(
            &headers,
            client,
            GetChallengeRequest {},
        ))
        .await?
        .into_inner();
    Ok(Json(json!({
        "challenge": challenge.challenge,
        "salt": challenge.salt,
        "iterations": challenge.iterations,
    })))
}

pub async fn login(
    State(state): State<AppState>,
    client: ClientAddress,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let payload = body::buffered(payload, state.body_limit)?;
    let LoginBody { challenge, hash } = body::decode(&payload)?;
    let login = state
        .admin
        .clone()
        .login(metadata::request_for(
            &headers,
            client,
            LoginRequest { challenge, hash },
        ))
        .await?
        .into_inner();
    Ok(Json(json!({ "token": login.token })))
}

pub async fn api_keys(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let keys = state
        .admin
        .clone()
        .list_api_keys(metadata::request(&headers, ListApiKeysRequest {}))
        .await?
        .into_inner()
        .keys;
    Ok(Json(Value::Array(
        keys.into_iter()
            .map(|key| {
                json!({
                    "id": key.id,
                    "name": key.name,
                    "key_value": key.key_value,
                    "max_runtimes": key.max_runtimes,
                    "remaining_credits": key.remaining_credits,
                })
            })
            .collect(),
    )))
}

/// `GET /api/warm-runtime-configs`, with an `ETag`; a client's matching `If-None-Match`
/// gets 304.
pub async fn list_configs(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let list = match render_configs(&state, &headers).await {
        Ok(list) => list,
        Err(err) => return err.into_response(),
    };
    let etag = format!("\"{}\"", list.etag);
    let unchanged = headers
        .get(http::header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|tag| tag.trim() == etag));
    if unchanged {
        return (StatusCode::NOT_MODIFIED, [(http::header::ETAG, etag)]).into_response();
    }
    (
        [
            (http::header::CONTENT_TYPE, "application/json".to_owned()),
            (http::header::ETAG, etag),
        ],
        list.body.clone(),
    )
        .into_response()
}

async fn render_configs(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Arc<RenderedList>, ApiError> {
    let cached = state.config_list.get();
    let request = ListWarmRuntimeConfigsRequest {
        if_none_match: cached
            .as_ref()
            .map(|cached| cached.etag.clone())
            .unwrap_or_default(),
    };
    let response = state
        .admin
        .clone()
        .list_warm_runtime_configs(metadata::request(headers, request))
        .await?
        .into_inner();
    if let Some(cached) = cached.filter(|_| response.not_modified) {
        return Ok(cached);
    }
    let configs: Vec<ConfigEntry> = response
        .configs
        .into_iter()
        .map(|entry| rest_entry(entry, None))
        .collect();
    let body = serde_json::to_vec(&json!({ "configs": configs }))
        .map_err(|err| ApiError::Edge(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()))?;
    let rendered = Arc::new(RenderedList {
        etag: response.etag,
        body: body.into(),
    });
    state.config_list.put(rendered.clone());
    Ok(rendered)
}

pub async fn put_config(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<ConfigEntry>, ApiError> {
    let payload = body::buffered(payload, state.body_limit)?;
    let request = PutWarmRuntimeConfigRequest {
        name,
        body: Some(put_warm_runtime_config_request::Body::Json(payload)),
    };
    let response = state
        .admin
        .clone()
        .put_warm_runtime_config(metadata::request(&headers, request))
        .await?
        .into_inner();
    Ok(Json(rest_entry(
        response.saved.unwrap_or_default(),
        Some(response.warnings),
    )))
}

pub async fn delete_config(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let response = state
        .admin
        .clone()
        .delete_warm_runtime_config(metadata::request(
            &headers,
            DeleteWarmRuntimeConfigRequest { name },
        ))
        .await?
        .into_inner();
    Ok(Json(json!({ "message": response.message })))
}
