//! Which client headers reach the upstream (spec 4.3, design.md): with forwarding on,
//! every `x-*` header except `x-stainless-*` and credentials, plus provider headers such
//! as `anthropic-beta`; `authorization`, `cookie` and `user-agent` never. With forwarding
//! off, none. The trace context (`traceparent`) is not a client header here: the upstream
//! always gets the gateway's own upstream span's, child of the client's.

/// Prefixes of provider-specific headers that are forwarded.
const PROVIDER_PREFIXES: &[&str] = &["anthropic-"];

/// Credential headers, which belong to this hop and never travel on.
const CREDENTIALS: &[&str] = &[
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "x-session-api-key",
    "x-amz-security-token",
];

/// Whether a client header (lowercase name) may be forwarded when forwarding is on.
pub fn forwardable(name: &str) -> bool {
    if CREDENTIALS.contains(&name) || name.ends_with("-api-key") || name.ends_with("-bin") {
        return false;
    }
    if let Some(rest) = name.strip_prefix("x-") {
        return !rest.starts_with("stainless-");
    }
    PROVIDER_PREFIXES
        .iter()
        .any(|prefix| name.starts_with(prefix))
}

/// The spend log's metadata header: a JSON string.
pub const SPEND_LOGS_METADATA: &str = "x-gateway-spend-logs-metadata";
/// Ties a call to a conversation; forwarded untouched when forwarding is on.
pub const SESSION_ID: &str = "x-gateway-session-id";

#[cfg(test)]
mod tests {
    use super::forwardable;

    #[test]
    fn x_headers_pass_except_stainless_and_credentials() {
        for name in [
            "x-gateway-session-id",
            "x-team",
            "x-gateway-spend-logs-metadata",
            "anthropic-beta",
        ] {
            assert!(forwardable(name), "{name}");
        }
        for name in [
            "x-stainless-os",
            "x-stainless-retry-count",
            "x-api-key",
            "api-key",
            "x-goog-api-key",
            "x-litellm-api-key",
            "authorization",
            "cookie",
            "user-agent",
            "host",
            "content-type",
            "te",
            "grpc-timeout",
        ] {
            assert!(!forwardable(name), "{name}");
        }
    }
}
