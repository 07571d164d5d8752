//! The built-in model gateway (spec 4.2) → the ModelGateway service. Errors use OpenAI's
//! shape, `{"error":{"message","type","param","code"}}`, as OpenAI clients expect; a
//! completion's body is streamed through as the service yields it.

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
    AddModelRequest, ChatCompletionRequest, GatewayParams, GetModelRequest, ListModelsRequest,
    ListSpendLogsRequest, Model,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::model_gw::ModelGw;
use crate::{AppState, metadata};

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
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self(ErrorDetail::new(code, message))
    }
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        let code = self.0.code();
        let status = code.http_status();
        let error_type = match code {
            ErrorCode::Unauthenticated => "authentication_error",
            ErrorCode::Forbidden => "permission_error",
            ErrorCode::NotFound => "not_found_error",
            ErrorCode::BadRequest | ErrorCode::ValidationFailed | ErrorCode::PayloadTooLarge => {
                "invalid_request_error"
            }
            ErrorCode::RateLimited => "rate_limit_error",
            _ => "api_error",
        };
        let body = json!({ "error": {
            "message": self.0.detail,
            "type": error_type,
            "param": if code == ErrorCode::NotFound { Value::from("model") } else { Value::Null },
            "code": status.as_u16().to_string(),
        }});
        (status, Json(body)).into_response()
    }
}

fn client(state: &AppState) -> Result<&ModelGw, GatewayError> {
    state.models.as_ref().ok_or_else(|| {
        GatewayError::new(
            ErrorCode::Unavailable,
            "the model gateway is not configured on this edge",
        )
    })
}

fn body(payload: Result<Bytes, BytesRejection>) -> Result<Bytes, GatewayError> {
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
            // Authentication is decided before the body: the service judges the caller on
            // an empty request, and only a caller it accepts learns what is wrong.
            let refused = client
                .add_model(metadata::request(&headers, AddModelRequest::default()))
                .await
                .err()
                .map(GatewayError::from)
                .filter(|refused| refused.0.code() == ErrorCode::Unauthenticated);
            return Err(refused.unwrap_or_else(|| {
                GatewayError::new(
                    ErrorCode::BadRequest,
                    format!(
                        "expected {{model_name, gateway_params: {{model, api_base, api_key}}}}: {err}"
                    ),
                )
            }));
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

pub async fn chat_completion(
    State(state): State<AppState>,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Response, GatewayError> {
    let client = client(&state)?;
    let payload = body(payload)?;
    let mut stream = client
        .chat_completion(metadata::request(
            &headers,
            ChatCompletionRequest { body: payload },
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
        // upstream reset, or the gateway went away) ends with an error event, as OpenAI's
        // do, rather than a broken connection.
        let head = futures::stream::iter([Ok::<_, tonic::Status>(first.chunk)]);
        let chunks = head.chain(stream.map(|message| message.map(|message| message.chunk)));
        Body::from_stream(chunks.scan(false, |ended, chunk| {
            let next = match chunk {
                _ if *ended => None,
                Ok(chunk) => Some(Ok::<_, std::convert::Infallible>(chunk)),
                Err(status) => {
                    *ended = true;
                    Some(Ok(error_event(&status)))
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
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, content_type);
    Ok(response)
}

/// The last event of a stream that failed after it began: an OpenAI error object, with
/// the gateway's status (502, or 504 for an upstream that went silent) as its code.
fn error_event(status: &tonic::Status) -> Bytes {
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
    let event = json!({ "error": {
        "message": message,
        "type": "upstream_error",
        "param": Value::Null,
        "code": code.http_status().as_u16().to_string(),
    }});
    Bytes::from(format!("data: {event}\n\n"))
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
                    "metadata": metadata,
                })
            })
            .collect(),
    )))
}
