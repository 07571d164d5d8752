//! Personalising a claimed warm sandbox: its agent-server started dormant
//! (`OH_DEFERRED_INIT`, `matching.rs`), and the claim delivers the start's own session key,
//! secret key, webhooks, CORS origins and environment at `POST /api/init` (header
//! `X-Init-API-Key`: the dormant server's secret key, which Sandgate gave it), before the
//! start answers. The request's values win over the pool's: what the agent-server would
//! have read from the start's environment is what it is told.
//!
//! The webhooks and CORS origins are read from the start's environment as the
//! agent-server's own parser reads them (`env_parser.py` of 1.34 and 1.58):
//! `OH_WEBHOOKS` as a JSON list (or a count), then `OH_WEBHOOKS_{i}` as a JSON object and
//! `OH_WEBHOOKS_{i}_{FIELD}` field by field, indices from 0 until one has nothing; the
//! same for `OH_ALLOW_CORS_ORIGINS`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::driver::SandboxKeys;
use sandgate_store::SandboxSpec;

/// How long an agent-server may take to initialise (it starts its conversation service).
pub const INIT_TIMEOUT: Duration = Duration::from_secs(30);
/// Indices read at most, so a hostile environment cannot make the walk long.
const MAX_ITEMS: usize = 64;
/// The fields of a `WebhookSpec` that the environment may set one by one, and whether
/// each is a number.
const WEBHOOK_FIELDS: &[(&str, bool)] = &[
    ("BASE_URL", false),
    ("EVENT_BUFFER_SIZE", true),
    ("FLUSH_DELAY", true),
    ("NUM_RETRIES", true),
    ("RETRY_DELAY", true),
    ("MAX_QUEUE_SIZE", true),
];
/// An error body quoted at most this long in a failure's reason.
const QUOTED: usize = 200;

/// The client of every call to a sandbox: straight to it, never through a proxy of the
/// environment, and a redirect is an answer, never followed (the init carries the
/// start's keys and environment, which go nowhere but the sandbox).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap_or_default()
}

/// The body of `POST /api/init` for a start of `spec` whose sandbox has `keys`.
pub fn init_body(spec: &SandboxSpec, keys: &SandboxKeys) -> Value {
    let environment = &spec.environment;
    let mut body = json!({
        "session_api_keys": [keys.session],
        "secret_key": keys.secret,
        "env": environment,
    });
    if let Some(webhooks) = list(environment, "OH_WEBHOOKS", webhook) {
        body["webhooks"] = Value::Array(webhooks);
    }
    if let Some(origins) = list(environment, "OH_ALLOW_CORS_ORIGINS", |environment, key| {
        environment
            .get(key)
            .map(|origin| Value::String(origin.clone()))
    }) {
        body["allow_cors_origins"] = Value::Array(origins);
    }
    body
}

/// The base URLs of the webhooks `environment` names, as the agent-server reads them.
pub fn webhook_urls(environment: &BTreeMap<String, String>) -> Vec<String> {
    list(environment, "OH_WEBHOOKS", webhook)
        .unwrap_or_default()
        .iter()
        .filter_map(|webhook| webhook["base_url"].as_str().map(str::to_owned))
        .collect()
}

/// The list `prefix` names in `environment`, items read by `item`; `None` when it names
/// none (the pool's stays).
fn list(
    environment: &BTreeMap<String, String>,
    prefix: &str,
    item: impl Fn(&BTreeMap<String, String>, &str) -> Option<Value>,
) -> Option<Vec<Value>> {
    let base = environment
        .get(prefix)
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .map(|value| match value {
            Value::Array(items) => items,
            Value::Number(count) => {
                let count = count.as_u64().unwrap_or(0).min(MAX_ITEMS as u64) as usize;
                vec![Value::Null; count]
            }
            _ => Vec::new(),
        });
    let sequential = base.is_none();
    let mut items = base.unwrap_or_default();
    for index in 0..MAX_ITEMS {
        let found = item(environment, &format!("{prefix}_{index}"));
        match (found, items.get_mut(index)) {
            (Some(found), Some(existing)) => merge(existing, found),
            (Some(found), None) => items.push(found),
            (None, Some(_)) => {}
            (None, None) if sequential => break,
            (None, None) => {}
        }
    }
    (!items.is_empty()).then_some(items)
}

/// A webhook of the environment under `key`: `key` as a JSON object, then its fields.
fn webhook(environment: &BTreeMap<String, String>, key: &str) -> Option<Value> {
    let mut found = environment
        .get(key)
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .filter(Value::is_object);
    let mut fields = Map::new();
    for (field, numeric) in WEBHOOK_FIELDS {
        if let Some(text) = environment.get(&format!("{key}_{field}")) {
            let value = if *numeric {
                serde_json::from_str::<serde_json::Number>(text)
                    .map_or_else(|_| Value::String(text.clone()), Value::Number)
            } else {
                Value::String(text.clone())
            };
            fields.insert(field.to_ascii_lowercase(), value);
        }
    }
    if let Some(headers) = environment
        .get(&format!("{key}_HEADERS"))
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .filter(Value::is_object)
    {
        fields.insert("headers".into(), headers);
    }
    if !fields.is_empty() {
        let base = found.get_or_insert_with(|| Value::Object(Map::new()));
        merge(base, Value::Object(fields));
    }
    found
}

/// `patch` over `target`, object by object; anything else replaces.
fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(target.entry(key).or_insert(Value::Null), value);
            }
        }
        (target, patch) => *target = patch,
    }
}

/// Posts `body` to the dormant agent-server at `url`; why not, when it did not become
/// ready. The reason names the status and what of the answer [`quoted`] allows, never the
/// body sent.
pub async fn deliver(
    client: &reqwest::Client,
    url: &str,
    keys: &SandboxKeys,
    body: &Value,
) -> Result<(), String> {
    let endpoint = format!("{}/api/init", url.trim_end_matches('/'));
    let response = client
        .post(&endpoint)
        .header("X-Init-API-Key", &keys.secret)
        .json(body)
        .timeout(INIT_TIMEOUT)
        .send()
        .await
        .map_err(|err| format!("POST {endpoint} failed: {}", without_url(&err)))?;
    let status = response.status();
    let answer = response.text().await.unwrap_or_default();
    let ready = serde_json::from_str::<Value>(&answer)
        .ok()
        .is_some_and(|answer| answer["state"] == "ready");
    if status.is_success() && ready {
        return Ok(());
    }
    Err(format!(
        "POST {endpoint} answered {status}: {}",
        quoted(&answer)
    ))
}

/// What of an answer a failure's reason may quote: a validation error's locations and
/// messages, never its `input`s (FastAPI echoes them, and the body sent holds the keys);
/// of any other answer, its start.
fn quoted(answer: &str) -> String {
    let quoted = match serde_json::from_str::<Value>(answer) {
        Ok(Value::Object(object)) => match object.get("detail") {
            Some(Value::Array(errors)) => errors
                .iter()
                .map(|error| format!("{} {}", error["loc"], error["msg"]))
                .collect::<Vec<_>>()
                .join("; "),
            Some(Value::String(detail)) => detail.clone(),
            _ => String::new(),
        },
        Ok(_) => String::new(),
        Err(_) => answer.to_owned(),
    };
    quoted.chars().take(QUOTED).collect()
}

/// The error, without the URL reqwest appends (it is in the reason already).
fn without_url(err: &reqwest::Error) -> String {
    let mut source: Option<&dyn std::error::Error> = Some(err);
    let mut reason = String::new();
    while let Some(err) = source {
        reason = err.to_string();
        source = err.source();
    }
    reason
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_s_reason_never_quotes_the_inputs_it_echoes() {
        let echoed = r#"{"detail": [{"type": "string_type", "loc": ["body", "session_api_keys", 0], "msg": "Input should be a valid string", "input": "sk-the-session-key"}]}"#;
        let reason = quoted(echoed);
        assert!(!reason.contains("sk-the-session-key"), "{reason}");
        assert!(reason.contains("session_api_keys"), "{reason}");
        assert!(
            reason.contains("Input should be a valid string"),
            "{reason}"
        );
        assert_eq!(quoted(r#"{"detail": "Not Found"}"#), "Not Found");
        assert_eq!(quoted(r#"{"input": "sk-the-session-key"}"#), "");
        assert_eq!(quoted("Bad Gateway"), "Bad Gateway");
    }

    fn keys() -> SandboxKeys {
        SandboxKeys {
            session: "session".into(),
            secret: "secret".into(),
        }
    }

    fn spec(environment: &[(&str, &str)]) -> SandboxSpec {
        SandboxSpec {
            environment: environment
                .iter()
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
                .collect(),
            ..SandboxSpec::default()
        }
    }

    #[test]
    fn the_start_s_webhooks_origins_keys_and_environment_are_delivered() {
        let start = spec(&[
            ("OH_WEBHOOKS_0_BASE_URL", "http://app/api/v1/webhooks"),
            ("OH_WEBHOOKS_1_BASE_URL", "http://sandgate/api/v1/webhooks"),
            ("OH_WEBHOOKS_1_FLUSH_DELAY", "0.5"),
            ("OH_WEBHOOKS_1_HEADERS", r#"{"x-tenant": "a"}"#),
            ("OH_ALLOW_CORS_ORIGINS_0", "http://app"),
            ("WORKER_1", "12000"),
        ]);
        let body = init_body(&start, &keys());
        assert_eq!(body["session_api_keys"], json!(["session"]));
        assert_eq!(body["secret_key"], "secret");
        assert_eq!(
            body["webhooks"],
            json!([
                {"base_url": "http://app/api/v1/webhooks"},
                {"base_url": "http://sandgate/api/v1/webhooks", "flush_delay": 0.5,
                 "headers": {"x-tenant": "a"}},
            ])
        );
        assert_eq!(body["allow_cors_origins"], json!(["http://app"]));
        assert_eq!(body["env"]["WORKER_1"], "12000");
    }

    #[test]
    fn a_json_list_is_the_base_and_indexed_fields_override_it() {
        let start = spec(&[
            (
                "OH_WEBHOOKS",
                r#"[{"base_url": "http://a", "num_retries": 1}, {"base_url": "http://b"}]"#,
            ),
            ("OH_WEBHOOKS_1_BASE_URL", "http://c"),
            ("OH_ALLOW_CORS_ORIGINS", r#"["http://x"]"#),
        ]);
        let body = init_body(&start, &keys());
        assert_eq!(
            body["webhooks"],
            json!([{"base_url": "http://a", "num_retries": 1}, {"base_url": "http://c"}])
        );
        assert_eq!(body["allow_cors_origins"], json!(["http://x"]));
    }

    #[test]
    fn without_webhooks_in_the_start_the_pool_s_stay() {
        let body = init_body(&spec(&[("OH_WEBHOOKS_3_BASE_URL", "http://gap")]), &keys());
        assert!(body.get("webhooks").is_none(), "{body}");
        assert!(body.get("allow_cors_origins").is_none());
    }

    /// Answers every connection of `listener` with `answer`, counting them.
    async fn answering(
        listener: tokio::net::TcpListener,
        answer: String,
    ) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = count.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buffer = vec![0_u8; 65536];
                let _ = stream.read(&mut buffer).await;
                let _ = stream.write_all(answer.as_bytes()).await;
            }
        });
        count
    }

    #[tokio::test]
    async fn a_redirecting_init_sends_nothing_elsewhere() {
        let elsewhere = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let target = format!("http://{}/api/init", elsewhere.local_addr().expect("addr"));
        let reached = answering(
            elsewhere,
            "HTTP/1.1 200 OK\r\ncontent-length: 17\r\n\r\n{\"state\":\"ready\"}".into(),
        )
        .await;
        let sandbox = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", sandbox.local_addr().expect("addr"));
        let asked = answering(
            sandbox,
            format!(
                "HTTP/1.1 307 Temporary Redirect\r\nlocation: {target}\r\ncontent-length: 0\r\n\r\n"
            ),
        )
        .await;
        let spec = spec(&[("GITHUB_TOKEN", "ghp_secret")]);
        let failed = deliver(&client(), &url, &keys(), &init_body(&spec, &keys()))
            .await
            .expect_err("a redirect is no init");
        assert!(failed.contains("307"), "{failed}");
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(reached.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
}
