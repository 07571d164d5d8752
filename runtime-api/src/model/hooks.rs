//! What the JSON Schema cannot say: the reference's Python validators, the secrets its
//! schema leaves unmarked, and the Python names its error messages quote. Every entry is
//! keyed by `$defs` name (and property), so the schema stays the single source of shapes.

use serde_json::{Map, Value};

use super::errors::{PendingError, value_error};
use super::scalars::Scalar;

/// Python `mode="before"` validators: they see the raw input before field validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BeforeHook {
    /// `LLM._coerce_inputs`: `if not d.get("model"): raise ValueError(...)`.
    LlmModelRequired,
    /// `HookConfig._normalize_hooks_input`: unwraps `{"hooks": {...}}`, maps PascalCase
    /// event names to the snake_case fields.
    HookConfigNormalize,
    /// `ConversationInfo.tags` (`BeforeValidator(_validate_tags)`).
    Tags,
    /// `Agent._add_security_prompt_as_default` (a model validator, which only this field
    /// feels): a `system_prompt_kwargs` that is not a dict becomes `{}`, and
    /// `llm_security_analyzer` defaults to true in it.
    AgentPromptKwargs,
    /// `LocalWorkspace.__init__` (which the SDK's discriminated union calls) takes
    /// `str(working_dir)`: any value is a working directory.
    WorkingDirStr,
}

/// Python `mode="after"` model validators: they run only once every field validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterHook {
    /// `system_prompt` and a non-default `system_prompt_filename` are mutually exclusive.
    SystemPromptExclusive,
    /// A stdio MCP server needs a command.
    McpStdioNeedsCommand,
    /// `LLM._validate_context_window_size` (run by `_post_init`): a `max_input_tokens`
    /// below 16,384 raises `LLMContextWindowTooSmallError`, a 500 of the reference; here
    /// a 422 at the field.
    ContextWindow,
}

/// `MIN_CONTEXT_WINDOW_TOKENS` of the SDK.
const MIN_CONTEXT_WINDOW_TOKENS: f64 = 16_384.0;

/// The configured context window when it is below the SDK's minimum (`max_input_tokens or
/// …`: zero and null leave it to the model's metadata, which is not checked here).
pub(crate) fn context_window_too_small(max_input_tokens: Option<Scalar<'_>>) -> Option<f64> {
    let n = match max_input_tokens? {
        Scalar::Number(n) => n.as_f64()?,
        Scalar::Bool(b) => f64::from(u8::from(b)),
        Scalar::String(s) => super::scalars::parse_int_str(s)?,
        Scalar::Special { value, .. } => value,
        Scalar::Null | Scalar::Compound => return None,
    };
    (n != 0.0 && n < MIN_CONTEXT_WINDOW_TOKENS).then_some(n)
}

pub(crate) fn model_before_hook(def: &str) -> Option<BeforeHook> {
    match def {
        "LLM" => Some(BeforeHook::LlmModelRequired),
        "HookConfig" => Some(BeforeHook::HookConfigNormalize),
        _ => None,
    }
}

pub(crate) fn model_after_hook(def: &str) -> Option<AfterHook> {
    match def {
        "Agent" | "ACPAgent" => Some(AfterHook::SystemPromptExclusive),
        "MCPServer" => Some(AfterHook::McpStdioNeedsCommand),
        "LLM" => Some(AfterHook::ContextWindow),
        _ => None,
    }
}

pub(crate) fn field_before_hook(def: &str, prop: &str) -> Option<BeforeHook> {
    match (def, prop) {
        ("ConversationInfo", "tags") => Some(BeforeHook::Tags),
        ("Agent", "system_prompt_kwargs") => Some(BeforeHook::AgentPromptKwargs),
        ("LocalWorkspace", "working_dir") => Some(BeforeHook::WorkingDirStr),
        _ => None,
    }
}

/// The Python name of a field whose schema key is an alias, where the model takes either
/// (`populate_by_name`): `HookDefinition.async_` is `async` in JSON.
pub(crate) fn populated_by_name(def: &str, prop: &str) -> Option<&'static str> {
    match (def, prop) {
        ("HookDefinition", "async") => Some("async_"),
        _ => None,
    }
}

/// Secrets the schema types as plain strings, yet the sender treats as secrets (spec 2.9,
/// design "Conversation webhook"): they are redacted like `format: password` ones.
pub(crate) fn is_unmarked_secret(def: &str, prop: &str) -> bool {
    matches!(
        (def, prop),
        ("RemoteWorkspace", "api_key")
            | ("ACPAgent", "acp_resume_session_id")
            | ("LookupSecret", "headers")
            | ("AgentContext", "secrets")
    )
}

/// The Python qualified name an `Unknown kind` message quotes for a kind union's base.
pub(crate) fn kind_base_qualname(base: &str) -> String {
    let module = match base {
        "AgentBase" => "openhands.sdk.agent.base",
        "BaseWorkspace" => "openhands.sdk.workspace.base",
        "ConfirmationPolicyBase" => "openhands.sdk.security.confirmation_policy",
        "SecurityAnalyzerBase" => "openhands.sdk.security.analyzer",
        "SecretSource" => "openhands.sdk.secret.secrets",
        "CondenserBase" => "openhands.sdk.context.condenser.base",
        "CriticBase" => "openhands.sdk.critic.base",
        _ => "openhands.sdk",
    };
    format!("{module}.{base}")
}

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
            Value::String(_) => Before::Continue,
            other => Before::Coerce(Value::String(python_str(other))),
        },
    }
}

pub(crate) fn run_after(hook: AfterHook, obj: &Map<String, Value>) -> Option<PendingError> {
    match hook {
        AfterHook::SystemPromptExclusive => {
            let prompt_set = obj.get("system_prompt").is_some_and(|p| !p.is_null());
            let custom_file = obj
                .get("system_prompt_filename")
                .is_some_and(|f| f.as_str() != Some("system_prompt.j2"));
            (prompt_set && custom_file).then(|| {
                value_error(
                    "Cannot set both 'system_prompt' and a non-default 'system_prompt_filename'. \
                     Use one or the other.",
                )
            })
        }
        AfterHook::McpStdioNeedsCommand => {
            let stdio = obj.get("transport").and_then(Value::as_str) == Some("stdio");
            let has_command = obj
                .get("command")
                .and_then(Value::as_str)
                .is_some_and(|c| !c.is_empty());
            (stdio && !has_command).then(|| value_error("stdio MCP servers require 'command'"))
        }
        AfterHook::ContextWindow => {
            let window = context_window_too_small(obj.get("max_input_tokens").map(Scalar::from))?;
            let mut e = value_error(&format!(
                "The configured model has a context window of {window} tokens, which is below \
                 the minimum of 16,384 tokens required for OpenHands to function properly."
            ));
            e.push_path(&super::LocItem::Key("max_input_tokens".into()));
            Some(e)
        }
    }
}

/// Python's `str()` of a JSON value (containers as JSON text, near enough for a path).
pub(crate) fn python_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        other => other.to_string(),
    }
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
    if obj.get("model").is_some_and(truthy) {
        // A truthy non-string crashed the reference (`.startswith`); field validation
        // answers string_type at `model` instead.
        return Before::Continue;
    }
    errors.push(value_error("model must be specified in LLM"));
    Before::Stop
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
            e.push_path(&super::LocItem::Key("hooks".into()));
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
