//! The built-in model gateway (spec 4.2) → the ModelGateway service. Errors use OpenAI's
//! shape, `{"error":{"message","type","param","code"}}`, as OpenAI clients expect, and
//! Anthropic's, `{"type":"error","error":{"type","message"}}`, on the Messages API's
//! routes; an answer's body is streamed through as the service yields it, with the
//! headers it carries.

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sandgate_proto::models::v1::{
    AddModelRequest, Api, CallRequest, GatewayParams, GetModelInfoRequest, GetModelRequest,
    ListModelsRequest, ListSpendLogsRequest, Model, ModelInfo,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::after_caller;
use crate::metadata;
use crate::model_gw::ModelGw;
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
        let kind = match self.0.reason.as_str() {
            "" => sandgate_proto::models::anthropic_error_type(status.as_u16()),
            reason => reason,
        };
        let body = json!({ "type": "error", "error": {
            "type": kind,
            "message": self.0.detail,
        }});
        (status, Json(body)).into_response()
    }

    /// The error in the shape the clients of `api` expect.
    fn for_api(self, api: Api) -> Response {
        if is_anthropic(api) {
            self.anthropic()
        } else {
            self.into_response()
        }
    }
}

fn is_anthropic(api: Api) -> bool {
    matches!(api, Api::Messages | Api::MessagesCountTokens)
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        let code = self.0.code();
        let status = code.http_status();
        let reason = self.0.reason.as_str();
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
        (
            status,
            [(http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response()
    }
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

fn model_json(model: Model) -> Value {
    json!({ "id": model.id, "object": "model", "created": model.created, "owned_by": model.owned_by })
}

pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, GatewayError> {
    let models = client(&state)?
        .list_models(metadata::request(&headers, ListModelsRequest {}))
        .await?
        .models;
    Ok(Json(json!({
        "data": models.into_iter().map(model_json).collect::<Vec<_>>(),
        "object": "list",
    })))
}

pub async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, GatewayError> {
    let model = client(&state)?
        .get_model(metadata::request(&headers, GetModelRequest { id }))
        .await?
        .model
        .unwrap_or_default();
    Ok(Json(model_json(model)))
}

#[derive(Deserialize)]
struct NewModel {
    model_name: String,
    #[serde(deserialize_with = "sandgate_proto::json::object")]
    gateway_params: NewParams,
    /// LiteLLM's `model_info`: the entry's prices, above all.
    #[serde(default)]
    model_info: Option<Value>,
    /// Takes over a name the configuration's wildcard routes.
    #[serde(default)]
    replace_configured: bool,
}

#[derive(Deserialize)]
struct NewParams {
    model: String,
    api_base: String,
    #[serde(default)]
    api_key: String,
}

pub async fn add(
    State(state): State<AppState>,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, GatewayError> {
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
    let added = client
        .add_model(metadata::request(
            &headers,
            AddModelRequest {
                model_name: new.model_name,
                gateway_params: Some(GatewayParams {
                    model: new.gateway_params.model,
                    api_base: new.gateway_params.api_base,
                    api_key: new.gateway_params.api_key,
                }),
                replace_configured: new.replace_configured,
                model_info_json: new
                    .model_info
                    .filter(|info| !info.is_null())
                    .map(|info| Bytes::from(info.to_string()))
                    .unwrap_or_default(),
            },
        ))
        .await?;
    let params = added.gateway_params.unwrap_or_default();
    Ok(Json(json!({
        "model_name": added.model_name,
        "gateway_params": { "model": params.model, "api_base": params.api_base },
        "added_at_ms": added.added_at_ms,
    })))
}

/// A call of the LLM API `API` (an [`Api`] value): `/v1/chat/completions`,
/// `/v1/responses`, `/v1/messages`, …
pub async fn call<const API: i32>(
    State(state): State<AppState>,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Response {
    let api = Api::try_from(API).unwrap_or_default();
    match forward(api, &state, &headers, payload).await {
        Ok(response) => response,
        Err(error) => error.for_api(api),
    }
}

async fn forward(
    api: Api,
    state: &AppState,
    headers: &HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Response, GatewayError> {
    let client = client(state)?;
    let payload = body(payload)?;
    let mut stream = client
        .call(metadata::request(
            headers,
            CallRequest {
                api: api.into(),
                body: payload,
            },
        ))
        .await?;
    let first = match stream.next().await {
        Some(first) => first?,
        None => {
            return Err(GatewayError::new(
                ErrorCode::BadGateway,
                "the model gateway answered nothing",
            ));
        }
    };
    let status = u16::try_from(first.status)
        .ok()
        .and_then(|status| StatusCode::from_u16(status).ok())
        .unwrap_or(StatusCode::BAD_GATEWAY);
    let streamed = sandgate_proto::models::is_event_stream(&first.content_type);
    let content_type = HeaderValue::try_from(first.content_type)
        .unwrap_or_else(|_| HeaderValue::from_static("application/json"));
    let body = if streamed {
        // Server-sent events leave as they arrive. A stream that fails once begun (the
        // upstream reset, or the gateway went away) ends with an error event, as the
        // providers' do, rather than a broken connection.
        let head = futures::stream::iter([Ok::<_, tonic::Status>(first.chunk)]);
        let chunks = head.chain(stream.map(|message| message.map(|message| message.chunk)));
        Body::from_stream(chunks.scan(false, move |ended, chunk| {
            let next = match chunk {
                _ if *ended => None,
                Ok(chunk) => Some(Ok::<_, std::convert::Infallible>(chunk)),
                Err(status) => {
                    *ended = true;
                    Some(Ok(error_event(api, &status)))
                }
            };
            std::future::ready(next)
        }))
    } else {
        // A whole answer (most often one message) leaves as one body with its length:
        // one write instead of a chunked body and its terminator; a failure before its
        // end is still an error answer (nothing has been sent).
        let mut whole = first.chunk;
        while let Some(message) = stream.next().await {
            let chunk = message?.chunk;
            if whole.is_empty() {
                whole = chunk;
            } else {
                let mut joined = BytesMut::from(whole);
                joined.extend_from_slice(&chunk);
                whole = joined.freeze();
            }
        }
        Body::from(whole)
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let answer_headers = response.headers_mut();
    answer_headers.insert(header::CONTENT_TYPE, content_type);
    for passed in first.headers {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::try_from(passed.name),
            HeaderValue::try_from(passed.value),
        ) {
            answer_headers.append(name, value);
        }
    }
    Ok(response)
}

/// The last event of a stream that failed after it began, in the API's shape, with the
/// gateway's status (502, or 504 for an upstream that went silent) as its code.
fn error_event(api: Api, status: &tonic::Status) -> Bytes {
    let detail = ErrorDetail::from_status(status);
    let (code, message) = match detail.code() {
        code @ (ErrorCode::BadGateway | ErrorCode::GatewayTimeout) => (code, detail.detail),
        // Not the upstream's failure reported by the gateway, but the gateway's own
        // stream broken (it stopped, or the connection to it failed): its message is a
        // transport's, not for the client.
        _ => {
            tracing::warn!(code = ?status.code(), message = status.message(), "the model gateway's stream failed");
            (
                ErrorCode::BadGateway,
                "the model gateway's stream was interrupted".to_owned(),
            )
        }
    };
    if is_anthropic(api) {
        let event =
            json!({ "type": "error", "error": { "type": "api_error", "message": message } });
        return Bytes::from(format!("event: error\ndata: {event}\n\n"));
    }
    let event = json!({ "error": {
        "message": message,
        "type": "upstream_error",
        "param": Value::Null,
        "code": code.http_status().as_u16().to_string(),
    }});
    Bytes::from(format!("data: {event}\n\n"))
}

#[derive(Deserialize)]
pub struct ModelInfoQuery {
    /// One model name; without it, every entry.
    litellm_model_id: Option<String>,
    model: Option<String>,
}

async fn model_infos(
    state: &AppState,
    headers: &HeaderMap,
    model_name: String,
) -> Result<Vec<ModelInfo>, GatewayError> {
    Ok(client(state)?
        .get_model_info(metadata::request(
            headers,
            GetModelInfoRequest { model_name },
        ))
        .await?
        .models)
}

fn info_object(info: &ModelInfo) -> serde_json::Map<String, Value> {
    serde_json::from_slice(&info.model_info_json).unwrap_or_default()
}

/// `/v1/model/info`, `/model/info`: every entry (or the one `model` names) as LiteLLM's
/// proxy lists it, its key left out.
pub async fn model_info(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<ModelInfoQuery>, QueryRejection>,
) -> Result<Json<Value>, GatewayError> {
    let Query(query) = query
        .map_err(|rejection| GatewayError::new(ErrorCode::BadRequest, rejection.body_text()))?;
    let wanted = query.model.or(query.litellm_model_id).unwrap_or_default();
    let infos = model_infos(&state, &headers, wanted).await?;
    let data: Vec<Value> = infos
        .iter()
        .map(|info| {
            json!({
                "model_name": info.model_name,
                "litellm_params": { "model": info.model, "api_base": info.api_base },
                "model_info": info_object(info),
            })
        })
        .collect();
    Ok(Json(json!({ "data": data })))
}

/// `/model_group/info`: one group per model name, its `model_info` keys at the top, as
/// LiteLLM's proxy answers.
pub async fn model_group_info(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, GatewayError> {
    let infos = model_infos(&state, &headers, String::new()).await?;
    let mut groups: Vec<serde_json::Map<String, Value>> = Vec::new();
    for info in &infos {
        let provider = if info.model.starts_with("gateway_proxy/") {
            "litellm_proxy"
        } else {
            "openai"
        };
        match groups
            .iter_mut()
            .find(|group| group["model_group"] == info.model_name.as_str())
        {
            Some(group) => {
                if let Some(Value::Array(providers)) = group.get_mut("providers")
                    && !providers.iter().any(|known| known == provider)
                {
                    providers.push(provider.into());
                }
            }
            None => {
                let mut group = info_object(info);
                group.insert("model_group".into(), info.model_name.clone().into());
                group.insert("providers".into(), json!([provider]));
                groups.push(group);
            }
        }
    }
    Ok(Json(json!({
        "data": groups.into_iter().map(Value::Object).collect::<Vec<_>>(),
    })))
}

#[derive(Deserialize)]
pub struct SpendLogsQuery {
    /// At most this many entries (default 100).
    limit: Option<u32>,
}

pub async fn spend_logs(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<SpendLogsQuery>, QueryRejection>,
) -> Result<Json<Value>, GatewayError> {
    let Query(query) = query
        .map_err(|rejection| GatewayError::new(ErrorCode::BadRequest, rejection.body_text()))?;
    let limit = query.limit.unwrap_or(0);
    let entries = client(&state)?
        .list_spend_logs(metadata::request(&headers, ListSpendLogsRequest { limit }))
        .await?
        .entries;
    Ok(Json(Value::Array(
        entries
            .into_iter()
            .map(|entry| {
                let metadata = (!entry.metadata_json.is_empty())
                    .then(|| serde_json::from_slice::<Value>(&entry.metadata_json).ok())
                    .flatten();
                json!({
                    "request_id": entry.request_id,
                    "started_at_ms": entry.started_at_ms,
                    "model": entry.model,
                    "upstream_model": entry.upstream_model,
                    "prompt_tokens": entry.prompt_tokens,
                    "completion_tokens": entry.completion_tokens,
                    "total_tokens": entry.total_tokens,
                    "latency_ms": entry.latency_ms,
                    "status": entry.status,
                    "user": entry.user,
                    "session_id": entry.session_id,
                    "call_type": (!entry.call_type.is_empty()).then_some(entry.call_type),
                    "metadata": metadata,
                    "spend": entry.spend,
                    "api_key": (!entry.api_key_hash.is_empty()).then_some(entry.api_key_hash),
                    "key_alias": (!entry.key_alias.is_empty()).then_some(entry.key_alias),
                })
            })
            .collect(),
    )))
}
