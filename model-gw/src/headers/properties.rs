//! The policy as the spec words it (4.3, design.md), checked against
//! [`outbound_headers`] for any client header set and configuration. The fate of a
//! generated header comes from how it was generated, not from [`forwardable`](super::forwardable).

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
    "x-sandgate-admin-token",
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
        for session_id in &SESSION_ID {
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
