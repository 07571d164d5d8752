//! The header policy on the headers real clients send.

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

#[test]
fn what_the_edge_says_of_the_caller_never_goes_upstream() {
    assert!(!forwardable(sandgate_proto::PEER_ADDRESS_METADATA));
    assert!(!forwardable(sandgate_proto::CLIENT_ADDRESS_METADATA));
    assert!(forwardable("x-litellm-session-id"));
}
