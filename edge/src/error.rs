//! gRPC failures mapped back to the REST contracts: `{"detail": [...]}` for validation
//! errors (FastAPI's shape, `loc` starting at `"body"`), `{"detail": "..."}` otherwise.

use axum::Json;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use sandgate_proto::error::{ErrorCode, ErrorDetail, ValidationError, loc_item};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// `{"detail": "..."}`: what went wrong, in words.
#[derive(Serialize, ToSchema)]
#[schema(as = ErrorDetail)]
pub(crate) struct DetailBody {
    pub(crate) detail: String,
}

/// FastAPI's 422 body: each thing wrong with the request.
#[derive(Serialize, ToSchema)]
#[schema(as = HTTPValidationError)]
pub(crate) struct ValidationBody {
    detail: Vec<ValidationItem>,
}

/// One thing wrong with a request, as pydantic reports it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = ValidationError)]
pub struct ValidationItem {
    /// The error's kind (`missing`, `int_parsing`, …).
    #[serde(rename = "type")]
    kind: String,
    /// Where: the request's part (`body`, `query`, `path`), then keys and indexes.
    loc: Vec<LocItem>,
    msg: String,
    /// The value refused.
    input: Value,
    /// The rule's parameters (`{"limit_value": 3}`), when it has any.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    ctx: Option<Value>,
}

/// A step of a validation error's location: a key or an index.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum LocItem {
    Key(String),
    Index(u64),
}

/// An error answered to a REST caller.
#[derive(Debug)]
pub enum ApiError {
    /// What a service answered.
    Service(ErrorDetail),
    /// A 422 raised by the edge while translating the request, as FastAPI items.
    Unprocessable(Vec<ValidationItem>),
    /// Any other failure of the edge itself.
    Edge(StatusCode, String),
}

impl ApiError {
    /// A 422 at `loc` (the full path, e.g. `["query", "tag"]`).
    pub fn invalid(error_type: &str, loc: [&str; 2], msg: impl Into<String>, input: Value) -> Self {
        Self::Unprocessable(vec![ValidationItem {
            kind: error_type.to_owned(),
            loc: loc.map(|key| LocItem::Key(key.to_owned())).into(),
            msg: msg.into(),
            input,
            ctx: None,
        }])
    }
}

/// What is wrong with a request's body or query, answered only to a caller the service
/// accepts: `probe` asks the service the same call with an empty request (which it
/// refuses without acting), and its authentication or permission refusal is the answer
/// instead. The service decides who may call, never the edge, and a caller it refuses
/// learns nothing of what it sent.
pub async fn after_caller<E, T>(
    error: E,
    probe: impl Future<Output = Result<T, tonic::Status>>,
) -> E
where
    E: From<tonic::Status>,
{
    match probe.await {
        Err(status)
            if matches!(
                status.code(),
                tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
            ) =>
        {
            status.into()
        }
        _ => error,
    }
}

impl From<tonic::Status> for ApiError {
    fn from(status: tonic::Status) -> Self {
        let detail = ErrorDetail::from_status(&status);
        if detail.code() == ErrorCode::Internal {
            tracing::error!(code = ?status.code(), message = status.message(), "gRPC call failed");
        }
        Self::Service(detail)
    }
}

fn json_or(bytes: &[u8]) -> Option<Value> {
    (!bytes.is_empty()).then(|| serde_json::from_slice(bytes).unwrap_or(Value::Null))
}

/// Where a service's error `loc` is rooted: in the body unless it starts at the request's
/// path or query.
const REQUEST_PARTS: &[&str] = &["path", "query"];

/// A service's validation error as FastAPI renders it: `loc[0]` says which part of the
/// request (`body` unless the service rooted it at `path` or `query`).
fn fastapi_item(error: &ValidationError) -> ValidationItem {
    let rooted = matches!(
        error.loc.first().and_then(|item| item.item.as_ref()),
        Some(loc_item::Item::Key(part)) if REQUEST_PARTS.contains(&part.as_str())
    );
    let mut loc = if rooted {
        vec![]
    } else {
        vec![LocItem::Key("body".into())]
    };
    loc.extend(error.loc.iter().filter_map(|item| match &item.item {
        Some(loc_item::Item::Key(key)) => Some(LocItem::Key(key.clone())),
        Some(loc_item::Item::Index(index)) => Some(LocItem::Index(*index)),
        None => None,
    }));
    ValidationItem {
        kind: error.r#type.clone(),
        loc,
        msg: error.msg.clone(),
        input: json_or(&error.input_json).unwrap_or(Value::Null),
        ctx: json_or(&error.ctx_json),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry_after = match &self {
            Self::Service(detail) if detail.retry_after_seconds > 0 => {
                Some(detail.retry_after_seconds)
            }
            _ => None,
        };
        let unprocessable = |detail| {
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                Json(ValidationBody { detail }),
            )
                .into_response()
        };
        let mut response = match self {
            Self::Service(detail) if detail.code() == ErrorCode::ValidationFailed => {
                unprocessable(detail.validation_errors.iter().map(fastapi_item).collect())
            }
            Self::Service(detail) => (
                detail.code().http_status(),
                Json(DetailBody {
                    detail: detail.detail,
                }),
            )
                .into_response(),
            Self::Unprocessable(items) => unprocessable(items),
            Self::Edge(status, detail) => (status, Json(DetailBody { detail })).into_response(),
        };
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, http::HeaderValue::from(seconds));
        }
        response
    }
}
