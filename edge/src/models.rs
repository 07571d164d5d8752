//! The built-in model gateway (spec 4.2) → the ModelGateway service: the model list, added
//! entries and the spend log (the models' info is `model_info.rs`, the LLM APIs themselves
//! `llm.rs`). Errors use
//! OpenAI's shape, `{"error":{"message","type","param","code"}}`, as OpenAI clients expect,
//! and Anthropic's, `{"type":"error","error":{"type","message"}}`, on the Messages API's
//! routes.

use axum::Json;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sandgate_proto::models::v1::{
    AddModelRequest, Api, GatewayParams, GetModelRequest, ListModelsRequest, ListSpendLogsRequest,
};
use serde_json::Value;

use crate::client::ClientAddress;
use crate::error::after_caller;
use crate::gateway_types::{
    AddedModel, AddedParams, AnthropicError, AnthropicErrorBody, ErrorTag, ListTag,
    MasterKeyErrors, Model, ModelList, ModelTag, NewModel, OpenAIError, SpendLogEntry,
};
use crate::metadata;
use crate::model_gw::ModelGw;
use crate::params::SpendLogsQuery;
use crate::state::AppState;

/// An error answered in OpenAI's shape.
pub struct GatewayError(ErrorDetail);

impl From<tonic::Status> for GatewayError {
    fn from(status: tonic::Status) -> Self {
        let detail = ErrorDetail::from_status(&status);
        if detail.code() == ErrorCode::Internal {
            tracing::error!(code = ?status.code(), message = status.message(), "gRPC call failed");
        }
        Self(detail)
    }
}

impl GatewayError {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self(ErrorDetail::new(code, message))
    }

    /// The error in Anthropic's shape, as the Messages API's clients expect it.
    fn anthropic(self) -> Response {
        let status = self.0.code().http_status();
        let retry_after = self.0.retry_after_seconds;
        let kind = match self.0.reason.as_str() {
            "" | INVALID_TYPE => sandgate_proto::models::anthropic_error_type(status.as_u16()),
            reason => reason,
        };
        let body = AnthropicError {
            kind: ErrorTag::Error,
            error: AnthropicErrorBody {
                kind: kind.to_owned(),
                message: self.0.detail,
            },
        };
        with_retry_after((status, Json(body)).into_response(), retry_after)
    }

    /// The error in the shape the clients of `api` expect.
    pub(crate) fn for_api(self, api: Api) -> Response {
        if is_anthropic(api) {
            self.anthropic()
        } else {
            self.into_response()
        }
    }
}

pub(crate) fn is_anthropic(api: Api) -> bool {
    matches!(api, Api::Messages | Api::MessagesCountTokens)
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        let code = self.0.code();
        let status = code.http_status();
        let reason = self.0.reason.as_str();
        if reason == INVALID_TYPE {
            return invalid_type(status, &self.0.detail);
        }
        let param =
            (code == ErrorCode::NotFound || reason == "key_model_access_denied").then_some("model");
        let kind = match reason {
            "" => sandgate_proto::models::openai_error_type(status.as_u16()),
            reason => reason,
        };
        let body = sandgate_proto::models::openai_error_of_type(
            status.as_u16(),
            kind,
            &self.0.detail,
            param,
        );
        let response = (
            status,
            [(http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        with_retry_after(response, self.0.retry_after_seconds)
    }
}

/// `response` with the `retry-after` a rate limit's refusal names (LiteLLM's, in seconds).
fn with_retry_after(mut response: Response, seconds: u32) -> Response {
    if seconds > 0 {
        response
            .headers_mut()
            .insert(http::header::RETRY_AFTER, http::HeaderValue::from(seconds));
    }
    response
}

/// The model gateway's reason for a member of the wrong type: OpenAI's `code` for it.
const INVALID_TYPE: &str = "invalid_type";

/// A member of the wrong type, as OpenAI answers it: `{"error": {"message": "Invalid type
/// for 'stream': expected a boolean, but got a string instead.", "type":
/// "invalid_request_error", "param": "stream", "code": "invalid_type"}}`; the param is the
/// one the message names.
fn invalid_type(status: StatusCode, message: &str) -> Response {
    let param = message
        .strip_prefix("Invalid type for '")
        .and_then(|rest| rest.split_once('\''))
        .map(|(param, _)| param);
    let body = serde_json::json!({"error": {
        "message": message,
        "type": "invalid_request_error",
        "param": param,
        "code": INVALID_TYPE,
    }});
    (status, Json(body)).into_response()
}

pub(crate) fn client(state: &AppState) -> Result<&ModelGw, GatewayError> {
    state.models.as_ref().ok_or_else(|| {
        GatewayError::new(
            ErrorCode::Unavailable,
            "the model gateway is not configured on this edge",
        )
    })
}

pub(crate) fn body(payload: Result<Bytes, BytesRejection>) -> Result<Bytes, GatewayError> {
    payload.map_err(|rejection| {
        let code = if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ErrorCode::PayloadTooLarge
        } else {
            ErrorCode::BadRequest
        };
        GatewayError::new(code, rejection.body_text())
    })
}

fn model(model: sandgate_proto::models::v1::Model) -> Model {
    Model {
        id: model.id,
        object: ModelTag::Model,
        created: model.created,
        owned_by: model.owned_by,
    }
}

const LIST_MODELS: &str = "Every model a client may ask for: configured entries first, in order, then added ones; with a wildcard entry also `*` and the bundled OpenAI registry (200 or more entries); a virtual key sees its own models only";

#[utoipa::path(
    get,
    path = "/v1/models",
    operation_id = "list_models",
    tag = "Model gateway",
    summary = LIST_MODELS,
    security(("MasterKey" = [])),
    responses(
        (status = 200, description = "The models", body = ModelList),
        MasterKeyErrors,
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<ModelList>, GatewayError> {
    let models = client(&state)?
        .list_models(metadata::request(&headers, ListModelsRequest {}))
        .await?
        .models;
    Ok(Json(ModelList {
        data: models.into_iter().map(model).collect(),
        object: ListTag::List,
    }))
}

#[utoipa::path(
    get,
    path = "/models",
    operation_id = "list_models_unversioned",
    tag = "Model gateway",
    summary = LIST_MODELS,
    security(("MasterKey" = [])),
    responses(
        (status = 200, description = "The models", body = ModelList),
        MasterKeyErrors,
    ),
)]
pub async fn list_unversioned(
    state: State<AppState>,
    headers: HeaderMap,
) -> Result<Json<ModelList>, GatewayError> {
    list(state, headers).await
}

#[utoipa::path(
    get,
    path = "/v1/models/{*id}",
    operation_id = "get_model",
    tag = "Model gateway",
    summary = "One model of the list",
    security(("MasterKey" = [])),
    params(("id" = String, Path)),
    responses(
        (status = 200, description = "The model", body = Model),
        (status = 401, description = "Missing or wrong master key", body = OpenAIError),
        (status = 404, description = "Not in the list", body = OpenAIError),
    ),
)]
pub async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Model>, GatewayError> {
    let found = client(&state)?
        .get_model(metadata::request(&headers, GetModelRequest { id }))
        .await?
        .model
        .unwrap_or_default();
    Ok(Json(model(found)))
}

#[utoipa::path(
    post,
    path = "/model/new",
    operation_id = "add_model",
    tag = "Model gateway",
    summary = "Adds a model entry, effective at once on every replica, until the gateway's configuration changes",
    security(("MasterKey" = [])),
    request_body(content = NewModel),
    responses(
        (status = 200, description = "The stored entry, without its key", body = AddedModel),
        (status = 400, description = "A malformed body, a model without a routing prefix, or an api_base that is not an http(s) URL", body = OpenAIError),
        (status = 401, description = "Missing or wrong master key", body = OpenAIError),
        (status = 403, description = "A virtual key, or an api_base that added models may not reach (loopback, private, link-local, a cloud metadata service) unless the operator allows its host", body = OpenAIError),
        (status = 409, description = "A name the configuration file routes, by its own entry or (without `replace_configured`) its wildcard; or a new name past `--gateway-max-added-models`", body = OpenAIError),
        (status = 413, description = "Body larger than the configured limit", body = OpenAIError),
        (status = 503, description = "The store is unavailable; retry later", body = OpenAIError),
    ),
)]
pub async fn add(
    State(state): State<AppState>,
    headers: HeaderMap,
    client_address: ClientAddress,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<AddedModel>, GatewayError> {
    let client = client(&state)?;
    let payload = body(payload)?;
    let new: NewModel = match sandgate_proto::json::from_slice(&payload) {
        Ok(new) => new,
        Err(err) => {
            let error = GatewayError::new(
                ErrorCode::BadRequest,
                format!(
                    "expected {{model_name, gateway_params: {{model, api_base, api_key}}}}: {err}"
                ),
            );
            let probe = metadata::request(&headers, AddModelRequest::default());
            return Err(after_caller(error, client.add_model(probe)).await);
        }
    };
    let model_info = new.gateway_params.priced(new.model_info);
    let added = client
        .add_model(metadata::request_for(
            &headers,
            client_address,
            AddModelRequest {
                model_name: new.model_name,
                gateway_params: Some(GatewayParams {
                    model: new.gateway_params.model,
                    api_base: new.gateway_params.api_base,
                    api_key: new.gateway_params.api_key,
                }),
                replace_configured: new.replace_configured,
                model_info_json: model_info
                    .map(|info| Bytes::from(info.to_string()))
                    .unwrap_or_default(),
            },
        ))
        .await?;
    let params = added.gateway_params.unwrap_or_default();
    Ok(Json(AddedModel {
        model_name: added.model_name,
        gateway_params: AddedParams {
            model: params.model,
            api_base: params.api_base,
        },
        added_at_ms: added.added_at_ms,
    }))
}

#[utoipa::path(
    get,
    path = "/spend/logs",
    operation_id = "spend_logs",
    tag = "Model gateway",
    summary = "The spend log, newest first: metadata only, never prompt or response content",
    security(("MasterKey" = [])),
    params(SpendLogsQuery),
    responses(
        (status = 200, description = "Entries", body = Vec<SpendLogEntry>),
        (status = 400, description = "`limit` is not a number, or a date is not one", body = OpenAIError),
        (status = 401, description = "Missing or wrong master key", body = OpenAIError),
        (status = 403, description = "A virtual key: the spend log across keys is the master key's (a key's own spend is at /key/info)", body = OpenAIError),
    ),
)]
pub async fn spend_logs(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<SpendLogsQuery>, QueryRejection>,
) -> Result<Json<Vec<SpendLogEntry>>, GatewayError> {
    // An empty date would read as none: refused, as a date that is not one.
    let empty = |query: &SpendLogsQuery| {
        [
            ("start_date", &query.start_date),
            ("end_date", &query.end_date),
        ]
        .into_iter()
        .find(|(_, value)| value.as_deref() == Some(""))
        .map(|(name, _)| format!("`{name}` is empty: a day (`2026-03-01`) or an RFC 3339 time"))
    };
    let query = match query {
        Ok(Query(query)) => empty(&query).map_or(Ok(query), Err),
        Err(rejection) => Err(rejection.body_text()),
    };
    let query = match query {
        Ok(query) => query,
        Err(refusal) => {
            // The caller is judged before its query: without a valid master key, a bad
            // `limit` is 401/403 like any other call, not 400.
            client(&state)?
                .list_spend_logs(metadata::request(
                    &headers,
                    ListSpendLogsRequest {
                        limit: 1,
                        ..ListSpendLogsRequest::default()
                    },
                ))
                .await?;
            return Err(GatewayError::new(ErrorCode::BadRequest, refusal));
        }
    };
    let request = ListSpendLogsRequest {
        limit: query.limit.unwrap_or(0),
        api_key: query.api_key.unwrap_or_default(),
        user_id: query.user_id.unwrap_or_default(),
        team_id: query.team_id.unwrap_or_default(),
        session_id: query.session_id.unwrap_or_default(),
        start_date: query.start_date.unwrap_or_default(),
        end_date: query.end_date.unwrap_or_default(),
    };
    let entries = client(&state)?
        .list_spend_logs(metadata::request(&headers, request))
        .await?
        .entries;
    Ok(Json(
        entries
            .into_iter()
            .map(|entry| {
                let metadata = (!entry.metadata_json.is_empty())
                    .then(|| serde_json::from_slice::<Value>(&entry.metadata_json).ok())
                    .flatten();
                SpendLogEntry {
                    request_id: entry.request_id,
                    started_at_ms: entry.started_at_ms,
                    model: entry.model,
                    upstream_model: entry.upstream_model,
                    prompt_tokens: entry.prompt_tokens,
                    completion_tokens: entry.completion_tokens,
                    total_tokens: entry.total_tokens,
                    latency_ms: entry.latency_ms,
                    status: entry.status,
                    user: entry.user,
                    session_id: entry.session_id,
                    call_type: (!entry.call_type.is_empty()).then_some(entry.call_type),
                    metadata,
                    spend: entry.spend,
                    api_key: (!entry.api_key_hash.is_empty()).then_some(entry.api_key_hash),
                    key_alias: (!entry.key_alias.is_empty()).then_some(entry.key_alias),
                    key_user_id: (!entry.key_user_id.is_empty()).then_some(entry.key_user_id),
                    team_id: (!entry.team_id.is_empty()).then_some(entry.team_id),
                }
            })
            .collect(),
    ))
}
