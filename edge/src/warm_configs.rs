//! The warm runtime configurations over REST (spec 4.1) → the RuntimeAdmin service:
//! listed with the runtime API key (with an `ETag`), saved and deleted with the admin
//! token.

use std::collections::BTreeMap;
use std::sync::Arc;

use utoipa::openapi::schema::{ObjectBuilder, Type};

use axum::Json;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use sandgate_proto::admin::v1::{
    ConfigSource, DeleteWarmRuntimeConfigRequest, ListWarmRuntimeConfigsRequest,
    PutWarmRuntimeConfigRequest, WarmRuntimeConfigEntry, put_warm_runtime_config_request,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::client::ClientAddress;
use crate::error::{ApiError, DetailBody, ValidationBody};
use crate::state::{AppState, RenderedList};
use crate::{body, metadata};

/// A configuration as listed: spec 2.2, with the whole body so it can be templated.
#[derive(Serialize, ToSchema)]
#[schema(as = WarmRuntimeConfigEntry)]
pub(crate) struct ConfigEntry {
    name: String,
    #[schema(schema_with = config_source)]
    source: &'static str,
    /// Full image reference; distinct across configurations
    #[schema(min_length = 1)]
    image: String,
    /// The pool size in effect
    count: i64,
    /// Absolute path
    working_dir: String,
    #[schema(min_items = 1)]
    command: Vec<String>,
    environment: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = i64, minimum = 0)]
    run_as_user: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = i64, minimum = 0)]
    run_as_group: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = i64, minimum = 0)]
    fs_group: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = bool)]
    fuse_s3_mount: Option<bool>,
    /// PUT only: environment keys of the installer default v1_current that this
    /// configuration lacks
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Vec<String>)]
    warnings: Option<Vec<String>>,
}

fn config_source() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["file", "db"]))
}

/// `GET /api/warm-runtime-configs`' answer.
#[derive(Serialize, ToSchema)]
#[schema(as = WarmRuntimeConfigList)]
pub(crate) struct ConfigList {
    configs: Vec<ConfigEntry>,
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

/// `GET /api/warm-runtime-configs`, with an `ETag`; a client's matching `If-None-Match`
/// gets 304.
#[utoipa::path(
    get,
    path = "/api/warm-runtime-configs",
    operation_id = "list_warm_runtime_configs",
    tag = "Runtime management",
    summary = "The effective warm runtime configurations",
    security(("RuntimeAPIKey" = [])),
    params(("If-None-Match" = Option<String>, Header, nullable = false, description = "An ETag of an earlier answer")),
    responses(
        (
            status = 200,
            description = "Installer entries merged with saved ones, by name",
            body = ConfigList,
            headers(("ETag" = String, description = "Identifies the list's contents, the same on every replica")),
        ),
        (status = 304, description = "The If-None-Match tag is still current"),
        (status = 401, description = "`provide a valid API key`", body = DetailBody),
    ),
)]
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
    let body = serde_json::to_vec(&ConfigList { configs })
        .map_err(|err| ApiError::Edge(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()))?;
    let rendered = Arc::new(RenderedList {
        etag: response.etag,
        body: body.into(),
    });
    state.config_list.put(rendered.clone());
    Ok(rendered)
}

/// No `name` (it is the path) and no `source` (the server sets it)
// The RuntimeAdmin service reads the body; this type is the document's.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = WarmRuntimeConfig)]
#[expect(dead_code, reason = "describes the body, which the service parses")]
struct ConfigBody {
    /// Full image reference, without whitespace; distinct across configurations
    #[schema(
        min_length = 1,
        pattern = "^[^\\t\\n\\u000b\\u000c\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]+$"
    )]
    image: String,
    /// Absolute path
    #[schema(pattern = "^/")]
    working_dir: String,
    #[schema(min_items = 1)]
    command: Vec<String>,
    #[schema(schema_with = crate::runtimes::environment)]
    environment: BTreeMap<String, String>,
    /// Warm sandboxes to keep (at most WARM_POOL_MAX_SIZE, 100 by default; all
    /// configurations together at most WARM_POOLS_MAX_TOTAL); else the installer-wide
    /// count, else 3
    #[schema(minimum = 0, maximum = 100)]
    count: Option<i64>,
    #[schema(schema_with = crate::runtimes::id_number)]
    run_as_user: Option<i64>,
    #[schema(schema_with = crate::runtimes::id_number)]
    run_as_group: Option<i64>,
    #[schema(schema_with = crate::runtimes::id_number)]
    fs_group: Option<i64>,
    fuse_s3_mount: Option<bool>,
}

#[utoipa::path(
    put,
    path = "/api/admin/warm-runtime-configs/{name}",
    operation_id = "put_warm_runtime_config",
    tag = "Runtime management",
    summary = "Create or replace a saved configuration",
    security(("AdminToken" = [])),
    params((
        "name" = String,
        Path,
        description = "The configuration's identity",
        pattern = "^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$",
    )),
    request_body(content = ConfigBody),
    responses(
        (status = 200, description = "The saved configuration", body = ConfigEntry),
        (status = 401, description = "Missing, invalid or expired admin token", body = DetailBody),
        (status = 403, description = "No admin password is configured: `Admin functionality is disabled`", body = DetailBody),
        (status = 409, description = "Another configuration uses the image; the detail names it", body = DetailBody),
        (status = 422, description = "Validation error", body = ValidationBody),
        (status = 413, description = "Body larger than the configured limit", body = DetailBody),
    ),
)]
pub async fn put_config(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    client: ClientAddress,
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
        .put_warm_runtime_config(metadata::request_for(&headers, client, request))
        .await?
        .into_inner();
    Ok(Json(rest_entry(
        response.saved.unwrap_or_default(),
        Some(response.warnings),
    )))
}

#[utoipa::path(
    delete,
    path = "/api/admin/warm-runtime-configs/{name}",
    operation_id = "delete_warm_runtime_config",
    tag = "Runtime management",
    summary = "Delete a saved configuration",
    security(("AdminToken" = [])),
    params((
        "name" = String,
        Path,
        description = "The configuration's identity",
        pattern = "^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$",
    )),
    responses(
        (status = 200, description = "`Configuration \"<name>\" deleted successfully`", body = Message),
        (status = 401, description = "Missing, invalid or expired admin token", body = DetailBody),
        (status = 403, description = "No admin password is configured: `Admin functionality is disabled`", body = DetailBody),
        (status = 404, description = "`Configuration \"<name>\" not found`: no saved configuration of that name", body = DetailBody),
    ),
)]
pub async fn delete_config(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    client: ClientAddress,
) -> Result<Json<Message>, ApiError> {
    let response = state
        .admin
        .clone()
        .delete_warm_runtime_config(metadata::request_for(
            &headers,
            client,
            DeleteWarmRuntimeConfigRequest { name },
        ))
        .await?
        .into_inner();
    Ok(Json(Message {
        message: response.message,
    }))
}

/// `{"message": "..."}`.
#[derive(Serialize, ToSchema)]
pub(crate) struct Message {
    message: String,
}
