//! The reference's `mode="before"` validators: they see the raw input, and may stop
//! validation, rewrite what is validated, or coerce what is stored.

use serde_json::{Map, Value};

use super::BeforeHook;
use super::python::{is_python_space, python_str};
use crate::errors::LocItem;
use crate::pending::{PendingError, value_error};
use crate::redact::REDACTED;

/// What a before-validator decided.
pub(crate) enum Before {
    /// Validate the input as it is.
    Continue,
    /// Do not validate further: the hook accepted (no errors pushed) or rejected.
    Stop,
    /// Validate this rewritten copy instead (the record keeps the input as received).
    Replace(Value),
    /// The input becomes this value, in the record too (the model coerced it), and is
    /// validated.
    Coerce(Value),
    /// The input becomes this value, in the record too, and is accepted as it is.
    Settle(Value),
}

pub(crate) fn run_before(hook: BeforeHook, v: &Value, errors: &mut Vec<PendingError>) -> Before {
    match hook {
        BeforeHook::LlmModelRequired => llm_model_required(v, errors),
        BeforeHook::HookConfigNormalize => hook_config_normalize(v, errors),
        BeforeHook::Tags => tags_before(v, errors),
        BeforeHook::AgentPromptKwargs => match v {
            Value::Object(_) => Before::Continue,
            _ => Before::Coerce(serde_json::json!({ "llm_security_analyzer": true })),
        },
        BeforeHook::WorkingDirStr => match v {
            Value::String(s) if crate::parse::special(s).is_none() => Before::Continue,
            other => Before::Coerce(Value::String(python_str(other))),
        },
        BeforeHook::NoneIsEmptyDict => match v {
            Value::Null => Before::Coerce(Value::Object(Map::new())),
            _ => Before::Continue,
        },
        BeforeHook::NoneIsEmptyStr => match v {
            Value::Null => Before::Coerce(Value::String(String::new())),
            _ => Before::Continue,
        },
        BeforeHook::AllowedTools => match v {
            Value::String(s) => Before::Coerce(Value::Array(
                s.split(is_python_space)
                    .filter(|tool| !tool.is_empty())
                    .map(|tool| Value::String(tool.to_owned()))
                    .collect(),
            )),
            Value::Array(tools) if !tools.iter().all(Value::is_string) => Before::Coerce(
                Value::Array(tools.iter().map(|t| Value::String(python_str(t))).collect()),
            ),
            // A list of strings is one already; anything else crashes the reference
            // (`SkillValidationError`, a 500): the list's `list_type` answers it.
            _ => Before::Continue,
        },
        BeforeHook::Secret => match v {
            // `None` stays `None`, whatever the field's type says.
            Value::Null => Before::Stop,
            value if !truthy(value) || is_no_secret(value) => Before::Settle(Value::Null),
            _ => Before::Continue,
        },
        BeforeHook::OptionalSecret => match v {
            value if is_no_secret(value) => Before::Coerce(Value::Null),
            _ => Before::Continue,
        },
        BeforeHook::SecretMap => match v {
            Value::Object(map) if map.values().any(is_no_secret) => Before::Coerce(Value::Object(
                map.iter()
                    .filter(|(_, value)| !is_no_secret(value))
                    .map(|(key, value)| (key.clone(), value.clone()))
                    .collect(),
            )),
            _ => Before::Continue,
        },
        BeforeHook::StrValues => match v {
            Value::Object(map) if !map.values().all(Value::is_string) => {
                Before::Coerce(Value::Object(
                    map.iter()
                        .map(|(key, value)| (key.clone(), Value::String(python_str(value))))
                        .collect(),
                ))
            }
            // Anything else but null crashes the reference; the dict's own errors answer.
            _ => Before::Continue,
        },
    }
}

/// What `validate_secret` turns into `None`: an empty, blank or redacted string.
fn is_no_secret(v: &Value) -> bool {
    v.as_str().is_some_and(is_no_secret_str)
}

pub(crate) fn is_no_secret_str(s: &str) -> bool {
    s.trim_matches(is_python_space).is_empty() || s == REDACTED
}

/// Python truthiness of a JSON value.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn llm_model_required(v: &Value, errors: &mut Vec<PendingError>) -> Before {
    let Value::Object(obj) = v else {
        return Before::Continue;
    };
    let Some(model) = obj.get("model").filter(|model| truthy(model)) else {
        errors.push(value_error("model must be specified in LLM"));
        return Before::Stop;
    };
    // A truthy non-string crashed the reference (`.startswith`); field validation
    // answers string_type at `model` instead.
    let Some(model) = model.as_str() else {
        return Before::Continue;
    };
    let api_version_set = obj.get("api_version").is_some_and(truthy);
    let base_url = obj.get("base_url").and_then(Value::as_str);
    match llm_defaults(model, api_version_set, base_url) {
        None => Before::Continue,
        Some(LlmDefault::AzureApiVersion) => {
            let mut coerced = obj.clone();
            coerced.insert("api_version".into(), AZURE_API_VERSION.into());
            Before::Coerce(Value::Object(coerced))
        }
        Some(LlmDefault::OpenAiBaseUrl) => {
            let mut coerced = obj.clone();
            coerced.insert("base_url".into(), Value::Null);
            Before::Coerce(Value::Object(coerced))
        }
    }
}

/// The API version `LLM._coerce_inputs` gives an Azure model that names none.
const AZURE_API_VERSION: &str = "2024-12-01-preview";

/// What `LLM._coerce_inputs` fills in besides requiring a model.
pub(crate) enum LlmDefault {
    /// An `azure…` model without an `api_version` gets [`AZURE_API_VERSION`].
    AzureApiVersion,
    /// An `openai/` model's `base_url` of `https://api.openai.com` becomes `None`.
    OpenAiBaseUrl,
}

pub(crate) fn llm_defaults(
    model: &str,
    api_version_set: bool,
    base_url: Option<&str>,
) -> Option<LlmDefault> {
    if model.starts_with("azure") && !api_version_set {
        Some(LlmDefault::AzureApiVersion)
    } else if model.starts_with("openai/")
        && matches!(
            base_url,
            Some("https://api.openai.com" | "https://api.openai.com/")
        )
    {
        Some(LlmDefault::OpenAiBaseUrl)
    } else {
        None
    }
}

const HOOK_EVENT_FIELDS: [&str; 6] = [
    "post_tool_use",
    "pre_tool_use",
    "session_end",
    "session_start",
    "stop",
    "user_prompt_submit",
];

/// `re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()`
pub(crate) fn pascal_to_snake(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if i > 0 && c.is_ascii_uppercase() {
            out.push('_');
        }
        out.extend(c.to_lowercase());
    }
    out
}

fn hook_config_normalize(v: &Value, errors: &mut Vec<PendingError>) -> Before {
    let Value::Object(outer) = v else {
        return Before::Continue;
    };
    let data = match outer.get("hooks") {
        None => outer,
        Some(Value::Object(inner)) => inner,
        Some(_) => {
            // The reference crashed calling `.items()` on a non-dict wrapper.
            let mut e = PendingError::new("dict_type", "Input should be a valid dictionary", None);
            e.push_path(&LocItem::Key("hooks".into()));
            errors.push(e);
            return Before::Stop;
        }
    };
    let needs_rewrite =
        outer.contains_key("hooks") || data.keys().any(|k| pascal_to_snake(k) != *k);
    if !needs_rewrite {
        return Before::Continue;
    }
    let mut normalized = Map::new();
    for (key, value) in data {
        let snake = pascal_to_snake(key);
        if snake != *key && !HOOK_EVENT_FIELDS.contains(&snake.as_str()) {
            errors.push(value_error(&format!(
                "Unknown event type '{key}'. Valid types: {}",
                HOOK_EVENT_FIELDS.join(", ")
            )));
            return Before::Stop;
        }
        if normalized.contains_key(&snake) {
            errors.push(value_error(&format!(
                "Duplicate hook event: both '{key}' and its snake_case equivalent '{snake}' were provided"
            )));
            return Before::Stop;
        }
        normalized.insert(snake, value.clone());
    }
    Before::Replace(Value::Object(normalized))
}

pub(crate) const TAG_VALUE_MAX_CHARS: usize = 256;

/// Python's `re.match(r"^[a-z0-9]+$", key)`: `$` also matches before one final newline.
pub(crate) fn tag_key_is_valid(key: &str) -> bool {
    let body = key.strip_suffix('\n').unwrap_or(key);
    !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

fn tags_before(v: &Value, errors: &mut Vec<PendingError>) -> Before {
    let obj = match v {
        // `if v is None: return {}`
        Value::Null => return Before::Stop,
        Value::Object(obj) => obj,
        _ => {
            // The reference crashed calling `.items()`; answer what `dict[str, str]` would.
            errors.push(PendingError::new(
                "dict_type",
                "Input should be a valid dictionary",
                None,
            ));
            return Before::Stop;
        }
    };
    for (key, value) in obj {
        if !tag_key_is_valid(key) {
            errors.push(value_error(&format!(
                "Tag key '{key}' is invalid: keys must be lowercase alphanumeric only"
            )));
            return Before::Stop;
        }
        let len = match value {
            Value::String(s) => s.chars().count(),
            Value::Array(a) => a.len(),
            Value::Object(o) => o.len(),
            // `len()` of a number, bool or None crashed the reference; `dict[str, str]`
            // reports string_type at the key instead.
            _ => break,
        };
        if len > TAG_VALUE_MAX_CHARS {
            errors.push(value_error(&format!(
                "Tag value for '{key}' exceeds maximum length of {TAG_VALUE_MAX_CHARS} characters"
            )));
            return Before::Stop;
        }
    }
    Before::Continue
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tag_keys_follow_python_re() {
        assert!(tag_key_is_valid("abc123"));
        assert!(tag_key_is_valid("abc\n"));
        assert!(!tag_key_is_valid("abc\n\n"));
        assert!(!tag_key_is_valid("\n"));
        assert!(!tag_key_is_valid(""));
        assert!(!tag_key_is_valid("my-tag"));
        assert!(!tag_key_is_valid("Abc"));
        assert!(!tag_key_is_valid("a b"));
        assert!(!tag_key_is_valid("é"));
    }

    #[test]
    fn tag_values_count_characters() {
        let mut errors = Vec::new();
        let ok = json!({ "k": "é".repeat(256) });
        assert!(matches!(tags_before(&ok, &mut errors), Before::Continue));
        let long = json!({ "k": "a".repeat(257) });
        assert!(matches!(tags_before(&long, &mut errors), Before::Stop));
        assert_eq!(
            errors[0].msg,
            "Value error, Tag value for 'k' exceeds maximum length of 256 characters"
        );
    }

    #[test]
    fn pascal_case_events() {
        assert_eq!(pascal_to_snake("PreToolUse"), "pre_tool_use");
        assert_eq!(pascal_to_snake("Stop"), "stop");
        assert_eq!(pascal_to_snake("stop"), "stop");
    }

    #[test]
    fn llm_model_truthiness() {
        let mut errors = Vec::new();
        for bad in [
            json!({}),
            json!({"model": ""}),
            json!({"model": null}),
            json!({"model": 0}),
        ] {
            assert!(matches!(
                llm_model_required(&bad, &mut errors),
                Before::Stop
            ));
        }
        assert!(matches!(
            llm_model_required(&json!({"model": 5}), &mut errors),
            Before::Continue
        ));
    }
}
