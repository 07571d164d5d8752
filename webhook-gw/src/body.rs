//! Request bodies: the size limit, and JSON bodies the edge translates into messages.

use axum::extract::rejection::BytesRejection;
use bytes::Bytes;
use http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::error::ApiError;

/// The buffered body, or 413 (with a JSON body) past the configured limit.
pub fn buffered(body: Result<Bytes, BytesRejection>, limit: usize) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| match rejection {
        BytesRejection::FailedToBufferBody(_)
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE =>
        {
            ApiError::Edge(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("Request body is larger than the limit of {limit} bytes"),
            )
        }
        other => ApiError::Edge(StatusCode::BAD_REQUEST, other.body_text()),
    })
}

/// Whether the body is declared as JSON: `application/json` or `application/<x>+json`,
/// with any parameters, as the reference receiver decides.
pub fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<mime::Mime>().ok())
        .is_some_and(|mime| {
            mime.type_() == mime::APPLICATION
                && (mime.subtype() == mime::JSON || mime.suffix() == Some(mime::JSON))
        })
}

/// Decodes a JSON body into `T`, answering a FastAPI-shaped 422 at the offending field.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let deserializer = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(deserializer).map_err(|err| {
        let mut loc = vec![Value::from("body")];
        loc.extend(err.path().iter().filter_map(|segment| match segment {
            serde_path_to_error::Segment::Map { key } => Some(Value::from(key.as_str())),
            serde_path_to_error::Segment::Seq { index } => Some(Value::from(*index)),
            serde_path_to_error::Segment::Enum { variant } => Some(Value::from(variant.as_str())),
            serde_path_to_error::Segment::Unknown => None,
        }));
        let inner = err.into_inner();
        let message = inner.to_string();
        let error_type = if inner.is_syntax() || inner.is_eof() {
            "json_invalid"
        } else if let Some(field) = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split('`').next())
        {
            loc.push(Value::from(field));
            "missing"
        } else if message.contains("expected a string") {
            "string_type"
        } else if message.contains("expected a boolean") {
            "bool_type"
        } else if message.contains("expected a map") || message.contains("expected struct") {
            "dict_type"
        } else {
            "value_error"
        };
        ApiError::Unprocessable(vec![
            json!({ "type": error_type, "loc": loc, "msg": message, "input": null }),
        ])
    })
}
