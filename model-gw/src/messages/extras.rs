//! The Messages API request fields beyond the conversation and its tools, on their way to a
//! chat completion: `thinking` and `output_config.effort` become `reasoning_effort` when
//! the entry says its model takes it (`model_info.supports_reasoning`, LiteLLM's key);
//! everything else a chat completion has no place for is dropped, and said so at debug
//! level, so that an operator who wonders where a feature went can find out without the
//! gateway refusing what Claude Code sends on every call.

use serde_json_borrow::Value;

/// The top-level fields the translation in [`super::chat_request`] reads.
const TRANSLATED: &[&str] = &[
    "model",
    "messages",
    "system",
    "max_tokens",
    "temperature",
    "top_p",
    "stop_sequences",
    "tools",
    "tool_choice",
    "stream",
    "metadata",
];

/// Why a field with no chat completion equivalent is left out, for the debug log.
fn why_dropped(field: &str) -> &'static str {
    match field {
        "top_k" => "chat completions have no top_k",
        "thinking" | "output_config" => {
            "the entry's model_info does not say supports_reasoning: the model reasons on its own settings"
        }
        "context_management" => {
            "context editing is Anthropic's server-side feature; the upstream keeps no context"
        }
        "service_tier" => "Anthropic's service tiers are not an OpenAI-compatible upstream's",
        "container" | "mcp_servers" => "server-side tools are not an OpenAI-compatible upstream's",
        _ => "no chat completion equivalent",
    }
}

/// The `reasoning_effort` a request asks for, when `takes_it`: `output_config.effort`
/// first, as it is (`low`, `medium`, `high`; `max` as `high`), else the `thinking` budget
/// as LiteLLM maps it (10k tokens or more `high`, 5k `medium`, less `low`; adaptive
/// thinking without a budget `medium`).
pub fn reasoning_effort(request: &Value, takes_it: bool) -> Option<&'static str> {
    if !takes_it {
        return None;
    }
    let from_effort = match request.get("output_config").get("effort").as_str() {
        Some("low") => Some("low"),
        Some("medium") => Some("medium"),
        Some("high" | "max") => Some("high"),
        _ => None,
    };
    from_effort.or_else(|| {
        let thinking = request.get("thinking");
        match thinking.get("type").as_str() {
            Some("enabled" | "adaptive") => Some(match thinking.get("budget_tokens").as_u64() {
                Some(budget) if budget >= 10_000 => "high",
                Some(budget) if budget >= 5_000 => "medium",
                Some(_) => "low",
                None => "medium",
            }),
            _ => None,
        }
    })
}

/// Logs, at debug level, each top-level field the translation leaves out and why
/// (`reasoned`: `thinking` and `output_config.effort` were translated).
pub fn log_dropped(request: &Value, reasoned: bool) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    for field in dropped(request, reasoned) {
        tracing::debug!(
            field,
            reason = why_dropped(field),
            "a Messages API field is left out of the chat completion"
        );
    }
}

/// The top-level fields of `request` the translation leaves out.
fn dropped<'v>(request: &'v Value<'v>, reasoned: bool) -> Vec<&'v str> {
    let Some(object) = request.as_object() else {
        return Vec::new();
    };
    object
        .iter()
        .map(|(key, _)| key)
        .filter(|key| !TRANSLATED.contains(key))
        .filter(|key| {
            // Translated to `reasoning_effort`: `output_config` only when effort is all it
            // holds.
            let output_effort_only = *key == "output_config"
                && request
                    .get("output_config")
                    .as_object()
                    .is_some_and(|config| config.iter().all(|(name, _)| name == "effort"));
            !(reasoned && (*key == "thinking" || output_effort_only))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Value<'_> {
        serde_json::from_str(text).expect("JSON")
    }

    #[test]
    fn effort_wins_over_the_thinking_budget_and_only_where_the_model_takes_it() {
        let request = parsed(
            r#"{"thinking":{"type":"enabled","budget_tokens":31999},"output_config":{"effort":"low"}}"#,
        );
        assert_eq!(reasoning_effort(&request, true), Some("low"));
        assert_eq!(reasoning_effort(&request, false), None);
        for (budget, effort) in [(31_999, "high"), (6_000, "medium"), (1_024, "low")] {
            let text = format!(r#"{{"thinking":{{"type":"enabled","budget_tokens":{budget}}}}}"#);
            assert_eq!(reasoning_effort(&parsed(&text), true), Some(effort));
        }
        let disabled = parsed(r#"{"thinking":{"type":"disabled"}}"#);
        assert_eq!(reasoning_effort(&disabled, true), None);
    }

    #[test]
    fn claude_codes_recorded_request_translates_with_its_environment_in_place() {
        let path = format!(
            "{}/../tests/fixtures/coding_agents/claude_code_messages_request.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let body = std::fs::read(&path).unwrap_or_else(|err| panic!("{path}: {err}"));
        for count_tokens in [false, true] {
            let translated = super::super::chat_request_for(&body, "up", count_tokens, true)
                .unwrap_or_else(|err| panic!("{err}"));
            let chat: serde_json::Value = serde_json::from_slice(&translated.body).expect("JSON");
            let roles: Vec<&str> = chat["messages"]
                .as_array()
                .expect("messages")
                .iter()
                .filter_map(|message| message["role"].as_str())
                .collect();
            assert_eq!(roles, ["system", "user", "system"]);
            // Its thinking budget, as an effort.
            assert!(
                chat["reasoning_effort"].is_string(),
                "{}",
                chat["reasoning_effort"]
            );
        }
    }

    #[test]
    fn what_claude_code_sends_beyond_the_conversation_is_named_as_dropped() {
        let request = parsed(
            r#"{"model":"m","messages":[],"thinking":{"type":"enabled","budget_tokens":9},"context_management":{"edits":[]},"output_config":{"effort":"high"},"top_k":3}"#,
        );
        assert_eq!(
            dropped(&request, false),
            ["thinking", "context_management", "output_config", "top_k"]
        );
        assert_eq!(dropped(&request, true), ["context_management", "top_k"]);
    }
}
