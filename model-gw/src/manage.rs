//! The key management endpoints, with LiteLLM's bodies and answers: `/key/generate`,
//! `/key/info`, `/key/update`, `/key/delete`, `/key/list`. The master key does all; a
//! virtual key reads its own info.

use bytes::Bytes;
use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sandgate_proto::models::v1::{KeyOperation, ManageKeysRequest};
use sandgate_store::{KeyOwner, Store, StoredKey};
use serde_json::{Map, Value, json};

use crate::budget::key_window;
use crate::keys::{self, Caller};
use crate::support::now_ms;

/// Keys listed on one page when the caller names no size, and at most.
pub const DEFAULT_PAGE_SIZE: usize = 10;
const MAX_PAGE_SIZE: usize = 1_000;

fn bad(message: impl Into<String>) -> ErrorDetail {
    ErrorDetail::new(ErrorCode::BadRequest, message)
}

fn not_found(named: &str) -> ErrorDetail {
    ErrorDetail::new(ErrorCode::NotFound, format!("key not found: {named}"))
}

/// The body of a management call, as an object.
fn object(body: &[u8]) -> Result<Map<String, Value>, ErrorDetail> {
    if body.is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(bad("the body must be a JSON object")),
        Err(err) => Err(bad(format!("the body is not JSON: {err}"))),
    }
}

fn answer(value: Value) -> Bytes {
    Bytes::from(serde_json::to_vec(&value).unwrap_or_default())
}

/// Serves one management call of `caller`.
pub async fn manage(
    store: &Store,
    caller: &Caller,
    request: ManageKeysRequest,
) -> Result<Bytes, ErrorDetail> {
    let body = object(&request.body)?;
    let operation = KeyOperation::try_from(request.operation).unwrap_or_default();
    if operation != KeyOperation::Info {
        caller.master_only("manage keys")?;
    }
    match operation {
        KeyOperation::Generate => generate(store, &body).await,
        KeyOperation::Info => info(store, caller, &body).await,
        KeyOperation::Update => update(store, &body).await,
        KeyOperation::Delete => delete(store, &body).await,
        KeyOperation::List => list(store, &body).await,
        KeyOperation::Unspecified => Err(bad("no key operation named")),
    }
}

/// What `key` spent in its current budget window.
async fn spent(store: &Store, key: &StoredKey) -> Result<f64, ErrorDetail> {
    let (window, _) = key_window(key, now_ms());
    Ok(store
        .keys
        .key_for_call(&key.token, None)
        .await?
        .map_or(0.0, |(_, counters)| counters.in_window(window)))
}

async fn described(store: &Store, key: &StoredKey) -> Result<Map<String, Value>, ErrorDetail> {
    Ok(keys::describe(key, spent(store, key).await?, now_ms()))
}

/// Refuses an alias another key has: an alias names one key.
async fn check_alias(store: &Store, key: &StoredKey) -> Result<(), ErrorDetail> {
    let Some(alias) = &key.key_alias else {
        return Ok(());
    };
    let taken = store
        .keys
        .keys_of(&KeyOwner::Alias(alias.clone()))
        .await?
        .iter()
        .any(|other| other.token != key.token);
    if taken {
        return Err(ErrorDetail::new(
            ErrorCode::Conflict,
            format!("key_alias {alias:?} is another key's"),
        ));
    }
    Ok(())
}

/// The value a `/key/generate` call chooses for its key (`"key"`), if any: the service
/// refuses the master key's, as the store refuses an existing virtual key's.
pub fn chosen_key(request: &ManageKeysRequest) -> Option<String> {
    if KeyOperation::try_from(request.operation).ok()? != KeyOperation::Generate {
        return None;
    }
    object(&request.body)
        .ok()?
        .get("key")?
        .as_str()
        .map(str::to_owned)
}

/// A chosen key that is already a key: the master key or a virtual key.
pub fn key_exists() -> ErrorDetail {
    ErrorDetail::new(ErrorCode::Conflict, "that key exists already")
}

async fn generate(store: &Store, body: &Map<String, Value>) -> Result<Bytes, ErrorDetail> {
    let (secret, key) = keys::generate(body, now_ms())?;
    check_alias(store, &key).await?;
    if !store.keys.put_key(&key, true).await? {
        return Err(key_exists());
    }
    tracing::info!(token = %key.token, key_alias = ?key.key_alias, "virtual key generated");
    let mut answer_body = keys::describe(&key, 0.0, now_ms());
    answer_body.insert("key".into(), Value::String(secret));
    Ok(answer(Value::Object(answer_body)))
}

async fn info(
    store: &Store,
    caller: &Caller,
    body: &Map<String, Value>,
) -> Result<Bytes, ErrorDetail> {
    let named = body.get("key").and_then(Value::as_str).map(str::to_owned);
    let token = keys::named_token(body, "key")?;
    let key = match (caller, token) {
        (Caller::Virtual { key: own, .. }, token)
            if token.as_ref().is_none_or(|token| *token == own.token) =>
        {
            (**own).clone()
        }
        (Caller::Virtual { .. }, Some(_)) => {
            return Err(ErrorDetail::new(
                ErrorCode::Forbidden,
                "a virtual key reads its own info only",
            ));
        }
        (Caller::Master, Some(token)) => store
            .keys
            .get_key(&token)
            .await?
            .ok_or_else(|| not_found(named.as_deref().unwrap_or_default()))?,
        (_, None) => return Err(bad("`key` is required with the master key")),
    };
    let info = described(store, &key).await?;
    Ok(answer(json!({
        "key": named.unwrap_or_else(|| key.token.clone()),
        "info": info,
    })))
}

async fn update(store: &Store, body: &Map<String, Value>) -> Result<Bytes, ErrorDetail> {
    let token = keys::named_token(body, "key")?.ok_or_else(|| bad("`key` is required"))?;
    let mut key =
        store.keys.get_key(&token).await?.ok_or_else(|| {
            not_found(body.get("key").and_then(Value::as_str).unwrap_or_default())
        })?;
    let mut fields = body.clone();
    fields.remove("key");
    keys::apply(&mut key, &fields, now_ms())?;
    check_alias(store, &key).await?;
    store.keys.put_key(&key, false).await?;
    tracing::info!(token = %key.token, "virtual key updated");
    let mut answer_body = described(store, &key).await?;
    answer_body.insert("key".into(), Value::String(key.token.clone()));
    Ok(answer(Value::Object(answer_body)))
}

async fn delete(store: &Store, body: &Map<String, Value>) -> Result<Bytes, ErrorDetail> {
    let (mut tokens, aliases) = keys::deleted_names(body)?;
    for alias in &aliases {
        let named = store.keys.keys_of(&KeyOwner::Alias(alias.clone())).await?;
        let key = named.first().ok_or_else(|| not_found(alias))?;
        tokens.push(key.token.clone());
    }
    // Every named key must exist before any is deleted, as LiteLLM does.
    for token in &tokens {
        if store.keys.get_key(token).await?.is_none() {
            return Err(not_found(token));
        }
    }
    let deleted = store.keys.delete_keys(&tokens).await?;
    tracing::info!(keys = deleted.len(), "virtual keys deleted");
    let mut named: Vec<Value> = body
        .get("keys")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    named.extend(aliases.into_iter().map(Value::String));
    Ok(answer(json!({ "deleted_keys": named })))
}

/// A positive page number or size from the query (numbers arrive as text).
fn positive(body: &Map<String, Value>, field: &str, default: usize) -> Result<usize, ErrorDetail> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(default),
        Some(value) => value
            .as_u64()
            .or_else(|| value.as_str().and_then(|text| text.parse().ok()))
            .filter(|number| *number > 0)
            .map(|number| number as usize)
            .ok_or_else(|| bad(format!("`{field}` must be a positive whole number"))),
    }
}

async fn list(store: &Store, body: &Map<String, Value>) -> Result<Bytes, ErrorDetail> {
    let page = positive(body, "page", 1)?;
    let size = positive(body, "size", DEFAULT_PAGE_SIZE)?.min(MAX_PAGE_SIZE);
    let full = matches!(body.get("return_full_object"), Some(Value::Bool(true)))
        || body.get("return_full_object").and_then(Value::as_str) == Some("true");
    let wanted = |field: &str| body.get(field).and_then(Value::as_str).map(str::to_owned);
    let (alias, user, team) = (wanted("key_alias"), wanted("user_id"), wanted("team_id"));
    // One filter read from its index (an alias names fewest keys), the others checked.
    let indexed = [
        alias.clone().map(KeyOwner::Alias),
        team.clone().map(KeyOwner::Team),
        user.clone().map(KeyOwner::User),
    ]
    .into_iter()
    .flatten()
    .next();
    let candidates = match &indexed {
        Some(owner) => store.keys.keys_of(owner).await?,
        None => store.keys.list_keys().await?,
    };
    let all: Vec<StoredKey> = candidates
        .into_iter()
        .filter(|key| alias.is_none() || key.key_alias == alias)
        .filter(|key| user.is_none() || key.user_id == user)
        .filter(|key| team.is_none() || key.team_id == team)
        .collect();
    let total = all.len();
    let mut listed = Vec::new();
    for key in all.iter().skip((page - 1).saturating_mul(size)).take(size) {
        listed.push(if full {
            Value::Object(described(store, key).await?)
        } else {
            Value::String(key.token.clone())
        });
    }
    Ok(answer(json!({
        "keys": listed,
        "total_count": total,
        "current_page": page,
        "total_pages": total.div_ceil(size),
    })))
}
