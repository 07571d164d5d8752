//! One error-code table with two projections, `tonic::Code` and HTTP status, and the
//! codec that carries an [`ErrorDetail`] in a gRPC status's details.

use http::StatusCode;
use prost::Message;
use serde::de::DeserializeOwned;

pub use crate::errors::v1::{ErrorCode, ErrorDetail, LocItem, ValidationError, loc_item};

impl ErrorCode {
    /// The gRPC status code this error travels with.
    pub fn grpc_code(self) -> tonic::Code {
        match self {
            Self::ValidationFailed | Self::BadRequest => tonic::Code::InvalidArgument,
            Self::Unauthenticated => tonic::Code::Unauthenticated,
            Self::Forbidden => tonic::Code::PermissionDenied,
            Self::NotFound => tonic::Code::NotFound,
            Self::Conflict => tonic::Code::FailedPrecondition,
            Self::PayloadTooLarge | Self::RateLimited => tonic::Code::ResourceExhausted,
            Self::Unavailable | Self::BadGateway => tonic::Code::Unavailable,
            Self::GatewayTimeout => tonic::Code::DeadlineExceeded,
            Self::Internal | Self::Unspecified => tonic::Code::Internal,
        }
    }

    /// The HTTP status the edge answers with.
    pub fn http_status(self) -> StatusCode {
        match self {
            Self::ValidationFailed => StatusCode::UNPROCESSABLE_ENTITY,
            Self::BadRequest => StatusCode::BAD_REQUEST,
            Self::Unauthenticated => StatusCode::UNAUTHORIZED,
            Self::Forbidden => StatusCode::FORBIDDEN,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::Conflict => StatusCode::CONFLICT,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::BadGateway => StatusCode::BAD_GATEWAY,
            Self::GatewayTimeout => StatusCode::GATEWAY_TIMEOUT,
            Self::Internal | Self::Unspecified => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The code a status from a peer that attached no [`ErrorDetail`] stands for.
    pub fn from_grpc(code: tonic::Code) -> Self {
        match code {
            tonic::Code::InvalidArgument | tonic::Code::OutOfRange => Self::BadRequest,
            tonic::Code::Unauthenticated => Self::Unauthenticated,
            tonic::Code::PermissionDenied => Self::Forbidden,
            tonic::Code::NotFound => Self::NotFound,
            tonic::Code::AlreadyExists | tonic::Code::FailedPrecondition | tonic::Code::Aborted => {
                Self::Conflict
            }
            tonic::Code::ResourceExhausted => Self::RateLimited,
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded => Self::Unavailable,
            _ => Self::Internal,
        }
    }
}

impl ErrorDetail {
    /// An error with a message and no field errors.
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            detail: detail.into(),
            ..Self::default()
        }
    }

    /// A validation failure listing every wrong field.
    pub fn validation(errors: Vec<ValidationError>) -> Self {
        Self {
            code: ErrorCode::ValidationFailed.into(),
            detail: "validation failed".to_owned(),
            validation_errors: errors,
            ..Self::default()
        }
    }

    /// Too many requests: the caller may try again in `retry_after_seconds`.
    pub fn rate_limited(detail: impl Into<String>, retry_after_seconds: u32) -> Self {
        Self {
            code: ErrorCode::RateLimited.into(),
            detail: detail.into(),
            retry_after_seconds,
            ..Self::default()
        }
    }

    /// `self`, with the machine-readable reason an API names (the `type` of an
    /// OpenAI-shaped error, as LiteLLM's proxy reports it).
    pub fn with_reason(mut self, reason: &str) -> Self {
        reason.clone_into(&mut self.reason);
        self
    }

    /// The status a service returns: the code's gRPC projection, the detail as message,
    /// and this whole message encoded in the details.
    pub fn into_status(self) -> tonic::Status {
        let code = self.code().grpc_code();
        let message = self.detail.clone();
        tonic::Status::with_details(code, message, self.encode_to_vec().into())
    }

    /// Reads the detail a Sandgate service attached to a status, or derives one from the
    /// bare status of any other peer (a proxy, a transport failure).
    pub fn from_status(status: &tonic::Status) -> Self {
        match Self::decode(status.details()) {
            Ok(detail) if detail.code() != ErrorCode::Unspecified => detail,
            _ => Self::new(ErrorCode::from_grpc(status.code()), status.message()),
        }
    }
}

/// Decodes a JSON request body into `T`, or answers the validation failure at the
/// offending field (`loc` relative to the body; FastAPI's error `type`).
///
/// Read strictly (see [`crate::json`]): a struct only from an object, at the top as in
/// nested fields marked with `json::object`, and nothing after the value.
pub fn decode_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ErrorDetail> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(crate::json::ObjectOnly(&mut deserializer))
        .map_err(|err| {
            let loc: Vec<LocItem> = err
                .path()
                .iter()
                .filter_map(|segment| match segment {
                    serde_path_to_error::Segment::Map { key } => {
                        Some(loc_item::Item::Key(key.clone()))
                    }
                    serde_path_to_error::Segment::Seq { index } => {
                        Some(loc_item::Item::Index(*index as u64))
                    }
                    serde_path_to_error::Segment::Enum { variant } => {
                        Some(loc_item::Item::Key(variant.clone()))
                    }
                    serde_path_to_error::Segment::Unknown => None,
                })
                .map(|item| LocItem { item: Some(item) })
                .collect();
            let input = input_at(body, &loc);
            let mut detail = validation_failure(loc, err.into_inner());
            if let Some(first) = detail.validation_errors.first_mut() {
                first.input_json = input.into();
            }
            detail
        })?;
    // Python's `json.loads` refuses what follows the value ("Extra data"): so do we.
    deserializer
        .end()
        .map_err(|err| validation_failure(Vec::new(), err))?;
    Ok(value)
}

/// What FastAPI echoes as a validation error's `input`: the body's value at `loc` (for a
/// missing field, `loc` is the object it is missing from), as JSON; empty (`null`) when
/// the body does not parse. Only on the error path: the body is parsed again here.
fn input_at(body: &[u8], loc: &[LocItem]) -> Vec<u8> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Vec::new();
    };
    let mut current = &value;
    for item in loc {
        let next = match &item.item {
            Some(loc_item::Item::Key(key)) => current.get(key),
            Some(loc_item::Item::Index(index)) => current.get(*index as usize),
            None => None,
        };
        match next {
            Some(next) => current = next,
            None => return Vec::new(),
        }
    }
    serde_json::to_vec(current).unwrap_or_default()
}

/// A decoding failure at `loc` as a pydantic validation error.
fn validation_failure(mut loc: Vec<LocItem>, inner: serde_json::Error) -> ErrorDetail {
    let mut message = inner.to_string();
    let quoted = |prefix: &str| {
        message
            .strip_prefix(prefix)
            .and_then(|rest| rest.split('`').next())
            .map(str::to_owned)
    };
    let error_type = if inner.is_syntax() || inner.is_eof() {
        "json_invalid"
    } else if let Some(field) = quoted("missing field `") {
        loc.push(LocItem {
            item: Some(loc_item::Item::Key(field)),
        });
        message = "Field required".to_owned();
        "missing"
    } else if quoted("unknown field `").is_some() {
        // The path already ends at the unknown key.
        message = "Extra inputs are not permitted".to_owned();
        "extra_forbidden"
    } else if message.contains("expected a string") {
        "string_type"
    } else if message.contains("expected a boolean") {
        "bool_type"
    } else if message.contains("expected i64") || message.contains("expected u32") {
        "int_type"
    } else if message.contains("expected a sequence") {
        "list_type"
    } else if message.contains("expected struct") {
        // pydantic's words for a model given something other than an object.
        message = "Input should be a valid dictionary or object to extract fields from".to_owned();
        "model_attributes_type"
    } else if message.contains("expected a map") {
        "dict_type"
    } else {
        "value_error"
    };
    ErrorDetail::validation(vec![ValidationError {
        r#type: error_type.to_owned(),
        loc,
        msg: message,
        input_json: Default::default(),
        ctx_json: Default::default(),
    }])
}

impl From<ErrorDetail> for tonic::Status {
    fn from(detail: ErrorDetail) -> Self {
        detail.into_status()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decoding failure echoes the offending input, as FastAPI does: the value at the
    /// field, or the object a required field is missing from.
    #[test]
    fn decoding_failures_echo_their_input() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Body {
            count: i64,
            inner: Vec<Inner>,
        }
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Inner {
            name: String,
        }
        let first = |body: &str| {
            let detail = decode_json::<Body>(body.as_bytes()).expect_err(body);
            let error = detail.validation_errors[0].clone();
            let input: serde_json::Value = if error.input_json.is_empty() {
                serde_json::Value::Null
            } else {
                serde_json::from_slice(&error.input_json).expect("JSON")
            };
            (error.r#type, input)
        };
        assert_eq!(
            first(r#"{"count": "two", "inner": []}"#),
            ("int_type".to_owned(), serde_json::json!("two"))
        );
        assert_eq!(
            first(r#"{"count": 1, "inner": [{"name": 5}]}"#),
            ("string_type".to_owned(), serde_json::json!(5))
        );
        assert_eq!(
            first(r#"{"inner": []}"#),
            ("missing".to_owned(), serde_json::json!({"inner": []}))
        );
        assert_eq!(
            first(r#"{"count": 1, "inner": [{}]}"#),
            ("missing".to_owned(), serde_json::json!({}))
        );
        assert_eq!(first("{not json").1, serde_json::Value::Null);
    }

    #[test]
    fn detail_survives_a_status_round_trip() {
        let detail = ErrorDetail::validation(vec![ValidationError {
            r#type: "missing".into(),
            loc: vec![LocItem {
                item: Some(loc_item::Item::Key("id".into())),
            }],
            msg: "Field required".into(),
            input_json: b"{}".to_vec().into(),
            ctx_json: Default::default(),
        }]);
        let status = detail.clone().into_status();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(ErrorDetail::from_status(&status), detail);
    }

    #[test]
    fn a_bare_status_maps_by_its_code() {
        let status = tonic::Status::unavailable("connection refused");
        let detail = ErrorDetail::from_status(&status);
        assert_eq!(detail.code(), ErrorCode::Unavailable);
        assert_eq!(detail.code().http_status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(detail.detail, "connection refused");
    }

    #[test]
    fn every_code_projects_consistently() {
        for code in [
            ErrorCode::ValidationFailed,
            ErrorCode::Unauthenticated,
            ErrorCode::Forbidden,
            ErrorCode::NotFound,
            ErrorCode::Conflict,
            ErrorCode::Unavailable,
            ErrorCode::BadGateway,
            ErrorCode::GatewayTimeout,
        ] {
            assert_eq!(
                ErrorCode::from_grpc(code.grpc_code())
                    .http_status()
                    .is_client_error(),
                code.http_status().is_client_error(),
                "{code:?}"
            );
        }
    }
}
