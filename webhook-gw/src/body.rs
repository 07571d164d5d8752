//! Request bodies: the size limit, and JSON bodies the edge translates into messages.

use axum::extract::rejection::BytesRejection;
use bytes::Bytes;
use http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;

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
    sandgate_proto::error::decode_json(body).map_err(ApiError::Service)
}
