//! The validator through the crate's public API: what is accepted and stored (redacted,
//! in the documented types), what is refused and where, on both paths.

use super::*;
use serde_json::json;

fn minimal() -> Value {
    json!({
        "id": "7f3c2a10-0000-4000-8000-000000000901",
        "workspace": {"kind": "LocalWorkspace", "working_dir": "/workspace"},
        "agent": {"kind": "Agent", "llm": {"model": "gpt-4o", "api_key": "sk-secret"}},
    })
}

#[test]
fn minimal_body_validates_and_redacts() {
    let ok = validate_conversation(minimal()).ok();
    let record = ok.as_ref().map(|c| c.record.clone()).unwrap_or_default();
    assert_eq!(record["agent"]["llm"]["api_key"], json!(REDACTED));
    let summary = ok.map(|c| c.summary);
    assert_eq!(
        summary.as_ref().map(|s| s.execution_status),
        Some(ExecutionStatus::Idle)
    );
    assert_eq!(
        summary.as_ref().and_then(|s| s.model.clone()).as_deref(),
        Some("gpt-4o")
    );
    assert_eq!(summary.map(|s| s.agent_kind).as_deref(), Some("Agent"));
}

/// Issue 14, item 3: a value the models coerce is stored in its documented type, as the
/// receiver's `model_dump(mode="json")` gives it (the fast path, which stores bodies as
/// sent, leaves such a body to the `Value` path). Inside a union a value stays as sent:
/// the member that matched decides, as in pydantic's smart mode.
#[test]
fn coerced_values_are_stored_in_their_documented_types() {
    let mut body = minimal();
    body["max_iterations"] = json!(" 1_000 ");
    body["stuck_detection"] = json!("yes");
    body["supports_runtime_model_switch"] = json!(0);
    body["agent"]["llm"]["num_retries"] = json!(5.0);
    body["agent"]["llm"]["retry_multiplier"] = json!("8.5");
    body["agent"]["llm"]["stream"] = json!("off");
    body["created_at"] = json!(1_772_366_400);
    body["updated_at"] = json!(1_772_366_400_123_i64);
    let text = serde_json::to_vec(&body).unwrap_or_default();
    let slow = validate_conversation(body.clone()).map(|valid| valid.record);
    let fast = validate_body(&text)
        .and_then(|(record, _)| serde_json::from_str::<Value>(record.get()).ok());
    let slow = slow.unwrap_or_default();
    assert_eq!(slow["max_iterations"], json!(1000));
    assert_eq!(slow["stuck_detection"], json!(true));
    assert_eq!(slow["supports_runtime_model_switch"], json!(false));
    assert_eq!(slow["agent"]["llm"]["num_retries"], json!(5));
    assert_eq!(slow["agent"]["llm"]["retry_multiplier"], json!(8.5));
    assert_eq!(slow["agent"]["llm"]["stream"], json!(false));
    assert_eq!(slow["created_at"], json!("2026-03-01T12:00:00Z"));
    assert_eq!(slow["updated_at"], json!("2026-03-01T12:00:00.123000Z"));
    // The fast path stores bodies as sent: it leaves this one to the `Value` path.
    assert_eq!(fast, None);

    // A body already in its documented types is stored as sent.
    let canonical = validate_conversation(minimal()).map(|valid| valid.record);
    let mut expected = minimal();
    expected["agent"]["llm"]["api_key"] = json!(REDACTED);
    assert_eq!(canonical.ok(), Some(expected));
}

/// Issue 16, item 9: credentials the schema does not mark were stored in clear. Both
/// paths (the borrowed fast path and the `Value` one) store them redacted.
#[test]
fn credentials_the_schema_does_not_mark_are_redacted_on_both_paths() {
    let mut body = minimal();
    body["agent"]["llm"]["extra_headers"] =
        json!({"Authorization": "Bearer hdr-secret", "X-Trace": "keep-me"});
    body["agent"]["llm"]["base_url"] = json!("https://bob:url-secret@llm.example/v1");
    body["custom_field"] = json!({"github_token": "ghp-secret", "note": "keep-too"});
    body["tags"] = json!({"token": "a-tag-not-a-secret"});
    let text = serde_json::to_vec(&body).unwrap_or_default();
    let slow = validate_conversation(body).map(|valid| valid.record.to_string());
    let fast = validate_body(&text).map(|(record, _)| record.get().to_owned());
    assert!(fast.is_some(), "the fast path accepted it");
    for record in [slow.ok(), fast] {
        let record = record.unwrap_or_default();
        for secret in ["hdr-secret", "url-secret", "ghp-secret", "sk-secret"] {
            assert!(!record.contains(secret), "{secret} in {record}");
        }
        for kept in [
            "keep-me",
            "keep-too",
            "a-tag-not-a-secret",
            "bob:***@llm.example",
        ] {
            assert!(record.contains(kept), "{kept} lost from {record}");
        }
    }
}

/// The first error of `body` edited by `edit`: its type and location (`"ok"` when
/// accepted), on the `Value` path; the fast path must agree on acceptance.
fn verdict(edit: impl FnOnce(&mut Value)) -> (String, String) {
    let mut body = minimal();
    edit(&mut body);
    let fast = validate_body(&serde_json::to_vec(&body).unwrap_or_default()).is_some();
    match validate_conversation(body) {
        Ok(_) => ("ok".into(), String::new()),
        Err(errors) => {
            assert!(!fast, "the fast path accepted what the Value path refused");
            let loc: Vec<String> = errors[0]
                .loc
                .iter()
                .map(|item| match item {
                    LocItem::Key(key) => key.clone(),
                    LocItem::Index(i) => i.to_string(),
                })
                .collect();
            (errors[0].error_type.to_owned(), loc.join("."))
        }
    }
}

/// Issue 14, item 2: the SDK's validators that its JSON schema does not show, each
/// on both sides (the differential corpus holds them against the real models too).
#[test]
fn the_sdk_validators_the_schema_hides() {
    type Edit = Box<dyn FnOnce(&mut Value)>;
    let cases: Vec<(&str, Edit, (&str, &str))> = vec![
        (
            "tool name blank",
            Box::new(|b| b["agent"]["tools"] = json!([{"name": " \u{1f}"}])),
            ("value_error", "agent.tools.0.name"),
        ),
        (
            "tool name set",
            Box::new(|b| b["agent"]["tools"] = json!([{"name": "TerminalTool"}])),
            ("ok", ""),
        ),
        (
            "tool params null",
            Box::new(|b| b["agent"]["tools"] = json!([{"name": "T", "params": null}])),
            ("ok", ""),
        ),
        (
            "client tool not an object schema",
            Box::new(|b| {
                b["client_tools"] =
                    json!([{"name": "t", "description": "d", "parameters": {"type": "array"}}])
            }),
            ("value_error", "client_tools.0.parameters"),
        ),
        (
            "client tool object schema",
            Box::new(|b| {
                b["client_tools"] =
                    json!([{"name": "t", "description": "d", "parameters": {"type": "object"}}])
            }),
            ("ok", ""),
        ),
        (
            "grayswan thresholds reversed",
            Box::new(|b| {
                b["security_analyzer"] = json!({"kind": "GraySwanAnalyzer", "low_threshold": "1e3"})
            }),
            ("value_error", "security_analyzer"),
        ),
        (
            "grayswan thresholds ordered",
            Box::new(|b| {
                b["security_analyzer"] = json!({"kind": "GraySwanAnalyzer", "low_threshold": 0.1})
            }),
            ("ok", ""),
        ),
        (
            "condenser keeps no tail",
            Box::new(
                |b| b["agent"]["condenser"] = json!({"kind": "LLMSummarizingCondenser", "llm": {"model": "m"}, "max_size": 10, "keep_first": 4}),
            ),
            ("value_error", "agent.condenser"),
        ),
        (
            "condenser keeps a tail",
            Box::new(
                |b| b["agent"]["condenser"] = json!({"kind": "LLMSummarizingCondenser", "llm": {"model": "m"}, "max_size": 10, "keep_first": 3}),
            ),
            ("ok", ""),
        ),
        (
            "command hook without command",
            Box::new(|b| b["hook_config"] = json!({"stop": [{"hooks": [{"timeout": 5}]}]})),
            ("value_error", "hook_config.stop.0.hooks.0"),
        ),
        (
            "prompt hook with its prompt",
            Box::new(|b| {
                b["hook_config"] = json!({"stop": [{"hooks": [{"type": "prompt", "prompt": "p"}]}]})
            }),
            ("ok", ""),
        ),
        (
            "agent hook with a command",
            Box::new(|b| {
                b["hook_config"] = json!({"stop": [{"hooks": [{"type": "agent", "command": "x"}]}]})
            }),
            ("value_error", "hook_config.stop.0.hooks.0"),
        ),
        (
            "agent hook async",
            Box::new(|b| {
                b["hook_config"] = json!({"stop": [{"hooks": [{"type": "agent", "async": true}]}]})
            }),
            ("value_error", "hook_config.stop.0.hooks.0"),
        ),
        (
            "security policy file null",
            Box::new(|b| b["agent"]["security_policy_filename"] = json!(null)),
            ("ok", ""),
        ),
        (
            "allowed tools as a string",
            Box::new(|b| {
                b["agent"]["agent_context"] =
                    json!({"skills": [{"name": "s", "content": "c", "allowed_tools": "a b"}]})
            }),
            ("ok", ""),
        ),
        (
            "warn_if_unset is a tuple",
            Box::new(|b| {
                b["agent"] = json!({"kind": "ACPAgent", "acp_command": ["acp"],
                    "acp_file_secrets": [{"secret_name": "s", "filename": "f", "env_var": "E", "subdir": "d", "warn_if_unset": "x"}]})
            }),
            ("tuple_type", "agent.acp_file_secrets.0.warn_if_unset"),
        ),
        (
            "float with underscores",
            Box::new(|b| b["agent"]["llm"]["temperature"] = json!("1_0.5")),
            ("ok", ""),
        ),
        (
            "float with a doubled underscore",
            Box::new(|b| b["agent"]["llm"]["temperature"] = json!("1__0")),
            ("float_parsing", "agent.llm.temperature"),
        ),
        (
            "risk threshold UNKNOWN",
            Box::new(|b| {
                b["confirmation_policy"] = json!({"kind": "ConfirmRisky", "threshold": "UNKNOWN"})
            }),
            ("value_error", "confirmation_policy.threshold"),
        ),
        (
            "skill metadata values become strings",
            Box::new(|b| {
                b["agent"]["agent_context"] =
                    json!({"skills": [{"name": "s", "content": "c", "metadata": {"a": 1}}]})
            }),
            ("ok", ""),
        ),
        (
            "a float timestamp",
            Box::new(|b| b["created_at"] = json!(1e-7)),
            ("ok", ""),
        ),
        (
            "a pattern Python cannot compile",
            Box::new(|b| {
                b["security_analyzer"] = json!({"kind": "PatternSecurityAnalyzer",
                    "high_patterns": [["rm -rf", "d", "a"], ["(", "d", "b"]]})
            }),
            ("value_error", "security_analyzer.high_patterns"),
        ),
        (
            "a null critic key",
            Box::new(|b| b["agent"]["critic"] = json!({"kind": "APIBasedCritic", "api_key": null})),
            ("ok", ""),
        ),
        (
            "a falsy critic key is None",
            Box::new(|b| b["agent"]["critic"] = json!({"kind": "APIBasedCritic", "api_key": []})),
            ("ok", ""),
        ),
        (
            "a remote MCP server without its URL",
            Box::new(|b| {
                b["agent"]["mcp_config"] = json!({"r": {"transport": "sse", "url": null}})
            }),
            ("value_error", "agent.mcp_config.r"),
        ),
        (
            "MCP auth beside an Authorization header",
            Box::new(|b| {
                b["agent"]["mcp_config"] = json!({"r": {"url": "https://m.example",
                    "headers": {"authorization": "Bearer x"},
                    "auth": {"strategy": "bearer", "value": "y"}}})
            }),
            ("value_error", "agent.mcp_config.r"),
        ),
    ];
    for (what, edit, expected) in cases {
        let (kind, loc) = verdict(edit);
        assert_eq!((kind.as_str(), loc.as_str()), expected, "{what}");
    }
}

/// `LLM._coerce_inputs` fills in an Azure model's API version and drops OpenAI's own
/// base URL (LiteLLM's default has its `/v1`): the record holds what the model does,
/// on either path.
#[test]
fn the_llm_defaults_its_model_fills_in_are_stored() {
    let mut body = minimal();
    body["agent"]["llm"]["model"] = json!("azure/gpt-4o");
    let text = serde_json::to_vec(&body).unwrap_or_default();
    assert!(validate_body(&text).is_none(), "left to the Value path");
    let record = validate_conversation(body).map(|valid| valid.record);
    let record = record.unwrap_or_default();
    assert_eq!(
        record["agent"]["llm"]["api_version"],
        json!("2024-12-01-preview")
    );

    let mut body = minimal();
    body["agent"]["llm"]["model"] = json!("openai/gpt-4o");
    body["agent"]["llm"]["base_url"] = json!("https://api.openai.com/");
    let record = validate_conversation(body).map(|valid| valid.record);
    assert_eq!(
        record.unwrap_or_default()["agent"]["llm"]["base_url"],
        json!(null)
    );
}

/// Where 1.34.0 would crash (a kind union given a non-object: its mixin pops `kind`),
/// the first error is 1.58.2's, although 1.34.0's models see another one earlier (a
/// kind only 1.58.2 has).
#[test]
fn where_the_reference_crashes_the_newer_release_answers() {
    let (kind, loc) = verdict(|b| {
        b["security_analyzer"] =
            json!({"kind": "ToolShieldLLMSecurityAnalyzer", "llm": {"model": "m"}});
        b["agent"]["critic"] = json!("x");
    });
    assert_eq!(
        (kind.as_str(), loc.as_str()),
        ("model_type", "agent.critic")
    );
}

#[test]
fn missing_error_input_is_redacted() {
    let mut body = minimal();
    if let Some(obj) = body.as_object_mut() {
        obj.remove("id");
    }
    let errors = validate_conversation(body).err().unwrap_or_default();
    assert_eq!(errors[0].error_type, "missing");
    assert_eq!(errors[0].input["agent"]["llm"]["api_key"], json!(REDACTED));
}

#[test]
fn early_stops_still_redact() {
    let mut body = minimal();
    body["agent"]["llm"]["model"] = json!("");
    body["workspace"] =
        json!({"kind": "Nope", "host": "h", "working_dir": "/", "api_key": "ws-key"});
    let errors = validate_conversation(body).err().unwrap_or_default();
    let text = serde_json::to_string(&errors).unwrap_or_default();
    assert!(
        !text.contains("sk-secret") && !text.contains("ws-key"),
        "{text}"
    );
}

#[test]
fn tag_rule() {
    assert_eq!(
        validate_tags(&json!({"abc\n": "x", "a1": ""})).map(|t| t.len()),
        Ok(2)
    );
    assert_eq!(validate_tags(&json!(null)).map(|t| t.len()), Ok(0));
    let e = validate_tags(&json!({"my-tag": "x"}))
        .err()
        .unwrap_or_default();
    assert_eq!(
        (e[0].error_type, e[0].loc.clone()),
        ("value_error", vec![LocItem::Key("tags".into())])
    );
    let e = validate_tags(&json!({"k": 5})).err().unwrap_or_default();
    assert_eq!(e[0].error_type, "string_type");
    assert_eq!(
        e[0].loc,
        vec![LocItem::Key("tags".into()), LocItem::Key("k".into())]
    );
    let e = validate_tags(&json!(["a"])).err().unwrap_or_default();
    assert_eq!(e[0].error_type, "dict_type");
    let long = "a".repeat(257);
    assert!(validate_tags(&json!({ "k": long })).is_err());
}
