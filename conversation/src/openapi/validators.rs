//! What the models' validators refuse that their JSON Schema allows, said in the schemas
//! where JSON Schema can say it: fields required although they have a default, values
//! constrained, and rules between fields (`if`/`then`).

use serde_json::{Map, Value, json};

use super::both_releases;

/// Fields the models' own validators demand although their schema gives them a default:
/// the model, its field, and that a value must be non-empty.
const VALIDATED_FIELDS: [(&str, &str); 1] = [
    // `LLM`'s before-validator: "model must be specified in LLM" when absent or empty.
    ("LLM", "model"),
];

/// A character that is not Python's whitespace (`str.isspace`, which `str.strip` strips).
pub(super) const PYTHON_NON_SPACE: &str =
    "[^\\t-\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]";

/// Each of [`VALIDATED_FIELDS`] required, and non-empty, in both releases' models.
pub(super) fn require_validated_fields(schemas: &mut Map<String, Value>) {
    for (model, field) in VALIDATED_FIELDS {
        for name in both_releases(model) {
            let Some(Value::Object(schema)) = schemas.get_mut(&name) else {
                continue;
            };
            if let Some(Value::Object(property)) = schema
                .get_mut("properties")
                .and_then(|properties| properties.get_mut(field))
            {
                property.remove("default");
                property.insert("minLength".into(), Value::from(1));
            }
            let required = schema
                .entry("required")
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(required) = required
                && !required.iter().any(|name| name == field)
            {
                required.push(Value::from(field));
            }
        }
    }
}

/// What field validators refuse that the models' schema allows, where JSON Schema can say
/// it: `ConfirmRisky.threshold` is any `SecurityRisk` but `UNKNOWN` ("Threshold cannot be
/// UNKNOWN"), an LLM's `max_input_tokens` is at least 16,384, an MCP server's transport
/// decides whether it needs a command or a URL, and `tags` keys are lowercase alphanumeric
/// (Python's `$` lets one final newline through) with values of at most 256 characters.
pub(super) fn constrain_validated_values(schemas: &mut Map<String, Value>) {
    for (risk, policy) in both_releases("SecurityRisk")
        .iter()
        .zip(both_releases("ConfirmRisky"))
    {
        // 1.34's policy may differ while the risk levels are shared: then its own are 1.58's.
        let levels = schemas.get(risk).or_else(|| schemas.get("SecurityRisk"));
        let allowed: Vec<Value> = match levels.and_then(|risk| risk.get("enum")) {
            Some(Value::Array(risks)) => risks
                .iter()
                .filter(|risk| *risk != "UNKNOWN")
                .cloned()
                .collect(),
            _ => continue,
        };
        if let Some(threshold) = schemas
            .get_mut(&policy)
            .and_then(|policy| policy.pointer_mut("/properties/threshold"))
        {
            *threshold =
                serde_json::json!({ "type": "string", "enum": allowed, "default": "HIGH" });
        }
    }
    // `LLM._post_init`: a configured context window below the SDK's minimum (16,384) is
    // refused (minimum 1 already rules out 0).
    for llm in both_releases("LLM") {
        if let Some(Value::Array(members)) = schemas
            .get_mut(&llm)
            .and_then(|llm| llm.pointer_mut("/properties/max_input_tokens/anyOf"))
        {
            for member in members.iter_mut() {
                if member.get("type") == Some(&Value::from("integer")) {
                    member["minimum"] = Value::from(16_384);
                }
            }
        }
    }
    // `MCPServer._validate_server`: a stdio server needs a command, a remote one a URL.
    for server in both_releases("MCPServer") {
        if let Some(Value::Object(server)) = schemas.get_mut(&server) {
            let needs = |transports: Value, field: &str| {
                serde_json::json!({
                    "if": {
                        "properties": { "transport": transports },
                        "required": ["transport"],
                    },
                    "then": {
                        "properties": { field: { "type": "string", "minLength": 1 } },
                        "required": [field],
                    },
                })
            };
            server.insert(
                "allOf".into(),
                Value::Array(vec![
                    needs(serde_json::json!({ "const": "stdio" }), "command"),
                    needs(
                        serde_json::json!({ "enum": ["http", "streamable-http", "sse"] }),
                        "url",
                    ),
                ]),
            );
        }
    }
    for info in ["ConversationInfo_1_34", "ConversationInfo_1_58"] {
        if let Some(tags) = schemas
            .get_mut(info)
            .and_then(|info| info.pointer_mut("/properties/tags"))
            .and_then(Value::as_object_mut)
        {
            tags.insert(
                "propertyNames".into(),
                serde_json::json!({ "pattern": "^[a-z0-9]+\\n?$" }),
            );
            tags.insert(
                "additionalProperties".into(),
                serde_json::json!({ "type": "string", "maxLength": 256 }),
            );
        }
    }
    // Field validators: `Tool.validate_name` (not blank), `ClientToolSpec.
    // _validate_object_schema` (an object schema), ToolShield's history window (≥ 1), the
    // pattern analyzer's patterns (each entry's first item compiles as a regex).
    let patterns = [
        "high_patterns",
        "medium_patterns",
        "injection_high_patterns",
        "injection_medium_patterns",
    ]
    .map(|field| {
        (
            "PatternSecurityAnalyzer",
            format!("/properties/{field}/items/prefixItems/0"),
            json!({ "format": "regex" }),
        )
    });
    let constraints = [
        (
            "Tool",
            "/properties/name",
            // Python's whitespace (`str.isspace`), spelled out: regex dialects disagree
            // on `\s` (ECMA-262's has U+FEFF and lacks U+001C–U+001F and U+0085).
            json!({ "pattern": PYTHON_NON_SPACE }),
        ),
        (
            "ClientToolSpec",
            "/properties/parameters",
            json!({ "required": ["type"], "properties": { "type": { "const": "object" } } }),
        ),
        (
            "ToolShieldLLMSecurityAnalyzer",
            "/properties/history_window",
            json!({ "minimum": 1 }),
        ),
    ]
    .map(|(model, pointer, constraint)| (model, pointer.to_owned(), constraint));
    for (model, pointer, constraint) in constraints.into_iter().chain(patterns) {
        for name in both_releases(model) {
            if let (Some(Value::Object(field)), Value::Object(constraint)) = (
                schemas
                    .get_mut(&name)
                    .and_then(|model| model.pointer_mut(&pointer)),
                &constraint,
            ) {
                field.extend(constraint.clone());
            }
        }
    }
    // `HookDefinition._validate_type_fields` (1.34.0's, the looser): a command hook needs
    // its command, a prompt hook its prompt, an agent hook takes no command and no `async`.
    // `MCPServer._validate_server`: `auth` excludes an `Authorization` header.
    let when = |kind: &str, then: Value| {
        json!({
            "if": { "properties": { "type": { "const": kind } } },
            "then": then,
        })
    };
    for hook in both_releases("HookDefinition") {
        if let Some(Value::Object(hook)) = schemas.get_mut(&hook) {
            hook.insert(
                "allOf".into(),
                json!([
                    when("command", json!({ "properties": { "command": { "minLength": 1 } } })),
                    {
                        "if": { "properties": { "type": { "const": "prompt" } }, "required": ["type"] },
                        "then": {
                            "properties": { "prompt": { "type": "string", "minLength": 1 } },
                            "required": ["prompt"],
                        },
                    },
                    {
                        "if": { "properties": { "type": { "const": "agent" } }, "required": ["type"] },
                        "then": { "properties": {
                            "command": { "maxLength": 0 },
                            "async": { "const": false },
                        } },
                    },
                ]),
            );
        }
    }
    for server in both_releases("MCPServer") {
        if let Some(Value::Array(all_of)) = schemas
            .get_mut(&server)
            .and_then(|server| server.get_mut("allOf"))
        {
            all_of.push(json!({
                "if": {
                    "properties": { "auth": { "not": { "type": "null" } } },
                    "required": ["auth", "headers"],
                },
                // A key spelled `Authorization` in any case is refused. (Not as
                // `patternProperties` to `false`: schemathesis cannot draw from that.)
                "then": { "properties": { "headers": { "anyOf": [
                    { "type": "null" },
                    { "propertyNames": { "not": {
                        "pattern": "^[Aa][Uu][Tt][Hh][Oo][Rr][Ii][Zz][Aa][Tt][Ii][Oo][Nn]$"
                    } } },
                ] } } },
            }));
        }
    }
}
