//! What the JSON Schema cannot say: the reference's Python validators, the secrets its
//! schema leaves unmarked, and the Python names its error messages quote. Every entry is
//! keyed by `$defs` name (and property), so the schema stays the single source of shapes.

use serde_json::{Map, Value};

use super::errors::{PendingError, value_error};
use super::scalars::Scalar;
use super::schema::Model;
use super::summary::RecordNode;

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
    /// `Tool.validate_params`: `None` is `{}`.
    NoneIsEmptyDict,
    /// `AgentBase._validate_system_prompt_fields` (1.34.0): a `security_policy_filename`
    /// of `None` is `""`.
    NoneIsEmptyStr,
    /// `Skill._parse_allowed_tools`: a string is split on whitespace, a list's items
    /// become strings (`str(t)`).
    AllowedTools,
    /// `Skill._convert_metadata_values`: a dict's values become strings (`str(val)`).
    StrValues,
    /// `validate_secret` (a critic's `api_key`, an ACP agent's resume session id): an
    /// empty, blank or redacted value, or any falsy one, is `None`, and accepted so.
    Secret,
    /// The MCP credentials' `_validate_optional_secret`: `validate_secret` of a string;
    /// anything else is validated as it is.
    OptionalSecret,
    /// The MCP `_validate_secret_map` (`env`, `headers`): a string entry `validate_secret`
    /// makes `None` is dropped.
    SecretMap,
}

/// Python field validators (`mode="after"`): they see a value the field's type accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldHook {
    /// `Tool.validate_name`: `if not v or not v.strip(): raise ValueError(...)`.
    ToolName,
    /// `ClientToolSpec._validate_object_schema`: `parameters["type"]` must be `"object"`.
    ObjectSchema,
    /// `ToolShieldLLMSecurityAnalyzer._history_window_positive` (1.58.2): at least 1.
    HistoryWindow,
    /// `ConfirmRisky.validate_threshold`: not `UNKNOWN`.
    RiskThreshold,
    /// `PatternSecurityAnalyzer.model_post_init` compiles each pattern (the first of a
    /// `(pattern, description, id)`): one that does not compile crashes the reference
    /// (a 500); here a 422 at the list.
    RegexPatterns,
}

/// Python `mode="after"` model validators: they run only once every field validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterHook {
    /// `system_prompt` and a non-default `system_prompt_filename` are mutually exclusive.
    SystemPromptExclusive,
    /// `MCPServer._validate_server`: a stdio server needs a command, a remote one its URL,
    /// and `auth` excludes an explicit `Authorization` header.
    McpServer,
    /// `LLM._validate_context_window_size` (run by `_post_init`): a `max_input_tokens`
    /// below 16,384 raises `LLMContextWindowTooSmallError`, a 500 of the reference; here
    /// a 422 at the field.
    ContextWindow,
    /// `GraySwanAnalyzer.validate_thresholds`: `low_threshold < medium_threshold`.
    ThresholdsOrdered,
    /// `LLMSummarizingCondenser.validate_keep_first_vs_max_size`: the tail keeps at least
    /// one event (`max_size // 2 - keep_first - 1 > 0`).
    KeepFirstBelowHalf,
    /// `HookDefinition._validate_type_fields`, 1.34.0's rules (1.58.2 refuses more: a
    /// body either release accepts gets through): a command hook needs its command, a
    /// prompt hook its prompt, and an agent hook takes neither a command nor `async`.
    HookTypeFields,
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
        "MCPServer" => Some(AfterHook::McpServer),
        "LLM" => Some(AfterHook::ContextWindow),
        "GraySwanAnalyzer" => Some(AfterHook::ThresholdsOrdered),
        "LLMSummarizingCondenser" => Some(AfterHook::KeepFirstBelowHalf),
        "HookDefinition" => Some(AfterHook::HookTypeFields),
        _ => None,
    }
}

pub(crate) fn field_before_hook(def: &str, prop: &str) -> Option<BeforeHook> {
    match (def, prop) {
        ("ConversationInfo", "tags") => Some(BeforeHook::Tags),
        ("Agent", "system_prompt_kwargs") => Some(BeforeHook::AgentPromptKwargs),
        ("LocalWorkspace", "working_dir") => Some(BeforeHook::WorkingDirStr),
        ("Tool", "params") => Some(BeforeHook::NoneIsEmptyDict),
        ("Agent" | "ACPAgent", "security_policy_filename") => Some(BeforeHook::NoneIsEmptyStr),
        ("Skill", "allowed_tools") => Some(BeforeHook::AllowedTools),
        ("Skill", "metadata") => Some(BeforeHook::StrValues),
        ("APIBasedCritic", "api_key") | ("ACPAgent", "acp_resume_session_id") => {
            Some(BeforeHook::Secret)
        }
        ("MCPApiKeyAuthCredential" | "MCPBearerAuthCredential", "value")
        | ("MCPBasicAuthCredential", "password")
        | ("MCPOAuthAuthentication" | "MCPOAuthClientInfoState", "client_secret")
        | ("MCPOAuthTokenState", "access_token" | "refresh_token") => {
            Some(BeforeHook::OptionalSecret)
        }
        ("MCPServer", "env" | "headers") | ("MCPHeaderAuthCredential", "headers") => {
            Some(BeforeHook::SecretMap)
        }
        _ => None,
    }
}

pub(crate) fn field_after_hook(def: &str, prop: &str) -> Option<FieldHook> {
    match (def, prop) {
        ("Tool", "name") => Some(FieldHook::ToolName),
        ("ClientToolSpec", "parameters") => Some(FieldHook::ObjectSchema),
        ("ToolShieldLLMSecurityAnalyzer", "history_window") => Some(FieldHook::HistoryWindow),
        ("ConfirmRisky", "threshold") => Some(FieldHook::RiskThreshold),
        (
            "PatternSecurityAnalyzer",
            "high_patterns"
            | "medium_patterns"
            | "injection_high_patterns"
            | "injection_medium_patterns",
        ) => Some(FieldHook::RegexPatterns),
        _ => None,
    }
}

/// Fields a model gives a default although its JSON schema lists them as required
/// (`HookDefinition.command` is `""` unless given; the schema says required to keep the
/// REST contract of older releases).
pub(crate) fn model_default(def: &str, prop: &str) -> Option<Value> {
    match (def, prop) {
        ("HookDefinition", "command") => Some(Value::String(String::new())),
        _ => None,
    }
}

/// Python `tuple[T, ...]` fields, which JSON Schema shows as arrays.
pub(crate) fn is_variadic_tuple(def: &str, prop: &str) -> bool {
    matches!((def, prop), ("ACPFileSecretSpec", "warn_if_unset"))
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
            Value::String(s) if super::parse::special(s).is_none() => Before::Continue,
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

/// Runs a model validator over `obj`, an object whose fields all validated; `model`
/// gives the defaults of the fields it lacks. Shared by both walkers: the fast path only
/// asks whether it is `None`.
pub(crate) fn run_after<R: RecordNode>(
    hook: AfterHook,
    model: &Model,
    obj: &R,
) -> Option<PendingError> {
    let text = |key| model.value(obj, key).and_then(scalar_str);
    let number = |key| model.value(obj, key).and_then(scalar_f64);
    match hook {
        AfterHook::SystemPromptExclusive => {
            let prompt_set = model.value(obj, "system_prompt").is_some_and(is_set);
            let custom_file = text("system_prompt_filename") != Some("system_prompt.j2");
            (prompt_set && custom_file).then(|| {
                value_error(
                    "Cannot set both 'system_prompt' and a non-default 'system_prompt_filename'. \
                     Use one or the other.",
                )
            })
        }
        AfterHook::McpServer => {
            let transport = obj.field("transport").and_then(R::text);
            let set = |key| {
                obj.field(key)
                    .and_then(R::text)
                    .is_some_and(|t| !t.is_empty())
            };
            let authorization_header = obj
                .field("auth")
                .is_some_and(|auth| !matches!(auth.scalar(), Scalar::Null))
                && obj.field("headers").and_then(R::keys).is_some_and(|keys| {
                    keys.iter()
                        .any(|key| key.eq_ignore_ascii_case("authorization"))
                });
            let message = match transport {
                Some("stdio") if !set("command") => "stdio MCP servers require 'command'",
                Some("http" | "streamable-http" | "sse") if !set("url") => {
                    "remote MCP servers require 'url'"
                }
                _ if authorization_header => {
                    "'auth' cannot be combined with an explicit top-level 'Authorization' \
                     header; use auth.strategy='header' instead."
                }
                _ => return None,
            };
            Some(value_error(message))
        }
        AfterHook::ContextWindow => {
            let window = context_window_too_small(obj.field("max_input_tokens").map(R::scalar))?;
            let mut e = value_error(&format!(
                "The configured model has a context window of {window} tokens, which is below \
                 the minimum of 16,384 tokens required for OpenHands to function properly."
            ));
            e.push_path(&super::LocItem::Key("max_input_tokens".into()));
            Some(e)
        }
        AfterHook::ThresholdsOrdered => {
            let (low, medium) = (number("low_threshold")?, number("medium_threshold")?);
            (low >= medium).then(|| {
                value_error(&format!(
                    "low_threshold ({}) must be less than medium_threshold ({})",
                    python_float(low),
                    python_float(medium)
                ))
            })
        }
        AfterHook::KeepFirstBelowHalf => {
            let (max_size, keep_first) = (number("max_size")?, number("keep_first")?);
            ((max_size / 2.0).floor() - keep_first - 1.0 <= 0.0).then(|| {
                value_error(
                    "keep_first must be less than max_size // 2 to leave room for condensation",
                )
            })
        }
        AfterHook::HookTypeFields => {
            let command = text("command").is_some_and(|c| !c.is_empty());
            let asynchronous = obj
                .field("async")
                .or_else(|| obj.field("async_"))
                .is_some_and(|a| matches!(a.scalar(), Scalar::Bool(true)));
            let message = match text("type").unwrap_or("command") {
                "command" if !command => "'command' is required when type is 'command'",
                "prompt" if text("prompt").is_none_or(str::is_empty) => {
                    "'prompt' is required when type is 'prompt'"
                }
                "agent" if command => {
                    "'command' must not be set when type is 'agent'; use 'system_prompt' instead"
                }
                "agent" if asynchronous => "'async' is not supported for agent hooks",
                _ => return None,
            };
            Some(value_error(message))
        }
    }
}

/// Runs a field validator over a value its type accepted.
pub(crate) fn run_field<R: RecordNode>(hook: FieldHook, v: &R) -> Option<PendingError> {
    match hook {
        FieldHook::ToolName => {
            let name = v.text()?;
            name.trim_matches(is_python_space)
                .is_empty()
                .then(|| value_error("Tool name cannot be empty"))
        }
        FieldHook::ObjectSchema => {
            let kind = v.field("type").map(R::scalar);
            if kind.and_then(scalar_str) == Some("object") {
                return None;
            }
            let shown = kind.map_or_else(|| "None".to_owned(), python_repr);
            Some(value_error(&format!(
                "ClientToolSpec.parameters must be an object JSON Schema (got type={shown}). \
                 Example: {{\"type\": \"object\", \"properties\": {{...}}}}"
            )))
        }
        FieldHook::RiskThreshold => {
            (v.text() == Some("UNKNOWN")).then(|| value_error("Threshold cannot be UNKNOWN"))
        }
        FieldHook::RegexPatterns => (0..).map_while(|i| v.item(i)).find_map(|entry| {
            let pattern = entry.item(0)?.text()?;
            let fault = fancy_regex::Expr::parse_tree(pattern).err()?;
            Some(value_error(&format!(
                "pattern {pattern:?} does not compile: {fault}"
            )))
        }),
        FieldHook::HistoryWindow => {
            let window = scalar_f64(v.scalar())?;
            (window < 1.0).then(|| {
                value_error(&format!(
                    "history_window must be >= 1, got {}. Use 1 to disable cross-step context.",
                    python_float(window).trim_end_matches(".0")
                ))
            })
        }
    }
}

fn scalar_str(s: Scalar<'_>) -> Option<&str> {
    match s {
        Scalar::String(s) => Some(s),
        _ => None,
    }
}

/// A validated number field's value (NaN and the infinities included).
fn scalar_f64(s: Scalar<'_>) -> Option<f64> {
    match s {
        Scalar::Number(n) => n.as_f64(),
        Scalar::Special { value, .. } => Some(value),
        _ => None,
    }
}

fn is_set(s: Scalar<'_>) -> bool {
    !matches!(s, Scalar::Null)
}

/// Python's `str()` of a float: `0.3`, `1000.0`, `inf`, `nan`.
fn python_float(f: f64) -> String {
    if f.is_nan() {
        "nan".into()
    } else if f.is_infinite() {
        if f > 0.0 { "inf".into() } else { "-inf".into() }
    } else if f.fract() == 0.0 && f.abs() < 1e16 {
        format!("{f:.1}")
    } else {
        f.to_string()
    }
}

/// Python's `repr()` of a scalar, as an error message quotes it.
fn python_repr(s: Scalar<'_>) -> String {
    match s {
        Scalar::Null => "None".into(),
        Scalar::Bool(true) => "True".into(),
        Scalar::Bool(false) => "False".into(),
        Scalar::Number(n) => n.to_string(),
        Scalar::String(s) => format!("'{s}'"),
        Scalar::Special { value, .. } => python_float(value),
        Scalar::Compound => "...".into(),
    }
}

/// Python's `str.isspace()`: Unicode's white space and the four information separators.
pub(crate) fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

/// Python's `str()` of a JSON value (containers as JSON text, near enough for a path).
pub(crate) fn python_str(v: &Value) -> String {
    match v {
        Value::String(s) => match s.strip_prefix(super::parse::SPECIAL) {
            Some("NaN") => "nan".into(),
            Some("Infinity") => "inf".into(),
            Some("-Infinity") => "-inf".into(),
            Some(integer) => integer.into(),
            None => s.clone(),
        },
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        other => other.to_string(),
    }
}

/// What `validate_secret` turns into `None`: an empty, blank or redacted string.
fn is_no_secret(v: &Value) -> bool {
    v.as_str().is_some_and(is_no_secret_str)
}

pub(crate) fn is_no_secret_str(s: &str) -> bool {
    s.trim_matches(is_python_space).is_empty() || s == super::REDACTED
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
