//! Which client headers reach the upstream (spec 4.3, design.md): with forwarding on,
//! every `x-*` header except `x-stainless-*` and credentials, plus provider headers such
//! as `anthropic-beta`; `authorization`, `cookie` and `user-agent` never. With forwarding
//! off, none. The configuration's static headers go on every call, in place of a client
//! header of the same name. The trace context (`traceparent`) is not a client header
//! here: the upstream always gets the gateway's own upstream span's, child of the client's.
//! Anthropic's `anthropic-version` and `anthropic-beta` are part of the Messages API, not
//! the client's identity: they reach an upstream that speaks it whatever the policy. No
//! header with an empty value goes upstream.

use http::HeaderMap;
use sandgate_proto::models::v1::Header;

use crate::config::GatewayConfig;

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
pub const SPEND_LOGS_METADATA: [&str; 2] = [
    "x-gateway-spend-logs-metadata",
    "x-litellm-spend-logs-metadata",
];
/// Ties a call to a conversation, under the spec's name and LiteLLM's (the OpenHands SDK
/// stamps `x-litellm-session-id`); forwarded untouched when forwarding is on.
pub const SESSION_ID: [&str; 2] = ["x-gateway-session-id", "x-litellm-session-id"];
/// The largest spend log metadata kept, in bytes of JSON: it is stored with every entry.
pub const SPEND_LOGS_METADATA_LIMIT: usize = 8 * 1024;

/// The first of `names` the client sent, as text.
pub(crate) fn first_header<'a>(headers: &'a HeaderMap, names: &[&str]) -> Option<&'a str> {
    names
        .iter()
        .find_map(|name| headers.get(*name))
        .and_then(|value| value.to_str().ok())
}

#[cfg(test)]
mod tests {
    use http::{HeaderMap, HeaderName, HeaderValue};

    use super::{
        anthropic_api_headers, forwardable, outbound_headers, passed_answer_headers,
        without_empty_values,
    };
    use crate::config::GatewayConfig;

    #[test]
    fn the_messages_apis_own_headers_go_and_empty_ones_do_not() {
        let mut client = HeaderMap::new();
        client.insert(
            "anthropic-beta",
            "context-management-2025-06-27".parse().expect("value"),
        );
        client.append(
            "anthropic-beta",
            "effort-2025-11-24".parse().expect("value"),
        );
        client.insert("anthropic-version", "2023-06-01".parse().expect("value"));
        let mut forwarded = HeaderMap::new();
        forwarded.insert("tracestate", http::HeaderValue::from_static(""));
        forwarded.insert("x-kept", http::HeaderValue::from_static("1"));
        anthropic_api_headers(&client, &mut forwarded);
        without_empty_values(&mut forwarded);
        let betas: Vec<_> = forwarded.get_all("anthropic-beta").iter().collect();
        assert_eq!(
            betas,
            ["context-management-2025-06-27", "effort-2025-11-24"]
        );
        assert_eq!(forwarded["anthropic-version"], "2023-06-01");
        assert_eq!(forwarded["x-kept"], "1");
        assert!(!forwarded.contains_key("tracestate"));
    }

    #[test]
    fn the_answers_rate_limits_provider_and_cost_headers_reach_the_client() {
        let mut answer = HeaderMap::new();
        for (name, value) in [
            ("x-request-id", "req-up"),
            ("x-ratelimit-remaining-requests", "99"),
            ("retry-after", "2"),
            ("openai-processing-ms", "12"),
            ("anthropic-ratelimit-tokens-limit", "1000"),
            ("x-litellm-response-cost", "0.001"),
            ("llm_provider-x-request-id", "req-deeper"),
            ("set-cookie", "session=1"),
            ("server", "uvicorn"),
            ("content-length", "10"),
        ] {
            answer.insert(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        let passed: Vec<(String, String)> = passed_answer_headers(&answer)
            .into_iter()
            .map(|header| (header.name, header.value))
            .collect();
        let expected = [
            ("llm_provider-x-request-id", "req-up"),
            ("x-ratelimit-remaining-requests", "99"),
            ("retry-after", "2"),
            ("openai-processing-ms", "12"),
            ("anthropic-ratelimit-tokens-limit", "1000"),
            ("x-litellm-response-cost", "0.001"),
            ("llm_provider-x-request-id", "req-deeper"),
        ];
        assert_eq!(
            passed,
            expected.map(|(name, value)| (name.to_owned(), value.to_owned()))
        );
    }

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

    /// The regression `properties::what_goes_out_is_what_the_policy_says` found: both
    /// values went, the client's first.
    #[test]
    fn a_static_header_replaces_the_clients() {
        let team = HeaderName::from_static("x-team");
        let mut client = HeaderMap::new();
        client.append(&team, HeaderValue::from_static("spoofed"));
        let config = GatewayConfig {
            forward_client_headers: true,
            extra_headers: vec![(team.clone(), HeaderValue::from_static("platform"))],
            ..GatewayConfig::default()
        };
        let outbound = outbound_headers(&client, &config);
        let values: Vec<_> = outbound.get_all(&team).iter().collect();
        assert_eq!(values, ["platform"]);
    }
}

/// The policy as the spec words it (4.3, design.md), checked against
/// [`outbound_headers`] for any client header set and configuration. The fate of a
/// generated header comes from how it was generated, not from [`forwardable`].
#[cfg(test)]
mod properties {
    use http::{HeaderMap, HeaderName, HeaderValue};
    use proptest::prelude::*;
    use proptest::sample::select;

    use super::{SESSION_ID, outbound_headers};
    use crate::config::GatewayConfig;

    /// The credentials the policy names; any `*-api-key` is one too.
    const NAMED_CREDENTIALS: &[&str] = &[
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "x-session-api-key",
        "x-amz-security-token",
    ];

    /// Headers that are never the client's to pass on: credentials of this hop, the
    /// client's identity, hop-by-hop and transport headers, gRPC's own.
    const NEVER: &[&str] = &[
        "authorization",
        "proxy-authorization",
        "cookie",
        "user-agent",
        "host",
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "content-type",
        "accept",
        "accept-encoding",
        "traceparent",
        "tracestate",
        "grpc-timeout",
        "grpc-encoding",
        "grpc-accept-encoding",
        "forwarded",
        "via",
    ];

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Fate {
        Forwarded,
        Withheld,
    }

    /// The tail of a header name: an RFC 9110 token, usually plain.
    fn token() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => "[a-z0-9][a-z0-9-]{0,12}",
            1 => "[a-z0-9!#$%&'*+.^_`|~-]{1,12}",
        ]
    }

    /// What the policy says of a header name it forwards: everything but a credential.
    fn credential(name: &str) -> bool {
        NAMED_CREDENTIALS.contains(&name) || name.ends_with("-api-key")
    }

    fn forwarded_name() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => select(vec![
                "x-gateway-session-id",
                "x-gateway-spend-logs-metadata",
                "x-team",
                "x-a",
                "x-stainlessish",
                "anthropic-beta",
                "anthropic-version",
            ])
            .prop_map(str::to_owned),
            3 => token().prop_map(|t| format!("x-{t}")),
            1 => token().prop_map(|t| format!("anthropic-{t}")),
        ]
        .prop_filter("x-stainless-*, a credential or binary metadata", |name| {
            !(name.starts_with("x-stainless-") || credential(name) || name.ends_with("-bin"))
        })
    }

    fn withheld_name() -> impl Strategy<Value = String> {
        prop_oneof![
            select(NEVER).prop_map(str::to_owned),
            select(NAMED_CREDENTIALS).prop_map(str::to_owned),
            token().prop_map(|t| format!("x-stainless-{t}")),
            (select(vec!["x-", "anthropic-", "", "x-litellm-"]), token())
                .prop_map(|(prefix, t)| format!("{prefix}{t}-api-key")),
            (select(vec!["x-", "anthropic-", ""]), token())
                .prop_map(|(prefix, t)| format!("{prefix}{t}-bin")),
            token().prop_filter("an x-* or provider header", |t| {
                !(t.starts_with("x-") || t.starts_with("anthropic-"))
            }),
        ]
    }

    fn value() -> impl Strategy<Value = HeaderValue> {
        let byte = prop_oneof![8 => 0x20u8..0x7f, 1 => Just(b'\t'), 1 => 0x80u8..=0xff];
        proptest::collection::vec(byte, 0..24)
            .prop_map(|bytes| HeaderValue::from_bytes(&bytes).unwrap())
    }

    fn name(text: &str) -> HeaderName {
        HeaderName::from_bytes(text.as_bytes()).unwrap()
    }

    /// A client's headers, in the order sent, names often repeated.
    fn client() -> impl Strategy<Value = Vec<(HeaderName, HeaderValue, Fate)>> {
        let entry = prop_oneof![
            (forwarded_name(), value()).prop_map(|(n, v)| (name(&n), v, Fate::Forwarded)),
            (withheld_name(), value()).prop_map(|(n, v)| (name(&n), v, Fate::Withheld)),
        ];
        proptest::collection::vec(entry, 0..10)
    }

    /// `extra_headers`, often naming what a client sends too.
    fn static_headers() -> impl Strategy<Value = Vec<(HeaderName, HeaderValue)>> {
        let static_name = prop_oneof![
            3 => select(vec!["x-team", "x-a", "anthropic-beta", "x-static"]).prop_map(str::to_owned),
            1 => token().prop_map(|t| format!("x-{t}")),
        ];
        proptest::collection::vec((static_name.prop_map(|n| name(&n)), value()), 0..3)
    }

    fn header_map<'a>(
        headers: impl IntoIterator<Item = (&'a HeaderName, &'a HeaderValue)>,
    ) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(name, value.clone());
        }
        map
    }

    fn config(forward: bool, extra_headers: Vec<(HeaderName, HeaderValue)>) -> GatewayConfig {
        GatewayConfig {
            forward_client_headers: forward,
            extra_headers,
            ..GatewayConfig::default()
        }
    }

    /// What the policy sends: with forwarding on, the client's forwardable headers, all
    /// their values in order, except those the configuration sets; then the static ones.
    fn expected(client: &[(HeaderName, HeaderValue, Fate)], config: &GatewayConfig) -> HeaderMap {
        let configured = |name: &HeaderName| config.extra_headers.iter().any(|(n, _)| n == name);
        let forwarded = client
            .iter()
            .filter(|(name, _, fate)| {
                config.forward_client_headers && *fate == Fate::Forwarded && !configured(name)
            })
            .map(|(name, value, _)| (name, value));
        let statics = config
            .extra_headers
            .iter()
            .map(|(name, value)| (name, value));
        header_map(forwarded.chain(statics))
    }

    proptest! {
        /// The exact set that goes out is the policy's, whatever the mix.
        #[test]
        fn what_goes_out_is_what_the_policy_says(
            client in client(),
            forward in any::<bool>(),
            statics in static_headers(),
        ) {
            let config = config(forward, statics);
            let sent = header_map(client.iter().map(|(name, value, _)| (name, value)));
            prop_assert_eq!(outbound_headers(&sent, &config), expected(&client, &config));
        }

        #[test]
        fn with_forwarding_off_only_the_static_headers_go(
            client in client(),
            statics in static_headers(),
        ) {
            let sent = header_map(client.iter().map(|(name, value, _)| (name, value)));
            let outbound = outbound_headers(&sent, &config(false, statics.clone()));
            prop_assert_eq!(outbound, header_map(statics.iter().map(|(n, v)| (n, v))));
        }

        /// Credentials, `authorization`, `cookie`, `user-agent`, hop-by-hop headers,
        /// `x-stainless-*`, binary metadata and non-`x-` headers never go.
        #[test]
        fn withheld_headers_never_go(
            withheld in proptest::collection::vec((withheld_name(), value()), 1..6),
            client in client(),
            forward in any::<bool>(),
        ) {
            let mut sent = header_map(client.iter().map(|(name, value, _)| (name, value)));
            for (text, value) in &withheld {
                sent.append(name(text), value.clone());
            }
            let outbound = outbound_headers(&sent, &config(forward, Vec::new()));
            for (text, _) in &withheld {
                prop_assert!(outbound.get(text.as_str()).is_none(), "{} went", text);
            }
        }

        /// A static header has its configured value(s) for every client: a client's
        /// header of that name does not go along with it.
        #[test]
        fn static_headers_go_as_configured(
            client in client(),
            forward in any::<bool>(),
            statics in static_headers(),
        ) {
            let sent = header_map(client.iter().map(|(name, value, _)| (name, value)));
            let outbound = outbound_headers(&sent, &config(forward, statics.clone()));
            for (name, _) in &statics {
                let configured: Vec<&HeaderValue> =
                    statics.iter().filter(|(n, _)| n == name).map(|(_, v)| v).collect();
                let gone: Vec<&HeaderValue> = outbound.get_all(name).iter().collect();
                prop_assert_eq!(gone, configured, "{}", name);
            }
        }

        /// With forwarding on, the session id rides through byte for byte, every value.
        #[test]
        fn the_session_id_rides_through_unchanged(
            ids in proptest::collection::vec(value(), 1..3),
            client in client(),
            statics in static_headers(),
        ) {
            for session_id in SESSION_ID {
                let mut sent = header_map(client.iter().map(|(name, value, _)| (name, value)));
                sent.remove(session_id);
                for id in &ids {
                    sent.append(session_id, id.clone());
                }
                let outbound = outbound_headers(&sent, &config(true, statics.clone()));
                let gone: Vec<&HeaderValue> = outbound.get_all(session_id).iter().collect();
                prop_assert_eq!(gone, ids.iter().collect::<Vec<_>>());
            }
        }

        /// A name's fate does not depend on the case it was sent in: names arrive as
        /// `HeaderName`s (gRPC metadata keys), whatever case the client wrote them in.
        #[test]
        fn case_does_not_matter(
            client in client(),
            upper in proptest::collection::vec(any::<bool>(), 64),
            forward in any::<bool>(),
            statics in static_headers(),
        ) {
            let config = config(forward, statics);
            let mut mixed = HeaderMap::new();
            for (name, value, _) in &client {
                let text: String = name
                    .as_str()
                    .chars()
                    .zip(upper.iter().cycle())
                    .map(|(c, up)| if *up { c.to_ascii_uppercase() } else { c })
                    .collect();
                let parsed = HeaderName::from_bytes(text.as_bytes());
                prop_assert!(parsed.is_ok(), "{} does not parse", text);
                mixed.append(parsed.unwrap(), value.clone());
            }
            let lower = header_map(client.iter().map(|(name, value, _)| (name, value)));
            prop_assert_eq!(outbound_headers(&mixed, &config), outbound_headers(&lower, &config));
        }
    }
}
