//! The ConversationInfo components against small schemas shaped as the models' are.

use serde_json::{Value, json};

/// What the models' validators refuse is in the document, for both releases' models.
#[test]
fn validators_the_schema_can_say_are_in_the_document() {
    let llm = json!({"properties": {"max_input_tokens": {
        "anyOf": [{"minimum": 1, "type": "integer"}, {"type": "null"}]}}});
    let server = json!({"properties": {"transport": {}, "command": {}, "url": {}}});
    let schema = json!({
        "anyOf": [{"$ref": "#/$defs/ConversationInfo_1_58"}],
        "$defs": {
            "ConversationInfo_1_58": {"properties": {"tags": {"type": "object"}}},
            "SecurityRisk": {"enum": ["UNKNOWN", "LOW", "MEDIUM", "HIGH"]},
            "ConfirmRisky": {"properties": {"threshold": {"$ref": "#/$defs/SecurityRisk"}}},
            "LLM": llm, "LLM_1_34": llm, "MCPServer": server, "MCPServer_1_34": server,
        },
    });
    let schemas = &Value::Object(super::components(&schema));
    assert_eq!(
        schemas["ConfirmRisky"]["properties"]["threshold"]["enum"],
        json!(["LOW", "MEDIUM", "HIGH"])
    );
    for llm in ["LLM", "LLM_1_34"] {
        assert_eq!(
            schemas[llm]["properties"]["max_input_tokens"]["anyOf"][0]["minimum"],
            16_384
        );
    }
    for server in ["MCPServer", "MCPServer_1_34"] {
        let rules = &schemas[server]["allOf"];
        assert_eq!(
            rules[0]["if"]["properties"]["transport"],
            json!({"const": "stdio"})
        );
        assert_eq!(rules[0]["then"]["required"], json!(["command"]));
        assert_eq!(rules[1]["then"]["required"], json!(["url"]));
    }
    let tags = &schemas["ConversationInfo_1_58"]["properties"]["tags"];
    assert_eq!(tags["propertyNames"]["pattern"], "^[a-z0-9]+\\n?$");
    assert_eq!(tags["additionalProperties"]["maxLength"], 256);
}

/// A variant of a discriminated union requires its tag (`kind`, `type`), wherever the
/// union sits, and the mapping is keyed by the tags, as the models judge them.
#[test]
fn union_variants_require_their_kind() {
    let schema = json!({
        "type": "object",
        "properties": {
            "workspace": {"$ref": "#/$defs/BaseWorkspace"},
            // A union inside a property, beside null (the skills' trigger).
            "trigger": {"anyOf": [
                {
                    "discriminator": {
                        "propertyName": "type",
                        "mapping": {"keyword": "#/$defs/KeywordTrigger"}
                    },
                    "oneOf": [{"$ref": "#/$defs/KeywordTrigger"}]
                },
                {"type": "null"}
            ]}
        },
        "$defs": {
            "BaseWorkspace": {
                "discriminator": {
                    "propertyName": "kind",
                    "mapping": {"pkg__Local-Input__1": "#/$defs/LocalWorkspace"}
                },
                "oneOf": [{"$ref": "#/$defs/LocalWorkspace"}]
            },
            "LocalWorkspace": {
                "type": "object",
                "properties": {"kind": {"const": "LocalWorkspace"}, "working_dir": {}},
                "required": ["working_dir"]
            },
            "KeywordTrigger": {
                "type": "object",
                "properties": {"type": {"const": "keyword", "default": "keyword"}},
                "required": ["keywords"]
            }
        }
    });
    let schemas = &Value::Object(super::components(&schema));
    assert_eq!(
        schemas["BaseWorkspace"]["discriminator"]["mapping"],
        json!({"LocalWorkspace": "#/components/schemas/LocalWorkspace"})
    );
    assert_eq!(
        schemas["LocalWorkspace"]["required"],
        json!(["working_dir", "kind"])
    );
    assert_eq!(
        schemas["KeywordTrigger"]["required"],
        json!(["keywords", "type"])
    );
}

/// Secrets come back redacted in every read: no schema says they never do.
#[test]
fn secrets_are_not_write_only() {
    let secret = json!({"type": "string", "format": "password", "writeOnly": true});
    let schema = json!({
        "properties": {"key": secret},
        "$defs": {"LLM": {"properties": {"api_key": {"anyOf": [secret, {"type": "null"}]}}}},
    });
    let text = Value::Object(super::components(&schema)).to_string();
    assert!(!text.contains("writeOnly"));
    assert!(text.contains(r#""format":"password""#));
}

/// A tool name's non-blank pattern agrees with Python's `str.isspace` on every
/// character up to U+FFFF (all of Unicode's whitespace is below U+3001).
#[test]
fn a_non_blank_name_is_one_python_does_not_strip_away() {
    let pattern = fancy_regex::Regex::new(super::validators::PYTHON_NON_SPACE).unwrap();
    let python_space = |c: char| c.is_whitespace() || ('\x1c'..='\x1f').contains(&c);
    for c in (0..=0xffff).filter_map(char::from_u32) {
        let text = c.to_string();
        assert_eq!(
            pattern.is_match(&text).unwrap(),
            !python_space(c),
            "U+{:04X}",
            u32::from(c)
        );
    }
}

#[test]
fn coerced_fields_widen_to_json_schemas() {
    for (model, field, also) in super::coerced::COERCED_FIELDS {
        for text in also.unwrap_or_default() {
            let schema: Value = serde_json::from_str(text)
                .unwrap_or_else(|err| panic!("{model}.{field}: {text}: {err}"));
            assert!(schema.is_object(), "{model}.{field}: {text}");
        }
    }
}

/// The pattern analyzer's patterns are documented as regexes, in both releases.
#[test]
fn analyzer_patterns_are_regexes() {
    let entries = json!({"type": "array", "items": {"type": "array",
        "prefixItems": [{"type": "string"}, {"type": "string"}, {"type": "string"}]}});
    let analyzer = json!({"properties": {"high_patterns": entries,
        "injection_medium_patterns": entries}});
    let schema = json!({"$defs": {
        "PatternSecurityAnalyzer": analyzer,
        "PatternSecurityAnalyzer_1_34": analyzer,
    }});
    let schemas = Value::Object(super::components(&schema));
    for name in ["PatternSecurityAnalyzer", "PatternSecurityAnalyzer_1_34"] {
        let properties = &schemas[name]["properties"];
        for field in ["high_patterns", "injection_medium_patterns"] {
            assert_eq!(
                properties[field]["items"]["prefixItems"][0]["format"], "regex",
                "{name}.{field}"
            );
            assert!(properties[field]["items"]["prefixItems"][1]["format"].is_null());
        }
    }
}
