//! What keeps secrets out of the support bundle: every file passes through here before it
//! is archived. Two nets, because either alone misses something:
//!
//! - the secrets Sandgate knows, by value: its own settings (admin password, token keys,
//!   API and session keys, the Redis URL's password, the gateway's master key), the model
//!   entries' upstream keys, and every environment variable whose name is credential-shaped
//!   (`OPENAI_API_KEY`, `*_PASSWORD`, …), which is where `os.environ/` keys come from.
//!   Each is replaced wherever it appears, in any file;
//! - anything credential-shaped, as the catalog redacts agent-server events: a value under
//!   a credential-named key, a credential header, a URL's userinfo and query values
//!   (`values.rs`).

use serde_json::Value;

/// What a redacted value reads as.
pub const REDACTED: &str = "[redacted]";

/// Values shorter than this are not looked for: a secret that short is no secret, and
/// replacing every `1` or `true` would make the bundle unreadable.
const MIN_SECRET_LEN: usize = 4;

/// The secret values to take out of every file.
#[derive(Default)]
pub struct Secrets {
    values: Vec<String>,
}

impl Secrets {
    /// Adds `value` (and its URL-encoded form, as it appears inside a URL).
    pub fn add(&mut self, value: &str) {
        if value.len() < MIN_SECRET_LEN {
            return;
        }
        let encoded: String = form_urlencoded::byte_serialize(value.as_bytes()).collect();
        for value in [value.to_owned(), encoded] {
            if !self.values.contains(&value) {
                self.values.push(value);
            }
        }
        // Longest first: a secret containing another is replaced whole.
        self.values
            .sort_by_key(|value| std::cmp::Reverse(value.len()));
    }

    pub fn add_all<'a>(&mut self, values: impl IntoIterator<Item = &'a str>) {
        for value in values {
            self.add(value);
        }
    }

    /// The password of a Redis URL (`redis://user:password@host`), and the URL itself.
    pub fn add_url(&mut self, url: &str) {
        if let Some((userinfo, _)) = url
            .split_once("://")
            .and_then(|(_, rest)| rest.rsplit_once('@'))
        {
            let password = userinfo.split_once(':').map_or(userinfo, |(_, p)| p);
            self.add(password);
            if let Ok(decoded) = percent_decoded(password) {
                self.add(&decoded);
            }
        }
    }

    /// Every environment variable whose name is credential-shaped.
    pub fn add_credential_environment<'a>(
        &mut self,
        environment: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) {
        for (name, value) in environment {
            if is_credential_name(name) {
                self.add(value);
            }
        }
    }

    /// `text` with every URL's userinfo and query values redacted, and every known secret
    /// replaced.
    pub fn scrub(&self, text: &str) -> String {
        let mut text = super::values::redact_urls(text);
        for secret in &self.values {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), REDACTED);
            }
        }
        text
    }

    /// `value` with credential-shaped entries redacted, then every known secret replaced in
    /// its strings (keys too).
    pub fn json(&self, mut value: Value) -> Value {
        sandgate_conversation::redact::redact(&mut value);
        self.scrub_value(value)
    }

    fn scrub_value(&self, value: Value) -> Value {
        match value {
            Value::String(text) => Value::String(self.scrub(&text)),
            Value::Array(items) => {
                Value::Array(items.into_iter().map(|v| self.scrub_value(v)).collect())
            }
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(key, v)| (self.scrub(&key), self.scrub_value(v)))
                    .collect(),
            ),
            other => other,
        }
    }

    /// Lines of free text (logs), each redacted as a JSON string is (a URL's password),
    /// then scrubbed.
    pub fn lines(&self, lines: Vec<String>) -> Vec<String> {
        match self.json(Value::Array(lines.into_iter().map(Value::String).collect())) {
            Value::Array(items) => items
                .into_iter()
                .filter_map(|item| item.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        }
    }
}

fn percent_decoded(text: &str) -> Result<String, std::string::FromUtf8Error> {
    let bytes: Vec<u8> = form_urlencoded::parse(format!("x={text}").as_bytes())
        .next()
        .map(|(_, value)| value.into_owned().into_bytes())
        .unwrap_or_default();
    String::from_utf8(bytes)
}

/// An environment variable's name that says it holds a credential: the catalog's rules on
/// the lowercased name (`OPENAI_API_KEY` → `openai_api_key`, `*_secret`, `*_token`, …), and
/// `*_KEY`, which every provider uses.
pub fn is_credential_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let mut probe = serde_json::json!({ lower.clone(): "x" });
    sandgate_conversation::redact::redact(&mut probe);
    probe[&lower] != "x" || lower.ends_with("_key") || lower.ends_with("_keys")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn known_secrets_and_credential_shapes_are_redacted() {
        let mut secrets = Secrets::default();
        secrets.add("s3cret-admin-password");
        secrets.add_url("redis://:p%40ss-word@redis:6379/0");
        secrets.add_credential_environment([("OPENAI_API_KEY", "sk-upstream"), ("HOME", "/root")]);
        let value = secrets.json(json!({
            "note": "password is s3cret-admin-password",
            "url": "redis://:p%40ss-word@redis:6379/0",
            "raw": "p@ss-word",
            "api_key": "anything",
            "home": "/root",
            "upstream": ["sk-upstream"],
        }));
        let text = value.to_string();
        for secret in [
            "s3cret-admin-password",
            "p%40ss-word",
            "p@ss-word",
            "sk-upstream",
            "anything",
        ] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(value["home"], "/root");
    }

    #[test]
    fn credential_names_are_recognised() {
        for name in [
            "OPENAI_API_KEY",
            "ADMIN_PASSWORD",
            "JWT_SECRET",
            "GITHUB_TOKEN",
            "AWS_ACCESS_KEY",
        ] {
            assert!(is_credential_name(name), "{name}");
        }
        for name in ["HOME", "RUST_LOG", "SANDBOX_NAMESPACE"] {
            assert!(!is_credential_name(name), "{name}");
        }
    }
}
