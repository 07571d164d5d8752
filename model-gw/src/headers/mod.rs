//! Which client headers reach the upstream (spec 4.3, design.md): with forwarding on,
//! every `x-*` header except `x-stainless-*` and credentials, plus provider headers such
//! as `anthropic-beta`; `authorization`, `cookie` and `user-agent` never. With forwarding
//! off, none. The configuration's static headers go on every call, in place of a client
//! header of the same name. The trace context (`traceparent`) is not a client header
//! here: the upstream always gets the gateway's own upstream span's, child of the client's.
//! Anthropic's `anthropic-version` and `anthropic-beta` are part of the Messages API, not
//! the client's identity: they reach an upstream that speaks it whatever the policy. No
//! header with an empty value goes upstream.

use http::{HeaderMap, HeaderName};
use sandgate_proto::models::v1::Header;

use crate::config::GatewayConfig;

/// Prefixes of provider-specific headers that are forwarded.
const PROVIDER_PREFIXES: &[&str] = &["anthropic-"];

/// Credential headers, which belong to this hop and never travel on.
const CREDENTIALS: &[&str] = &[
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "ocp-apim-subscription-key",
    "x-session-api-key",
    "x-amz-security-token",
    // The admin's token where it stands for a runtime API key (the console's).
    "x-sandgate-admin-token",
];

/// Whether a client header (lowercase name) may be forwarded when forwarding is on.
pub fn forwardable(name: &str) -> bool {
    if CREDENTIALS.contains(&name) || name.ends_with("-api-key") || name.ends_with("-bin") {
        return false;
    }
    // What the edge tells the gateway of the caller (its TCP peer, its address): this
    // deployment's own, never an upstream's to know.
    if name == sandgate_proto::PEER_ADDRESS_METADATA
        || name == sandgate_proto::CLIENT_ADDRESS_METADATA
    {
        return false;
    }
    if let Some(rest) = name.strip_prefix("x-") {
        return !rest.starts_with("stainless-");
    }
    PROVIDER_PREFIXES
        .iter()
        .any(|prefix| name.starts_with(prefix))
}

/// The headers an upstream call carries besides its own (content type, the upstream's key,
/// the trace context): with forwarding on, the client's [`forwardable`] ones, then the
/// configured static headers. A static header replaces the client's of the same name: it
/// has the same value for every client (spec 4.3), and a client's value sent along with
/// it would be the one an upstream reading the first value sees.
pub fn outbound_headers(client: &HeaderMap, config: &GatewayConfig) -> HeaderMap {
    let mut outbound = HeaderMap::new();
    if config.forward_client_headers {
        for (name, value) in client {
            let configured = config.extra_headers.iter().any(|(extra, _)| extra == name);
            if forwardable(name.as_str()) && !configured {
                outbound.append(name, value.clone());
            }
        }
    }
    for (name, value) in &config.extra_headers {
        outbound.append(name, value.clone());
    }
    outbound
}

/// Anthropic's API version header, sent with every `/messages` call.
const ANTHROPIC_VERSION: &str = "anthropic-version";
/// The beta features a Messages API body uses.
const ANTHROPIC_BETA: &str = "anthropic-beta";
/// The version sent when the client named none: the one every Messages API release serves.
const DEFAULT_ANTHROPIC_VERSION: &str = "2023-06-01";

/// The headers that are part of Anthropic's Messages API, not the client's identity: they
/// reach an upstream that speaks it whether or not client headers are forwarded. Without
/// `anthropic-beta`, a body that uses beta features (`context_management`,
/// `output_config`) is refused by Anthropic's API. The version is the client's, or the one
/// every release serves.
pub fn anthropic_api_headers(client: &HeaderMap, forwarded: &mut HeaderMap) {
    if !forwarded.contains_key(ANTHROPIC_VERSION) {
        let version = client
            .get(ANTHROPIC_VERSION)
            .filter(|value| !value.is_empty())
            .cloned()
            .unwrap_or(http::HeaderValue::from_static(DEFAULT_ANTHROPIC_VERSION));
        forwarded.insert(ANTHROPIC_VERSION, version);
    }
    if !forwarded.contains_key(ANTHROPIC_BETA) {
        for beta in client.get_all(ANTHROPIC_BETA) {
            forwarded.append(ANTHROPIC_BETA, beta.clone());
        }
    }
}

/// `headers` without those whose value is empty (a client's `tracestate:`, an empty trace
/// state the context carries): an empty header says nothing, and some upstreams refuse it.
pub fn without_empty_values(headers: &mut HeaderMap) {
    if headers.values().all(|value| !value.is_empty()) {
        return;
    }
    let all: Vec<_> = headers.drain().collect();
    let mut name = None;
    for (next, value) in all {
        // `drain` names a header at its first value only.
        if next.is_some() {
            name = next;
        }
        if let Some(name) = &name
            && !value.is_empty()
        {
            headers.append(name.clone(), value);
        }
    }
}

/// Prefixes of the upstream answer's headers the client gets: rate limits, the provider's
/// and a chained gateway's own (LiteLLM's cost and call id headers).
const PASSED_ANSWER_PREFIXES: &[&str] = &[
    "x-ratelimit-",
    "openai-",
    "anthropic-",
    "x-litellm-",
    "llm_provider-",
];

/// The upstream answer's headers the client gets: [`PASSED_ANSWER_PREFIXES`] and
/// `retry-after` as they are; the upstream's request id (`x-request-id`, Anthropic's
/// `request-id`) as `llm_provider-<name>`, as LiteLLM passes it, since the answer's own
/// `x-request-id` is the gateway's.
pub fn passed_answer_headers(answer: &HeaderMap) -> Vec<Header> {
    let mut passed = Vec::new();
    for (name, value) in answer {
        let Ok(value) = value.to_str() else { continue };
        let name = name.as_str();
        let passed_name = if name == "retry-after"
            || PASSED_ANSWER_PREFIXES
                .iter()
                .any(|prefix| name.starts_with(prefix))
        {
            name.to_owned()
        } else if matches!(name, "x-request-id" | "request-id") {
            format!("llm_provider-{name}")
        } else {
            continue;
        };
        passed.push(Header {
            name: passed_name,
            value: value.to_owned(),
        });
    }
    passed
}

/// The spend log's metadata header, a JSON string: the spec's name, then LiteLLM's (what
/// the OpenHands SDK and LiteLLM clients send). The first present wins.
pub static SPEND_LOGS_METADATA: [HeaderName; 2] = [
    HeaderName::from_static("x-gateway-spend-logs-metadata"),
    HeaderName::from_static("x-litellm-spend-logs-metadata"),
];
/// Ties a call to a conversation, under the spec's name and LiteLLM's (the OpenHands SDK
/// stamps `x-litellm-session-id`); forwarded untouched when forwarding is on.
pub static SESSION_ID: [HeaderName; 2] = [
    HeaderName::from_static("x-gateway-session-id"),
    HeaderName::from_static("x-litellm-session-id"),
];
/// The largest spend log metadata kept, in bytes of JSON: it is stored with every entry.
pub const SPEND_LOGS_METADATA_LIMIT: usize = 8 * 1024;

/// The first of `names` the client sent, as text. Names are looked up as [`HeaderName`]s
/// built once: a lookup by text parses and checks the name on every call.
pub(crate) fn first_header<'a>(headers: &'a HeaderMap, names: &[HeaderName]) -> Option<&'a str> {
    names
        .iter()
        .find_map(|name| headers.get(name))
        .and_then(|value| value.to_str().ok())
}

#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;
