//! Bodies: the request size limit, JSON bodies the edge translates into messages, and
//! answers that hold something until they are sent.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::rejection::BytesRejection;
use bytes::Bytes;
use http::{HeaderMap, StatusCode, header};
use http_body::{Frame, SizeHint};
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

/// `body`, holding `held` until it is done with (sent whole, or dropped when the client
/// went away): `held` is dropped after what the body holds. Its length and end are the
/// body's, so that an answer of known length keeps its `content-length`.
pub fn holding<T: Send + Unpin + 'static>(body: Body, held: T) -> Body {
    Body::new(Holding { body, _held: held })
}

struct Holding<T> {
    body: Body,
    /// Dropped after `body`.
    _held: T,
}

impl<T: Unpin> http_body::Body for Holding<T> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
