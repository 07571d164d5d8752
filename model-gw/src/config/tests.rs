//! Loading the configuration file: its shape, its checks, its environment references and
//! its reloads.

use std::time::Duration;

use super::*;

#[test]
fn api_bases_are_refused_as_the_document_says() {
    for base in [
        "http://g",
        "HTtp://litellm.ns.svc.cluster.local:4000",
        "https://10-0-0-1.pods.local:65535/v1?api-version=2",
        "http://127.0.0.1:11434/v1",
        "https://o/openai/v1/",
    ] {
        assert_eq!(check_api_base(base), Ok(()), "{base}");
    }
    for base in [
        // Schemathesis's find: a host no DNS name nor address is.
        "HTtp://253.37.201.0*",
        "http://a_b.com",
        "http://a.1",
        "http://host:65536",
        "http://user:secret@host",
        "ftp://host",
        "http://",
    ] {
        let refused = check_api_base(base).expect_err(base);
        assert!(refused.contains("is not an http(s) URL"), "{refused}");
    }
}

#[test]
fn an_api_key_must_be_a_header_value() {
    assert!(check_api_key("sk-abc 123\tok").is_ok());
    for bad in ["sk-abc\n", "sk\u{7f}", "sk\r\nx-injected: 1"] {
        let err = check_api_key(bad).expect_err(bad);
        assert!(!err.contains("sk"), "{err}");
    }
}

#[test]
fn extra_headers_may_not_set_what_is_per_client_or_per_call() {
    for name in [
        "x-gateway-session-id",
        "Authorization",
        "traceparent",
        "content-type",
    ] {
        let text = format!("model_list: []\nextra_headers:\n  {name}: fixed\n");
        let err = GatewayConfig::parse(&text, &|_| None)
            .err()
            .unwrap_or_else(|| panic!("{name} accepted"));
        assert!(
            err.starts_with(&format!("extra_headers.{name}: reserved: ")),
            "{err}"
        );
    }
    let text = "model_list: []\nextra_headers:\n  x-team: platform\n";
    assert!(GatewayConfig::parse(text, &|_| None).is_ok());
}

fn env(name: &str) -> Option<String> {
    (name == "GATEWAY_KEY").then(|| "sk-from-env".to_owned())
}

#[test]
fn environment_references_are_resolved() {
    let config = GatewayConfig::parse(
        r"
model_list:
  - model_name: claude
    gateway_params:
      model: gateway_proxy/claude-sonnet
      api_base: http://gateway
      api_key: os.environ/GATEWAY_KEY
general_settings:
  forward_client_headers_to_llm_api: true
extra_headers:
  x-team: platform
",
        &env,
    )
    .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(config.models[0].api_key, "sk-from-env");
    assert!(config.forward_client_headers);
    assert_eq!(config.extra_headers[0].0.as_str(), "x-team");
}

#[test]
fn a_missing_variable_names_the_entry() {
    let err = GatewayConfig::parse(
        r"
model_list:
  - model_name: claude
    gateway_params: {model: openai/a/b, api_base: http://g/v1, api_key: os.environ/NOPE}
",
        &env,
    )
    .err()
    .unwrap_or_default();
    assert!(err.contains("model_list[0] (claude)"), "{err}");
    assert!(err.contains("NOPE"), "{err}");
}

#[test]
fn every_environment_reference_is_listed_with_its_entry() {
    let references = environment_references(
        r"
model_list:
  - model_name: claude
    gateway_params: {model: gateway_proxy/c, api_base: os.environ/BASE, api_key: os.environ/KEY_A}
  - model_name: gpt
    gateway_params: {model: openai/a/b, api_base: 'http://g/v1', api_key: literal}
extra_headers:
  x-team: os.environ/TEAM
",
    )
    .unwrap_or_else(|err| panic!("{err}"));
    let listed: Vec<_> = references
        .iter()
        .map(|reference| {
            (
                reference.holder.as_str(),
                reference.field,
                reference.name.as_str(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("model_list[0] (claude)", "api_base", "BASE"),
            ("model_list[0] (claude)", "api_key", "KEY_A"),
            ("extra_headers.x-team", "value", "TEAM"),
        ]
    );
    assert!(environment_references("model_list: [{nope: 1}]").is_err());
}

/// The YAML scanner's work grows with the flow depth: 20,000 nested `[` took tens of
/// seconds (fuzz/regressions/gateway_config/). Refused before it is scanned.
#[test]
fn deep_flow_nesting_is_refused_before_it_is_scanned() {
    let deep = format!("model_list: {}{}", "[".repeat(20_000), "]".repeat(20_000));
    let err = GatewayConfig::parse(&deep, &env).err().unwrap_or_default();
    assert!(err.contains("more than 128 levels deep"), "{err}");
    assert_eq!(environment_references(&deep).err(), Some(err));
    // Brackets in quoted scalars and comments are not nesting.
    let quoted = format!(
        "extra_headers: {{x-a: \"{open}\", x-b: '{open}''{open}'}} # {open}\n",
        open = "[".repeat(200)
    );
    assert_eq!(
        GatewayConfig::parse(&quoted, &env).map(|config| config.extra_headers.len()),
        Ok(2)
    );
    let shallow = format!("model_list: {}{}", "[".repeat(100), "]".repeat(100));
    let err = GatewayConfig::parse(&shallow, &env)
        .err()
        .unwrap_or_default();
    assert!(!err.contains("levels deep"), "{err}");
}

/// A LiteLLM proxy's config.yaml of the spec's shape, as its users bring it.
#[test]
fn a_litellm_config_loads_with_warnings_for_what_is_not_used() {
    let config = GatewayConfig::parse(
        r"
model_list:
  - model_name: claude
    litellm_params:
      model: gateway_proxy/claude-sonnet
      api_base: http://gateway
      api_key: os.environ/GATEWAY_KEY
      timeout: 30
      num_retries: 2
      max_parallel_requests: 8
      temperature: 0.2
    model_info:
      max_input_tokens: 200000
      supports_vision: true
  - model_name: gpt
    litellm_params: {model: openai/azure/gpt-4o, api_base: 'http://g/v1', messages_api: native}
litellm_settings:
  drop_params: true
general_settings:
  master_key: sk-ignored
  forward_client_headers_to_llm_api: true
",
        &env,
    )
    .unwrap_or_else(|err| panic!("{err}"));
    let claude = &config.models[0];
    assert_eq!(claude.api_key, "sk-from-env");
    assert_eq!(
        claude.params,
        CallParams {
            timeout: Some(Duration::from_secs(30)),
            num_retries: Some(2),
            native_messages: false,
            takes_reasoning: false,
            responses_via_chat: false,
            max_parallel_requests: Some(8),
        }
    );
    assert_eq!(
        claude.model_info,
        Some(serde_json::json!({"max_input_tokens": 200000, "supports_vision": true}))
    );
    assert!(config.models[1].params.native_messages);
    assert!(config.forward_client_headers);
    assert_eq!(
        config.warnings,
        [
            "litellm_settings: not used by this gateway; ignored",
            "general_settings.master_key: not used by this gateway; ignored",
            "model_list[0] (claude).gateway_params.temperature: not used by this gateway; ignored",
        ]
    );
}

#[test]
fn limits_it_does_not_enforce_and_unbounded_retries_are_refused() {
    for (params, expected) in [
        ("rpm: 10", "rpm and tpm are not enforced"),
        ("tpm: 1000", "rpm and tpm are not enforced"),
        ("num_retries: 9", "num_retries 9 is more than 5"),
        ("timeout: -1", "timeout -1 is not a number of seconds"),
        ("messages_api: sometimes", "messages_api"),
        (
            "max_parallel_requests: 0",
            "max_parallel_requests must be at least 1",
        ),
    ] {
        let text = format!(
            "model_list: [{{model_name: a, litellm_params: {{model: openai/a/b, api_base: 'http://g/v1', {params}}}}}]"
        );
        let err = GatewayConfig::parse(&text, &env).err().unwrap_or_default();
        assert!(err.contains(expected), "{params}: {err}");
        assert!(
            err.contains("model_list[0] (a)") || params.starts_with("messages_api"),
            "{err}"
        );
    }
}

#[test]
fn a_model_without_a_routing_prefix_is_refused() {
    let err = GatewayConfig::parse(
        "model_list: [{model_name: a, gateway_params: {model: gpt-4o, api_base: 'http://g'}}]",
        &env,
    )
    .err()
    .unwrap_or_default();
    assert!(err.contains("routing prefix"), "{err}");
}

fn model_names(file: &ConfigFile) -> Vec<String> {
    file.current()
        .models
        .iter()
        .map(|entry| entry.model_name.clone())
        .collect()
}

fn one_model(name: &str) -> String {
    format!(
        "model_list: [{{model_name: {name}, gateway_params: {{model: openai/{name}, api_base: 'http://g/v1'}}}}]"
    )
}

/// A file holding the model `first`, and the configuration read from it, looked at once
/// every `look_every`.
fn opened(look_every: Duration) -> (tempfile::NamedTempFile, ConfigFile) {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), one_model("first")).expect("write");
    let config = ConfigFile::open(Some(file.path().to_owned()))
        .expect("open")
        .looked_at_every(look_every);
    (file, config)
}

/// A changed file is in effect for the next call due to look at it; a broken one keeps the
/// last good configuration.
#[test]
fn a_changed_file_is_read_again_and_a_broken_one_ignored() {
    let (file, config) = opened(Duration::ZERO);
    assert_eq!(model_names(&config), ["first"]);
    std::fs::write(file.path(), one_model("second")).expect("rewrite");
    assert_eq!(model_names(&config), ["second"]);
    std::fs::write(file.path(), "model_list: [this is: not valid").expect("break");
    assert_eq!(model_names(&config), ["second"], "the last good one stays");
}

/// Calls do not each look at the file: within the interval, a change waits for the next
/// look (the system call per call was a cost of every call's path).
#[test]
fn the_file_is_looked_at_once_an_interval() {
    let (file, config) = opened(Duration::from_secs(3600));
    assert_eq!(model_names(&config), ["first"], "the first read looks");
    std::fs::write(file.path(), one_model("second")).expect("rewrite");
    assert_eq!(
        model_names(&config),
        ["first"],
        "not looked at again within the interval"
    );
}
