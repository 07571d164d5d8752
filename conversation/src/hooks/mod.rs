//! What the JSON Schema cannot say: the reference's Python validators, the secrets its
//! schema leaves unmarked, and the Python names its error messages quote. Every entry is
//! keyed by `$defs` name (and property), so the schema stays the single source of shapes.
//!
//! This module only names the hooks and says where they stand, which is all the schema
//! compiler asks; running them is `before` (the `mode="before"` validators) and `after`
//! (field and model validators), with Python's renderings of values in `python`.

pub(crate) mod after;
pub(crate) mod before;
pub(crate) mod python;

use serde_json::Value;

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
