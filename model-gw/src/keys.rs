//! Virtual keys, as LiteLLM's users know them: who calls (the master key, or a virtual
//! key with its models, budgets and expiry), and the key management endpoints' bodies
//! (`/key/generate`, `/key/info`, `/key/update`, `/key/delete`, `/key/list`).
//!
//! A key is shown once, when it is generated; the store keeps its sha256 (LiteLLM's
//! `token`), which names it everywhere after.

use std::sync::Arc;

use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sandgate_store::{BudgetPeriod, SpendCounters, StoredKey};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::budget::{key_window, parse_duration_ms};

/// Who a call comes from.
#[derive(Clone, Debug)]
pub enum Caller {
    /// The operator: every route.
    Master,
    /// A virtual key: the LLM routes of its models, and its own info; with its spend
    /// as read for this call, and the call's session (as the store names it).
    Virtual {
        key: Arc<StoredKey>,
        counters: SpendCounters,
        session: Option<String>,
    },
}

impl Caller {
    pub fn key(&self) -> Option<&StoredKey> {
        match self {
            Self::Master => None,
            Self::Virtual { key, .. } => Some(key),
        }
    }

    /// Refused unless the caller holds the master key.
    pub fn master_only(&self, what: &str) -> Result<(), ErrorDetail> {
        match self {
            Self::Master => Ok(()),
            Self::Virtual { .. } => Err(ErrorDetail::new(
                ErrorCode::Forbidden,
                format!("only the master key may {what}; a virtual key calls models"),
            )),
        }
    }

    /// Whether the caller may call the model a client names `model`.
    pub fn may_call(&self, model: &str) -> bool {
        self.key().is_none_or(|key| allows(&key.models, model))
    }
}

/// Whether a key's model list allows `model`: an empty list, `*` or LiteLLM's
/// `all-proxy-models` allow everything; `prefix/*` allows names under the prefix.
pub fn allows(models: &[String], model: &str) -> bool {
    models.is_empty()
        || models.iter().any(|allowed| {
            allowed == model
                || allowed == "*"
                || allowed == "all-proxy-models"
                || allowed
                    .strip_suffix('*')
                    .is_some_and(|prefix| prefix.ends_with('/') && model.starts_with(prefix))
        })
}

/// The refusal of a model outside a key's list, as LiteLLM's proxy words it.
pub fn model_refused(model: &str) -> ErrorDetail {
    ErrorDetail::new(
        ErrorCode::Forbidden,
        format!(
            "The requested model '{model}' is not available for this API key, or the model name is invalid. Check the models available to you and try again."
        ),
    )
    .with_reason("key_model_access_denied")
}

/// The sha256 hex of a key: its token.
pub fn token_of(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// The token a management call names: the key itself (`sk-…`), or already its token.
fn token_named(named: &str) -> String {
    let is_token = named.len() == 64
        && named
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte));
    if is_token {
        named.to_owned()
    } else {
        token_of(named)
    }
}

/// The key abbreviated for display, as LiteLLM names it.
pub(crate) fn key_name(key: &str) -> String {
    match key.char_indices().rev().nth(3) {
        Some((start, _)) if key.len() >= 16 => format!("sk-...{}", &key[start..]),
        _ => "sk-...".to_owned(),
    }
}

/// A new key: `sk-` and 32 random bytes in hex.
fn new_key() -> String {
    format!("sk-{}", hex::encode(rand::random::<[u8; 32]>()))
}

/// The shortest key a caller may choose.
const MIN_CUSTOM_KEY: usize = 16;
/// Bounds of what a key carries, so that a key's record stays small.
pub(crate) const MAX_TEXT: usize = 256;
pub(crate) const MAX_MODELS: usize = 1_000;
pub(crate) const MAX_METADATA_BYTES: usize = 16 * 1024;

/// Limits LiteLLM's keys carry that this gateway does not enforce: refused, rather than
/// accepted and silently not held.
const NOT_ENFORCED: [&str; 3] = ["model_max_budget", "model_rpm_limit", "model_tpm_limit"];

fn bad(message: impl Into<String>) -> ErrorDetail {
    ErrorDetail::new(ErrorCode::BadRequest, message)
}

pub(crate) fn text(value: &Value, field: &str) -> Result<Option<String>, ErrorDetail> {
    match value {
        Value::Null => Ok(None),
        Value::String(text) if text.chars().count() <= MAX_TEXT => Ok(Some(text.clone())),
        Value::String(_) => Err(bad(format!(
            "`{field}` is longer than {MAX_TEXT} characters"
        ))),
        _ => Err(bad(format!("`{field}` must be a string or null"))),
    }
}

/// A count limit: a whole number, or null for none. 0 refuses every call, as LiteLLM's.
pub(crate) fn count_limit(value: &Value, field: &str) -> Result<Option<u64>, ErrorDetail> {
    match value {
        Value::Null => Ok(None),
        value => value.as_u64().map(Some).ok_or_else(|| {
            bad(format!(
                "`{field}` must be a non-negative whole number or null"
            ))
        }),
    }
}

pub(crate) fn budget(value: &Value, field: &str) -> Result<Option<f64>, ErrorDetail> {
    match value {
        Value::Null => Ok(None),
        value => value
            .as_f64()
            .filter(|budget| budget.is_finite() && *budget >= 0.0)
            .map(Some)
            .ok_or_else(|| bad(format!("`{field}` must be a non-negative number or null"))),
    }
}

/// Applies the fields `body` names to `key` (a new one, or the stored one for an update),
/// at `now_ms`. Fields it does not name stay as they are.
pub fn apply(
    key: &mut StoredKey,
    body: &Map<String, Value>,
    now_ms: i64,
) -> Result<(), ErrorDetail> {
    for field in NOT_ENFORCED {
        if body.get(field).is_some_and(|value| !value.is_null()) {
            return Err(bad(format!(
                "`{field}` is not enforced by this gateway; set `max_budget`, `budget_duration` or `max_budget_per_session` instead"
            )));
        }
    }
    if let Some(value) = body.get("key_alias") {
        key.key_alias = text(value, "key_alias")?;
    }
    if let Some(value) = body.get("user_id") {
        key.user_id = text(value, "user_id")?;
    }
    if let Some(value) = body.get("team_id") {
        key.team_id = text(value, "team_id")?;
    }
    if let Some(value) = body.get("models") {
        key.models = match value {
            Value::Null => Vec::new(),
            Value::Array(models) if models.len() <= MAX_MODELS => models
                .iter()
                .map(|model| text(model, "models[]")?.ok_or_else(|| bad("`models` holds a null")))
                .collect::<Result<_, _>>()?,
            Value::Array(_) => return Err(bad(format!("`models` lists more than {MAX_MODELS}"))),
            _ => return Err(bad("`models` must be a list of model names")),
        };
    }
    if let Some(value) = body.get("max_budget") {
        key.max_budget = budget(value, "max_budget")?;
    }
    crate::orgs::rate_limits(&mut key.limits, body)?;
    if let Some(value) = body.get("max_budget_per_session") {
        key.max_budget_per_session = budget(value, "max_budget_per_session")?;
    }
    budget_period(&mut key.period, body, now_ms)?;
    if let Some(value) = body.get("duration") {
        key.expires_at_ms = match text(value, "duration")? {
            None => None,
            Some(duration) => Some(
                now_ms
                    + parse_duration_ms(&duration)
                        .map_err(|err| bad(format!("`duration`: {err}")))?,
            ),
        };
    }
    if let Some(value) = body.get("metadata") {
        key.metadata = match value {
            Value::Null => None,
            Value::Object(_) if value.to_string().len() <= MAX_METADATA_BYTES => {
                Some(value.clone())
            }
            Value::Object(_) => {
                return Err(bad(format!(
                    "`metadata` is larger than {MAX_METADATA_BYTES} bytes"
                )));
            }
            _ => return Err(bad("`metadata` must be an object or null")),
        };
    }
    key.updated_at_ms = now_ms;
    Ok(())
}

/// A new key from a `/key/generate` body: the key (the caller's own `key`, or a new one)
/// and what is stored of it.
pub fn generate(
    body: &Map<String, Value>,
    now_ms: i64,
) -> Result<(String, StoredKey), ErrorDetail> {
    let secret = match body.get("key") {
        None | Some(Value::Null) => new_key(),
        Some(Value::String(key)) if key.len() >= MIN_CUSTOM_KEY && key.len() <= MAX_TEXT => {
            if http::HeaderValue::from_str(key).is_err() || key.trim() != key {
                return Err(bad(
                    "`key` must be sendable in a header, without spaces around",
                ));
            }
            key.clone()
        }
        Some(_) => {
            return Err(bad(format!(
                "`key` must be a string of {MIN_CUSTOM_KEY} to {MAX_TEXT} characters"
            )));
        }
    };
    let mut key = StoredKey {
        token: token_of(&secret),
        key_name: key_name(&secret),
        created_at_ms: now_ms,
        period: BudgetPeriod {
            budget_start_ms: now_ms,
            ..BudgetPeriod::default()
        },
        ..StoredKey::default()
    };
    apply(&mut key, body, now_ms)?;
    Ok((secret, key))
}

/// The token of the key a management body (or query) names in `field`.
pub fn named_token(body: &Map<String, Value>, field: &str) -> Result<Option<String>, ErrorDetail> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(named)) if !named.is_empty() => Ok(Some(token_named(named))),
        Some(_) => Err(bad(format!("`{field}` must name a key"))),
    }
}

/// The tokens and aliases a `/key/delete` body names.
pub fn deleted_names(body: &Map<String, Value>) -> Result<(Vec<String>, Vec<String>), ErrorDetail> {
    let list = |field: &str| -> Result<Vec<String>, ErrorDetail> {
        match body.get(field) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) if items.len() <= MAX_MODELS => items
                .iter()
                .map(|item| {
                    item.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| bad(format!("`{field}` must list strings")))
                })
                .collect(),
            Some(_) => Err(bad(format!("`{field}` must be a list of strings"))),
        }
    };
    let keys = list("keys")?;
    let aliases = list("key_aliases")?;
    if keys.is_empty() && aliases.is_empty() {
        return Err(bad(
            "At least one of 'keys' or 'key_aliases' must be provided.",
        ));
    }
    Ok((keys.iter().map(|key| token_named(key)).collect(), aliases))
}

/// An ISO 8601 time (UTC) of milliseconds since the epoch, as LiteLLM's answers give it.
pub fn iso_time(ms: i64) -> Value {
    let seconds = ms.div_euclid(1000);
    let micros = (ms.rem_euclid(1000) * 1000) as u32;
    speedate::DateTime::from_timestamp(seconds, micros)
        .map(|time| Value::String(time.to_string()))
        .unwrap_or(Value::Null)
}

/// The `budget_duration` `body` names, over `period` (null: a budget that never resets):
/// a new duration starts its first window at `now_ms`. For keys, teams and users alike.
pub(crate) fn budget_period(
    period: &mut BudgetPeriod,
    body: &Map<String, Value>,
    now_ms: i64,
) -> Result<(), ErrorDetail> {
    let Some(value) = body.get("budget_duration") else {
        return Ok(());
    };
    let duration = text(value, "budget_duration")?;
    if let Some(duration) = &duration {
        parse_duration_ms(duration).map_err(|err| bad(format!("`budget_duration`: {err}")))?;
    }
    if duration != period.budget_duration {
        period.budget_start_ms = now_ms;
    }
    period.budget_duration = duration;
    Ok(())
}

/// What LiteLLM's answers say of a key (never the key): `spend` in its current window.
pub fn describe(key: &StoredKey, spend: f64, now_ms: i64) -> Map<String, Value> {
    let (_, reset_at) = key_window(key, now_ms);
    let expired = key.expires_at_ms.is_some_and(|expires| expires <= now_ms);
    let described = json!({
        "token": key.token,
        "key_name": key.key_name,
        "key_alias": key.key_alias,
        "spend": spend,
        "max_budget": key.max_budget,
        "budget_duration": key.period.budget_duration,
        "budget_reset_at": reset_at.map_or(Value::Null, iso_time),
        "max_budget_per_session": key.max_budget_per_session,
        "max_parallel_requests": key.limits.max_parallel_requests,
        "rpm_limit": key.limits.rpm_limit,
        "tpm_limit": key.limits.tpm_limit,
        "models": key.models,
        "user_id": key.user_id,
        "team_id": key.team_id,
        "metadata": key.metadata.clone().unwrap_or_else(|| json!({})),
        "expires": key.expires_at_ms.map_or(Value::Null, iso_time),
        "status": if expired { "expired" } else { "active" },
        "blocked": false,
        "created_at": iso_time(key.created_at_ms),
        "updated_at": iso_time(key.updated_at_ms),
    });
    match described {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// The refusal of a key past its expiry, as LiteLLM's proxy words it.
pub fn expired(key: &StoredKey) -> ErrorDetail {
    let when = key.expires_at_ms.map_or(Value::Null, iso_time);
    ErrorDetail::new(
        ErrorCode::Unauthenticated,
        format!("Authentication Error - Expired Key. Key Expiry time {when}"),
    )
    .with_reason("expired_key")
}

/// How LiteLLM's budget refusals name a key: its alias and abbreviation.
pub fn descriptor(key: &StoredKey) -> String {
    format!(
        "{} ({})",
        key.key_alias.as_deref().unwrap_or("key"),
        key.key_name
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    #[test]
    fn a_generated_key_is_stored_by_its_hash_only() {
        let (secret, key) = generate(&body(json!({"models": ["gpt"], "max_budget": 1.5})), 1_000)
            .unwrap_or_else(|err| panic!("{err:?}"));
        assert!(secret.starts_with("sk-") && secret.len() == 67);
        assert_eq!(key.token, token_of(&secret));
        assert_eq!(key.key_name, format!("sk-...{}", &secret[63..]));
        assert!(
            !serde_json::to_string(&key)
                .unwrap_or_default()
                .contains(&secret)
        );
        assert_eq!(token_named(&secret), key.token);
        assert_eq!(token_named(&key.token), key.token);
    }

    #[test]
    fn updates_change_what_they_name_and_refuse_what_is_not_enforced() {
        let (_, mut key) = generate(
            &body(json!({"key_alias": "a", "budget_duration": "1h"})),
            1_000,
        )
        .unwrap_or_else(|err| panic!("{err:?}"));
        apply(
            &mut key,
            &body(json!({"max_budget": 2, "duration": "30s"})),
            5_000,
        )
        .unwrap_or_else(|err| panic!("{err:?}"));
        assert_eq!(key.key_alias.as_deref(), Some("a"));
        assert_eq!(key.max_budget, Some(2.0));
        assert_eq!(key.expires_at_ms, Some(35_000));
        assert_eq!(key.period.budget_start_ms, 1_000);
        apply(
            &mut key,
            &body(json!({"rpm_limit": 5, "tpm_limit": 0, "max_parallel_requests": 2})),
            5_500,
        )
        .unwrap_or_else(|err| panic!("{err:?}"));
        assert_eq!(
            (
                key.limits.rpm_limit,
                key.limits.tpm_limit,
                key.limits.max_parallel_requests
            ),
            (Some(5), Some(0), Some(2))
        );
        for refused in [
            json!({"model_rpm_limit": {"gpt": 5}}),
            json!({"rpm_limit": -1}),
            json!({"max_parallel_requests": 1.5}),
            json!({"tpm_limit": "10"}),
            json!({"max_budget": -1}),
            json!({"budget_duration": "soon"}),
            json!({"models": "gpt"}),
            json!({"key_alias": "x".repeat(300)}),
        ] {
            assert!(
                apply(&mut key, &body(refused.clone()), 6_000).is_err(),
                "{refused}"
            );
        }
        assert!(generate(&body(json!({"key": "short"})), 0).is_err());
    }

    #[test]
    fn model_lists_allow_names_wildcards_and_everything_when_empty() {
        let models = vec!["gpt".to_owned(), "openai/*".to_owned()];
        assert!(allows(&models, "gpt"));
        assert!(allows(&models, "openai/gpt-4o"));
        assert!(!allows(&models, "claude"));
        assert!(!allows(&models, "openai-x"));
        assert!(allows(&[], "anything"));
    }
}
