//! Sandgate's protobuf API: the generated messages and gRPC stubs of every service, the
//! one table of error codes with its gRPC and HTTP projections, and the trace context
//! that travels in gRPC metadata.

pub mod codec;
pub mod error;
pub mod heavy;
pub mod json;
pub mod special_addresses;

/// The gRPC metadata in which the edge tells the services the address of the client it
/// serves (the TCP peer, or the client a trusted proxy names). The edge never forwards a
/// client's own header of this name; a caller without it is known by its remote address.
pub const CLIENT_ADDRESS_METADATA: &str = "x-sandgate-client-address";

/// The gRPC metadata in which the edge tells the model gateway the TCP peer of an LLM call
/// (never a proxy's `X-Forwarded-For`): how a call is known to come from a sandbox
/// Sandgate runs (`StoredSandbox::source_address`). Like [`CLIENT_ADDRESS_METADATA`], the
/// edge never forwards a client's own header of this name, the public gRPC port drops it,
/// and a caller without it is known by its remote address.
pub const PEER_ADDRESS_METADATA: &str = "x-sandgate-peer-address";

/// The client `request` is made for: the address the edge names in its metadata
/// ([`CLIENT_ADDRESS_METADATA`]), else the caller's own remote address (a direct gRPC
/// caller); `None` for an in-process caller that named none.
pub fn client_address<T>(request: &tonic::Request<T>) -> Option<std::net::IpAddr> {
    request
        .metadata()
        .get(CLIENT_ADDRESS_METADATA)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<std::net::IpAddr>().ok())
        .or_else(|| request.remote_addr().map(|address| address.ip()))
        .map(|address| address.to_canonical())
}
pub mod console_token;
pub mod trace;

pub mod errors {
    pub mod v1 {
        tonic::include_proto!("sandgate.errors.v1");
    }
}

pub mod admin {
    pub mod v1 {
        tonic::include_proto!("sandgate.admin.v1");
    }
}

pub mod conversations {
    pub mod v1 {
        tonic::include_proto!("sandgate.conversations.v1");
    }
}

pub mod models {
    pub mod v1 {
        tonic::include_proto!("sandgate.models.v1");
    }

    /// The messages of a call's answer, as the ModelGateway service yields them.
    pub type CallStream = std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<v1::CallResponse, tonic::Status>> + Send>,
    >;

    /// The OpenAI error `type` for an HTTP status, as the OpenAI SDKs and LiteLLM's proxy
    /// name them.
    pub fn openai_error_type(status: u16) -> &'static str {
        match status {
            400 | 413 | 422 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            429 => "rate_limit_error",
            _ => "api_error",
        }
    }

    /// Anthropic's error `type` for an HTTP status (OpenAI's, and `overloaded_error`): what
    /// the Messages API's errors say, the gateway's own and an upstream's translated alike.
    pub fn anthropic_error_type(status: u16) -> &'static str {
        match status {
            503 | 529 => "overloaded_error",
            _ => openai_error_type(status),
        }
    }

    /// An error in the OpenAI shape, `{"error": {message, type, param, code}}`, its `code`
    /// the status: the gateway's own errors and an upstream's that had no such object.
    pub fn openai_error(status: u16, message: &str, param: Option<&str>) -> Vec<u8> {
        openai_error_of_type(status, openai_error_type(status), message, param)
    }

    /// An error in the OpenAI shape with its own `type` (LiteLLM's proxy names its
    /// refusals: `budget_exceeded`, `key_model_access_denied`, …).
    pub fn openai_error_of_type(
        status: u16,
        r#type: &str,
        message: &str,
        param: Option<&str>,
    ) -> Vec<u8> {
        #[derive(serde::Serialize)]
        struct ErrorObject<'a> {
            error: ErrorBody<'a>,
        }
        #[derive(serde::Serialize)]
        struct ErrorBody<'a> {
            message: &'a str,
            r#type: &'a str,
            param: Option<&'a str>,
            code: String,
        }
        let error = ErrorObject {
            error: ErrorBody {
                message,
                r#type,
                param,
                code: status.to_string(),
            },
        };
        serde_json::to_vec(&error).unwrap_or_default()
    }

    /// The messages of a chat completion's answer through the deprecated ChatCompletion
    /// rpc.
    pub type ChatCompletionStream = std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<v1::ChatCompletionResponse, tonic::Status>> + Send>,
    >;

    /// Whether an answer's `content_type` is `text/event-stream` (parameters
    /// aside): an answer relayed event by event rather than whole.
    pub fn is_event_stream(content_type: &str) -> bool {
        content_type
            .split(';')
            .next()
            .is_some_and(|kind| kind.trim().eq_ignore_ascii_case("text/event-stream"))
    }
}

pub mod sandboxes {
    pub mod v1 {
        tonic::include_proto!("sandgate.sandboxes.v1");
    }
}

pub mod settings {
    pub mod v1 {
        tonic::include_proto!("sandgate.settings.v1");
    }
}

/// The credentials of an `Authorization: Bearer <credentials>` header value. The scheme
/// is matched without regard to case (RFC 9110 §11.1), as every Sandgate service reads it:
/// `Bearer`, `bearer` and `BEARER` are one scheme.
pub fn bearer_token(authorization: &str) -> Option<&str> {
    let (scheme, credentials) = authorization.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credentials.trim())
        .filter(|credentials| !credentials.is_empty())
}

/// The largest gRPC message a Sandgate service or client accepts. It is above the edge's
/// largest configurable body so that a webhook body the edge accepted is never refused by
/// the hop behind it.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

#[cfg(test)]
mod tests {
    use super::bearer_token;

    #[test]
    fn the_bearer_scheme_is_read_without_regard_to_case() {
        for value in ["Bearer abc", "bearer abc", "BEARER abc", "bEaReR  abc "] {
            assert_eq!(bearer_token(value), Some("abc"), "{value}");
        }
        for value in ["Basic abc", "Bearer", "Bearer ", "Bearerabc", "abc"] {
            assert_eq!(bearer_token(value), None, "{value}");
        }
    }
}
