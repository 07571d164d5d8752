//! The ConversationInfo schemas as the document's components: the real models' JSON Schema
//! (the runtime API owns the models and gives it), relinked to `#/components/schemas/`,
//! with what the models' own validators refuse or coerce that their schema does not say,
//! so the document describes what the service validates.

use serde_json::{Map, Value, json};

/// `schema`'s `$defs`, and `schema` itself as `ConversationInfo`, as components.
pub(crate) fn schemas(conversation_schema: &Value) -> Map<String, Value> {
    let relinked: Value = serde_json::from_str(
        &conversation_schema
            .to_string()
            .replace("#/$defs/", "#/components/schemas/"),
    )
    .unwrap_or(Value::Null);
    let mut schemas = Map::new();
    if let Value::Object(mut root) = relinked {
        if let Some(Value::Object(defs)) = root.remove("$defs") {
            schemas.extend(defs);
        }
        schemas.insert("ConversationInfo".into(), Value::Object(root));
    }
    require_discriminators(&mut schemas);
    schemas.values_mut().for_each(returned_redacted);
    require_validated_fields(&mut schemas);
    constrain_validated_values(&mut schemas);
    widen_coerced_fields(&mut schemas);
    schemas
}

/// The models mark their secrets `writeOnly` (never in a response); Sandgate's records
/// return them redacted (`**********`), so a read's answer holds them and the document
/// says so: `format: password` stays, `writeOnly` goes.
fn returned_redacted(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            map.remove("writeOnly");
            map.values_mut().for_each(returned_redacted);
        }
        Value::Array(items) => items.iter_mut().for_each(returned_redacted),
        _ => {}
    }
}

/// Fields the models' own validators demand although their schema gives them a default:
/// the model, its field, and that a value must be non-empty.
const VALIDATED_FIELDS: [(&str, &str); 1] = [
    // `LLM`'s before-validator: "model must be specified in LLM" when absent or empty.
    ("LLM", "model"),
];

/// A character that is not Python's whitespace (`str.isspace`, which `str.strip` strips).
const PYTHON_NON_SPACE: &str =
    "[^\\t-\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]";

/// The names a model of the agent-server's has in the document: its own, and 1.34's where
/// that release's differs (`{name}_1_34`).
fn both_releases(model: &str) -> [String; 2] {
    [model.to_owned(), format!("{model}_1_34")]
}

/// Each of [`VALIDATED_FIELDS`] required, and non-empty, in both releases' models.
fn require_validated_fields(schemas: &mut Map<String, Value>) {
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
fn constrain_validated_values(schemas: &mut Map<String, Value>) {
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

/// What the models' before-validators (`runtime-api/src/model/hooks.rs`, `BeforeHook`)
/// take and turn into what the field's schema says: the field's schema, with what they
/// also take beside it (`None`: any value), for both releases' models. Without it the
/// document would call bodies invalid that the models (and the service) accept.
const COERCED_FIELDS: [(&str, &str, Option<&[&str]>); 9] = [
    // `LocalWorkspace.__init__`: `str(working_dir)`.
    ("LocalWorkspace", "working_dir", None),
    // `Agent._add_security_prompt_as_default`: anything but a dict becomes `{}`.
    ("Agent", "system_prompt_kwargs", None),
    // `Tool.validate_params`: `None` is `{}`.
    ("Tool", "params", Some(&[r#"{"type": "null"}"#])),
    // `AgentBase._validate_system_prompt_fields` (1.34.0): `None` is `""`.
    (
        "Agent",
        "security_policy_filename",
        Some(&[r#"{"type": "null"}"#]),
    ),
    (
        "ACPAgent",
        "security_policy_filename",
        Some(&[r#"{"type": "null"}"#]),
    ),
    // `Skill._parse_allowed_tools`: a string is split on whitespace, a list's items become
    // strings; `Skill._convert_metadata_values`: a dict's values become strings.
    (
        "Skill",
        "allowed_tools",
        Some(&[r#"{"type": "string"}"#, r#"{"type": "array"}"#]),
    ),
    ("Skill", "metadata", Some(&[r#"{"type": "object"}"#])),
    // `validate_secret`: a falsy value is `None`, and kept so.
    ("APIBasedCritic", "api_key", Some(FALSY)),
    ("ACPAgent", "acp_resume_session_id", Some(FALSY)),
];

/// Python's falsy JSON values but `""` (a string already): each is `None` to
/// `validate_secret`.
const FALSY: &[&str] = &[
    r#"{"type": "null"}"#,
    r#"{"const": false}"#,
    r#"{"const": 0}"#,
    r#"{"type": "array", "maxItems": 0}"#,
    r#"{"type": "object", "maxProperties": 0}"#,
];

/// The annotations of a field's schema, kept at its top when it is widened.
const ANNOTATIONS: [&str; 4] = ["title", "description", "default", "examples"];

fn widen_coerced_fields(schemas: &mut Map<String, Value>) {
    for (model, field, also) in COERCED_FIELDS {
        for name in both_releases(model) {
            let Some(Value::Object(schema)) = schemas
                .get_mut(&name)
                .and_then(|model| model.pointer_mut(&format!("/properties/{field}")))
            else {
                continue;
            };
            let annotations: Map<String, Value> = ANNOTATIONS
                .iter()
                .filter_map(|key| Some(((*key).to_owned(), schema.get(*key)?.clone())))
                .collect();
            let widened = also.map(|also| {
                let original = schema
                    .iter()
                    .filter(|(key, _)| !ANNOTATIONS.contains(&key.as_str()))
                    .map(|(key, value)| (key.clone(), value.clone()))
                    .collect();
                let alternatives = std::iter::once(Value::Object(original)).chain(
                    // Each is JSON (`tests::coerced_fields_widen_to_json_schemas`).
                    also.iter()
                        .filter_map(|text| serde_json::from_str(text).ok()),
                );
                ("anyOf".to_owned(), alternatives.collect())
            });
            *schema = annotations.into_iter().chain(widened).collect();
        }
    }
}

/// The models' unions as the models judge them: pydantic's schema maps each variant under
/// a generated name and leaves the discriminator (`kind`, `type`) optional in the
/// variants, while the models refuse a variant without it. Each union's mapping becomes
/// discriminator value → variant, and each variant requires its discriminator.
fn require_discriminators(schemas: &mut Map<String, Value>) {
    let snapshot = schemas.clone();
    // A variant's value of its union's discriminator.
    let tag = |variant: &str, property: &str| {
        snapshot
            .get(variant)?
            .get("properties")?
            .get(property)?
            .get("const")?
            .as_str()
            .map(str::to_owned)
    };
    let mut variants = Vec::new();
    for schema in schemas.values_mut() {
        remap_unions(schema, &tag, &mut variants);
    }
    for (name, property) in variants {
        let Some(Value::Object(variant)) = schemas.get_mut(&name) else {
            continue;
        };
        let required = variant
            .entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(required) = required
            && !required.iter().any(|field| field == property.as_str())
        {
            required.push(Value::from(property));
        }
    }
}

/// Every discriminated union in `schema`, however deep (a union may sit in a property, or
/// in an `anyOf` with null): its mapping keyed by the variants' tags, and each variant
/// that has a tag collected as (variant, discriminator).
fn remap_unions(
    schema: &mut Value,
    tag: &impl Fn(&str, &str) -> Option<String>,
    variants: &mut Vec<(String, String)>,
) {
    match schema {
        Value::Object(object) => {
            if let Some(Value::Object(discriminator)) = object.get_mut("discriminator")
                && let Some(property) = discriminator
                    .get("propertyName")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            {
                let mut mapping = Map::new();
                for (key, reference) in discriminator
                    .get("mapping")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                {
                    let name = reference.as_str().and_then(|r| r.rsplit('/').next());
                    match name.and_then(|name| Some((name, tag(name, &property)?))) {
                        Some((name, value)) => {
                            variants.push((name.to_owned(), property.clone()));
                            mapping.insert(value, reference.clone());
                        }
                        None => {
                            mapping.insert(key.clone(), reference.clone());
                        }
                    }
                }
                discriminator.insert("mapping".into(), Value::Object(mapping));
            }
            for value in object.values_mut() {
                remap_unions(value, tag, variants);
            }
        }
        Value::Array(items) => {
            for item in items {
                remap_unions(item, tag, variants);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;
