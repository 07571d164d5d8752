//! Redaction of credential-shaped values in free-form JSON: agent-server events carry agent
//! and LLM configurations, secret registries, MCP settings and tool arguments, in shapes no
//! schema of ours pins down, so what is redacted is decided by the shape of the data:
//!
//! - a string (or list of strings) under a credential-named key: `api_key`, `password`,
//!   `secret`, `token`, `authorization`, `cookie`, `private_key`, `session_api_key(s)`,
//!   `acp_resume_session_id`, and any key ending in `_api_key`, `_secret`, `_secret_key`,
//!   `_access_key`, `_password`, `_private_key` or `_token` (numbers are left alone:
//!   `per_turn_token` is a count);
//! - the `value` of every entry of a `secret_sources` registry;
//! - a credential-named header (`authorization`, `cookie`, `x-api-key`, `*-token`,
//!   `*-key`, `*secret*`) in a `headers`, `extra_headers`, `custom_headers` or
//!   `default_headers` map;
//! - the password of a URL's userinfo (`https://user:pass@host` → `https://user:***@host`)
//!   in any string;
//! - the same rules inside a tool call's `arguments`, a JSON object sent as a string.

use serde_json::{Map, Value};

use crate::model::REDACTED;

/// Header maps whose credential-named entries are redacted.
const HEADER_MAPS: [&str; 4] = [
    "headers",
    "extra_headers",
    "custom_headers",
    "default_headers",
];

fn normalized(key: &str) -> String {
    key.to_ascii_lowercase().replace('-', "_")
}

/// Whether a field of this name holds a credential.
pub fn is_credential_key(key: &str) -> bool {
    let key = normalized(key);
    matches!(
        key.as_str(),
        "api_key"
            | "apikey"
            | "password"
            | "passwd"
            | "secret"
            | "token"
            | "authorization"
            | "proxy_authorization"
            | "cookie"
            | "set_cookie"
            | "private_key"
            | "session_api_key"
            | "session_api_keys"
            | "acp_resume_session_id"
    ) || [
        "_api_key",
        "_secret",
        "_secret_key",
        "_access_key",
        "_password",
        "_token",
        "_private_key",
    ]
    .iter()
    .any(|suffix| key.ends_with(suffix))
}

/// Whether a header of this name carries a credential.
fn is_credential_header(name: &str) -> bool {
    let name = normalized(name);
    is_credential_key(&name) || name.ends_with("_key") || name.contains("secret")
}

/// Redacts every credential-shaped value in `value`, in place (see the module docs).
pub fn redact(value: &mut Value) {
    match value {
        Value::Object(object) => redact_object(object),
        Value::Array(items) => items.iter_mut().for_each(redact),
        Value::String(text) => redact_url_password(text),
        _ => {}
    }
}

fn redact_object(object: &mut Map<String, Value>) {
    for (key, value) in object.iter_mut() {
        if is_credential_key(key) {
            blank(value);
        } else if key == "secret_sources"
            && let Value::Object(sources) = value
        {
            for source in sources.values_mut() {
                if let Value::Object(source) = source
                    && let Some(secret) = source.get_mut("value")
                {
                    blank(secret);
                }
                redact(source);
            }
        } else if HEADER_MAPS.contains(&key.as_str())
            && let Value::Object(headers) = value
        {
            for (name, header) in headers.iter_mut() {
                if is_credential_header(name) {
                    blank(header);
                } else {
                    redact(header);
                }
            }
        } else if key == "arguments"
            && let Value::String(arguments) = value
        {
            redact_json_text(arguments);
        } else {
            redact(value);
        }
    }
}

/// Replaces a credential: a string, or every string of a list. Other values (a count, a
/// flag, null) say nothing secret and stay.
fn blank(value: &mut Value) {
    match value {
        Value::String(text) if !text.is_empty() => *text = REDACTED.to_owned(),
        Value::Array(items) => items.iter_mut().for_each(blank),
        Value::Object(_) => redact(value),
        _ => {}
    }
}

/// A tool call's arguments: a JSON object in a string, redacted and written back when it
/// held anything to redact.
fn redact_json_text(text: &mut String) {
    if !text.trim_start().starts_with('{') {
        redact_url_password(text);
        return;
    }
    if let Ok(mut arguments) = serde_json::from_str::<Value>(text) {
        let before = arguments.clone();
        redact(&mut arguments);
        if arguments != before
            && let Ok(rewritten) = serde_json::to_string(&arguments)
        {
            *text = rewritten;
        }
    }
}

/// `scheme://user:password@host…` → `scheme://user:***@host…`, wherever it appears.
fn redact_url_password(text: &mut String) {
    if !text.contains("://") || !text.contains('@') {
        return;
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(scheme_end) = rest.find("://") {
        let authority_start = scheme_end + 3;
        out.push_str(&rest[..authority_start]);
        rest = &rest[authority_start..];
        let authority_end = rest
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace() || c == '"')
            .unwrap_or(rest.len());
        let authority = &rest[..authority_end];
        match authority.rfind('@').and_then(|at| {
            let userinfo = &authority[..at];
            userinfo.find(':').map(|colon| (colon, at))
        }) {
            Some((colon, at)) => {
                out.push_str(&authority[..=colon]);
                out.push_str("***");
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &rest[authority_end..];
    }
    out.push_str(rest);
    *text = out;
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn credentials_are_redacted_by_their_shape() {
        let mut event = json!({
            "kind": "ConversationStateUpdateEvent",
            "value": {
                "agent": {"llm": {
                    "model": "gpt-4o",
                    "api_key": "sk-live-1",
                    "aws_secret_access_key": "aws-2",
                    "base_url": "https://bob:hunter2@llm.example/v1",
                    "extra_headers": {"Authorization": "Bearer t-3", "X-Trace": "keep"},
                    "max_output_tokens": 100,
                }},
                "secret_registry": {"secret_sources": {
                    "GITHUB_TOKEN": {"kind": "StaticSecret", "value": "ghp-4"},
                    "LOOKUP": {"kind": "LookupSecret", "url": "https://vault", "headers": {"X-Vault-Token": "v-5"}},
                }},
                "stats": {"per_turn_token": 12, "session_api_keys": ["k-6"]},
            },
            "tool_call": {"arguments": "{\"command\": \"ls\", \"password\": \"p-7\"}"},
        });
        redact(&mut event);
        let text = event.to_string();
        for secret in [
            "sk-live-1",
            "aws-2",
            "hunter2",
            "t-3",
            "ghp-4",
            "v-5",
            "k-6",
            "p-7",
        ] {
            assert!(!text.contains(secret), "{secret} left in {text}");
        }
        let llm = &event["value"]["agent"]["llm"];
        assert_eq!(llm["api_key"], REDACTED);
        assert_eq!(llm["base_url"], "https://bob:***@llm.example/v1");
        assert_eq!(llm["extra_headers"]["X-Trace"], "keep");
        assert_eq!(llm["max_output_tokens"], 100);
        assert_eq!(event["value"]["stats"]["per_turn_token"], 12);
        assert_eq!(
            event["value"]["secret_registry"]["secret_sources"]["LOOKUP"]["url"],
            "https://vault"
        );
        assert!(text.contains("\\\"command\\\":\\\"ls\\\""), "{text}");
    }

    #[test]
    fn text_without_credentials_is_left_as_it_was() {
        let original = json!({
            "kind": "MessageEvent",
            "llm_message": {"content": [{"type": "text", "text": "see https://example.com/a@b and me@x"}]},
            "tool_call": {"arguments": "{\"command\": \"echo  spaced\"}"},
            "tokens": 3,
        });
        let mut event = original.clone();
        redact(&mut event);
        assert_eq!(event, original);
    }
}
