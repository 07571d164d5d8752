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

use serde_json::Value;

/// How a secret is rendered in a stored record: pydantic `SecretStr`'s rendering.
pub const REDACTED: &str = "**********";

/// Header maps whose credential-named entries are redacted.
const HEADER_MAPS: [&str; 4] = [
    "headers",
    "extra_headers",
    "custom_headers",
    "default_headers",
];

/// Credential field names, lowercase, `_` for `-`.
const CREDENTIAL_NAMES: [&str; 14] = [
    "api_key",
    "apikey",
    "password",
    "passwd",
    "secret",
    "token",
    "authorization",
    "proxy_authorization",
    "cookie",
    "set_cookie",
    "private_key",
    "session_api_key",
    "session_api_keys",
    "acp_resume_session_id",
];

/// Endings of credential field names, as [`CREDENTIAL_NAMES`].
const CREDENTIAL_SUFFIXES: [&str; 7] = [
    "_api_key",
    "_secret",
    "_secret_key",
    "_access_key",
    "_password",
    "_token",
    "_private_key",
];

/// A key's byte as the names above are written: ASCII lowercase, `_` for `-`.
fn folded(byte: u8) -> u8 {
    if byte == b'-' {
        b'_'
    } else {
        byte.to_ascii_lowercase()
    }
}

/// Whether `key` reads `name` in any case, `-` for `_`. Compared in place: every key of
/// every delivery is looked at, and nearly all differ in length or first byte.
fn folds_to(key: &[u8], name: &str) -> bool {
    key.len() == name.len()
        && key
            .iter()
            .zip(name.as_bytes())
            .all(|(&byte, &wanted)| folded(byte) == wanted)
}

/// Whether `key` ends with `suffix` in the sense of [`folds_to`].
fn folds_to_suffix(key: &[u8], suffix: &str) -> bool {
    key.len() >= suffix.len() && folds_to(&key[key.len() - suffix.len()..], suffix)
}

/// What every credential name and ending has in common, for the quick refusals of
/// [`is_credential_key`]: every key of every delivery is looked at, and most are told
/// apart by these alone (`id`, `kind`, `url`, `model`, `timestamp`). Derived from the
/// lists, so that they stay the only place to edit.
struct Quick {
    /// The length of the shortest.
    shortest: usize,
    /// The bytes one ends in.
    last_bytes: [bool; 256],
}

static QUICK: Quick = quick(&[&CREDENTIAL_NAMES, &CREDENTIAL_SUFFIXES]);

const fn quick(lists: &[&[&str]]) -> Quick {
    let mut quick = Quick {
        shortest: usize::MAX,
        last_bytes: [false; 256],
    };
    let mut list = 0;
    while list < lists.len() {
        let mut i = 0;
        while i < lists[list].len() {
            let name = lists[list][i].as_bytes();
            if name.len() < quick.shortest {
                quick.shortest = name.len();
            }
            quick.last_bytes[name[name.len() - 1] as usize] = true;
            i += 1;
        }
        list += 1;
    }
    quick
}

/// Whether a field of this name holds a credential.
pub fn is_credential_key(key: &str) -> bool {
    let key = key.as_bytes();
    let Some(&last) = key.last() else {
        return false;
    };
    if key.len() < QUICK.shortest || !QUICK.last_bytes[usize::from(folded(last))] {
        return false;
    }
    CREDENTIAL_NAMES.iter().any(|name| folds_to(key, name))
        || CREDENTIAL_SUFFIXES
            .iter()
            .any(|suffix| folds_to_suffix(key, suffix))
}

/// Whether a header of this name carries a credential.
fn is_credential_header(name: &str) -> bool {
    is_credential_key(name)
        || folds_to_suffix(name.as_bytes(), "_key")
        || name.to_ascii_lowercase().contains("secret")
}

/// A JSON tree the rules walk: serde_json's `Value`, and the webhook fast path's
/// borrowed tree, so that a record is redacted the same whichever path validated it.
pub(crate) trait Redactable {
    /// Calls `f` with each key and value; false when not an object.
    fn each_entry(&mut self, f: &mut dyn FnMut(&str, &mut Self)) -> bool;
    /// Calls `f` with each item; false when not an array.
    fn each_item(&mut self, f: &mut dyn FnMut(&mut Self)) -> bool;
    fn text(&self) -> Option<&str>;
    fn set_text(&mut self, text: String);
}

impl Redactable for Value {
    fn each_entry(&mut self, f: &mut dyn FnMut(&str, &mut Self)) -> bool {
        let Value::Object(object) = self else {
            return false;
        };
        object.iter_mut().for_each(|(key, value)| f(key, value));
        true
    }

    fn each_item(&mut self, f: &mut dyn FnMut(&mut Self)) -> bool {
        let Value::Array(items) = self else {
            return false;
        };
        items.iter_mut().for_each(f);
        true
    }

    fn text(&self) -> Option<&str> {
        self.as_str()
    }

    fn set_text(&mut self, text: String) {
        *self = Value::String(text);
    }
}

/// Redacts every credential-shaped value in `value`, in place (see the module docs).
pub fn redact(value: &mut Value) {
    redact_tree(value);
}

/// A conversation record, after its schema's secrets were redacted: the same rules for
/// what the schema does not mark (credential-named headers in `extra_headers`, a URL's
/// password, secrets under fields it does not declare). Its `tags` are labels the client
/// chose and searches by, left as they are.
pub(crate) fn redact_record<T: Redactable>(record: &mut T) {
    record.each_entry(&mut |key, value| {
        if key != "tags" {
            entry(key, value);
        }
    });
}

pub(crate) fn redact_tree<T: Redactable>(value: &mut T) {
    if value.each_entry(&mut entry) || value.each_item(&mut redact_tree) {
        return;
    }
    if let Some(redacted) = value.text().and_then(url_password_redacted) {
        value.set_text(redacted);
    }
}

fn entry<T: Redactable>(key: &str, value: &mut T) {
    if is_credential_key(key) {
        blank(value);
    } else if key == "secret_sources" {
        let is_object = value.each_entry(&mut |_, source| {
            source.each_entry(&mut |field, secret| {
                if field == "value" {
                    blank(secret);
                }
            });
            redact_tree(source);
        });
        if !is_object {
            redact_tree(value);
        }
    } else if HEADER_MAPS.contains(&key) {
        let is_object = value.each_entry(&mut |name, header| {
            if is_credential_header(name) {
                blank(header);
            } else {
                redact_tree(header);
            }
        });
        if !is_object {
            redact_tree(value);
        }
    } else if key == "arguments"
        && let Some(arguments) = value.text()
    {
        if let Some(redacted) = json_text_redacted(arguments) {
            value.set_text(redacted);
        }
    } else {
        redact_tree(value);
    }
}

/// Replaces a credential: a string, or every string of a list. Other values (a count, a
/// flag, null) say nothing secret and stay.
fn blank<T: Redactable>(value: &mut T) {
    if value.text().is_some_and(|text| !text.is_empty()) {
        value.set_text(REDACTED.to_owned());
    } else if !value.each_item(&mut blank) {
        value.each_entry(&mut entry);
    }
}

/// A tool call's arguments: a JSON object in a string, redacted; `None` when it held
/// nothing to redact (it is then left byte for byte as it was).
fn json_text_redacted(text: &str) -> Option<String> {
    if !text.trim_start().starts_with('{') {
        return url_password_redacted(text);
    }
    let mut arguments = serde_json::from_str::<Value>(text).ok()?;
    let before = arguments.clone();
    redact(&mut arguments);
    if arguments == before {
        return None;
    }
    serde_json::to_string(&arguments).ok()
}

/// `scheme://user:password@host…` → `scheme://user:***@host…`, wherever it appears;
/// `None` when there is no such password.
fn url_password_redacted(text: &str) -> Option<String> {
    // `@` first: a one-byte search, and rarer in text than a URL's scheme.
    if !text.contains('@') || !text.contains("://") {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut found = false;
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
                found = true;
                out.push_str(&authority[..=colon]);
                out.push_str("***");
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &rest[authority_end..];
    }
    out.push_str(rest);
    found.then_some(out)
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
    fn key_names_match_in_any_case_and_length() {
        assert!(is_credential_key("X-Api-Key"));
        assert!(is_credential_key("GITHUB_TOKEN"));
        assert!(!is_credential_key("per_turn_token_count"));
        assert!(is_credential_key("Proxy-Authorization"));
        assert!(!is_credential_key("api_keys"));
        assert!(!is_credential_key("token_count"));
        // Long, and with non-ASCII letters (compared as they are).
        assert!(is_credential_key(&format!(
            "{}_Private-Key",
            "a".repeat(100)
        )));
        assert!(is_credential_key("clé_API-KEY"));
        assert!(!is_credential_key("tokén"));
        assert!(is_credential_header("X-Vault-Token"));
        assert!(is_credential_header("X-Custom-Key"));
        assert!(is_credential_header("X-My-SECRET-thing"));
        assert!(!is_credential_header("X-Trace"));
        assert!(!is_credential_header("Keyboard"));
        // The quick refusals (too short, a last byte no name ends in) pass every listed
        // name and ending, in any case and with `-` for `_`.
        for name in CREDENTIAL_NAMES {
            assert!(is_credential_key(name), "{name}");
            assert!(
                is_credential_key(&name.to_uppercase().replace('_', "-")),
                "{name}"
            );
        }
        for suffix in CREDENTIAL_SUFFIXES {
            assert!(is_credential_key(&format!("x{suffix}")), "{suffix}");
            assert!(
                is_credential_key(&format!("X{}", suffix.to_uppercase())),
                "{suffix}"
            );
        }
        assert!(!is_credential_key(""));
        assert!(!is_credential_key("key"));
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
