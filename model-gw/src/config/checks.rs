//! What a model entry's values must be to be called: a routable model, an `api_base` in
//! the documented form, a key that fits in a header; and the headers a static
//! `extra_headers` entry may not set.

/// Why an entry's upstream model cannot be routed, if it cannot.
pub fn check_model(model: &str) -> Result<(), String> {
    let routable = ["gateway_proxy/", "openai/"].iter().any(|prefix| {
        model
            .strip_prefix(prefix)
            .is_some_and(|rest| !rest.is_empty())
    });
    if routable {
        Ok(())
    } else {
        Err(format!(
            "model {model:?} has no routing prefix: use gateway_proxy/<model> or openai/<provider>/<model>"
        ))
    }
}

/// Why an `api_key` cannot be sent (as `Authorization: Bearer <key>`), if it cannot: it
/// must be a header value. Never echoes the key.
pub fn check_api_key(api_key: &str) -> Result<(), String> {
    if http::HeaderValue::from_str(api_key).is_ok() {
        Ok(())
    } else {
        Err("api_key cannot be sent in a header: it holds a control character".to_owned())
    }
}

/// The `api_base`s the gateway calls: http(s), a host that is a DNS name (its last label
/// starting with a letter) or a dotted IPv4 address, a port up to 65535, then any path,
/// query or fragment. The OpenAPI document states the same pattern (the e2e test
/// `the_api_base_pattern_is_the_documents` holds them equal; the document writes `(?s:.)`
/// as `[\s\S]`): what `/model/new` refuses is what its document says it refuses.
pub const API_BASE_PATTERN: &str = concat!(
    "^[Hh][Tt][Tt][Pp][Ss]?://",
    "(([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\\.)*[A-Za-z]([A-Za-z0-9-]*[A-Za-z0-9])?\\.?",
    "|(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3})",
    "(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4}))?",
    "([/?#](?s:.)*)?$",
);

static API_BASE: std::sync::LazyLock<Option<fancy_regex::Regex>> =
    std::sync::LazyLock::new(|| fancy_regex::Regex::new(API_BASE_PATTERN).ok());

/// Why an `api_base` cannot be called, if it cannot: not in the documented form (whose
/// scheme is http or https), or not a URL the client can parse.
pub fn check_api_base(api_base: &str) -> Result<(), String> {
    let in_form = API_BASE
        .as_ref()
        .is_some_and(|form| form.is_match(api_base).unwrap_or(false));
    match url::Url::parse(api_base) {
        Ok(_) if in_form => Ok(()),
        _ => Err(format!(
            "api_base {api_base:?} is not an http(s) URL with a DNS name or an IPv4 address as its host"
        )),
    }
}

/// Headers a static `extra_headers` entry may not set, each with the reason: the gateway
/// sets them per call, or they are the client's own (a static value would replace it for
/// every client, since static headers win).
pub(super) const RESERVED_HEADERS: &[(&str, &str)] = &[
    (
        "x-gateway-session-id",
        "each client's session id is forwarded untouched",
    ),
    (
        "x-gateway-spend-logs-metadata",
        "each client's spend log metadata is its own",
    ),
    (
        "x-litellm-session-id",
        "each client's session id is forwarded untouched",
    ),
    (
        "x-litellm-spend-logs-metadata",
        "each client's spend log metadata is its own",
    ),
    (
        "authorization",
        "the upstream key is the model entry's `api_key`",
    ),
    ("content-type", "set by the gateway"),
    ("content-length", "set by the gateway"),
    ("host", "set by the gateway"),
    ("traceparent", "the trace context is set per call"),
    ("tracestate", "the trace context is set per call"),
];
