//! LiteLLM's organisation model, as the OpenHands enterprise app drives it: teams
//! (`/team/*`) with members who each have a budget in the team, users (`/user/*`), the
//! members' budgets (`/budget/info`) and the spend report (`/global/spend/report`).
//! Bodies, answers and the error texts clients match ("already exists. Please use a
//! different team id", "already in team") are LiteLLM's. The master key's only.
//!
//! Records are written compare-and-swap on their version, so two replicas adding members
//! to one team at once both land; a change is seen by every replica's next call (calls
//! read the records from the store).

mod report;
mod teams;
mod users;

use bytes::Bytes;
use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sandgate_proto::models::v1::{ManageOrgsRequest, OrgOperation};
use sandgate_store::admission::BudgetScope;
use sandgate_store::{BudgetPeriod, KeyOwner, RateLimits, SpendScope, Store};
use serde_json::{Map, Value};

pub(crate) use report::{ListFilter, listed};

use crate::keys::{Caller, MAX_METADATA_BYTES, MAX_MODELS, text};

/// Members a team holds at most: a team's record is read whole on its keys' calls.
const MAX_MEMBERS: usize = 1_000;
/// Times a write that lost a race with another writer is tried again.
const SWAP_ATTEMPTS: usize = 8;

fn bad(message: impl Into<String>) -> ErrorDetail {
    ErrorDetail::new(ErrorCode::BadRequest, message)
}

fn not_found(message: impl Into<String>) -> ErrorDetail {
    ErrorDetail::new(ErrorCode::NotFound, message)
}

fn raced(what: &str) -> ErrorDetail {
    ErrorDetail::new(
        ErrorCode::Conflict,
        format!("{what} was changed by other calls meanwhile; retry"),
    )
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

/// A required id: non-empty text of at most 256 characters without control characters
/// (an id names counters and store fields).
fn id(body: &Map<String, Value>, field: &str) -> Result<String, ErrorDetail> {
    let value = body.get(field).unwrap_or(&Value::Null);
    let id = text(value, field)?.ok_or_else(|| bad(format!("`{field}` is required")))?;
    checked_id(id, field)
}

fn checked_id(id: String, field: &str) -> Result<String, ErrorDetail> {
    if id.is_empty() || id.chars().any(char::is_control) {
        return Err(bad(format!(
            "`{field}` must be non-empty text without control characters"
        )));
    }
    Ok(id)
}

/// A list of ids (`team_ids`, `user_ids`).
fn ids(body: &Map<String, Value>, field: &str) -> Result<Vec<String>, ErrorDetail> {
    match body.get(field) {
        Some(Value::Array(items)) if !items.is_empty() && items.len() <= MAX_MODELS => items
            .iter()
            .map(|item| {
                let id =
                    text(item, field)?.ok_or_else(|| bad(format!("`{field}` holds a null")))?;
                checked_id(id, field)
            })
            .collect(),
        _ => Err(bad(format!("`{field}` must be a non-empty list of ids"))),
    }
}

fn models(value: &Value) -> Result<Vec<String>, ErrorDetail> {
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Array(models) if models.len() <= MAX_MODELS => models
            .iter()
            .map(|model| text(model, "models[]")?.ok_or_else(|| bad("`models` holds a null")))
            .collect(),
        _ => Err(bad(format!(
            "`models` must be a list of at most {MAX_MODELS} model names"
        ))),
    }
}

fn metadata(value: &Value) -> Result<Option<Value>, ErrorDetail> {
    match value {
        Value::Null => Ok(None),
        Value::Object(_) if value.to_string().len() <= MAX_METADATA_BYTES => {
            Ok(Some(value.clone()))
        }
        Value::Object(_) => Err(bad(format!(
            "`metadata` is larger than {MAX_METADATA_BYTES} bytes"
        ))),
        _ => Err(bad("`metadata` must be an object or null")),
    }
}

/// The rate limits `body` names, over `limits` (null: none).
pub(crate) fn rate_limits(
    limits: &mut RateLimits,
    body: &Map<String, Value>,
) -> Result<(), ErrorDetail> {
    for (field, limit) in [
        ("max_parallel_requests", &mut limits.max_parallel_requests),
        ("rpm_limit", &mut limits.rpm_limit),
        ("tpm_limit", &mut limits.tpm_limit),
    ] {
        if let Some(value) = body.get(field) {
            *limit = crate::keys::count_limit(value, field)?;
        }
    }
    Ok(())
}

/// How `/team/info`, `/user/info` and `/budget/info` show rate limits.
fn shown(limits: &RateLimits) -> Value {
    serde_json::json!({
        "max_parallel_requests": limits.max_parallel_requests,
        "rpm_limit": limits.rpm_limit,
        "tpm_limit": limits.tpm_limit,
    })
}

/// What the counters say `scope`'s `ids` spent in all.
async fn totals(
    store: &Store,
    counters: Vec<(SpendScope, String)>,
) -> Result<Vec<f64>, ErrorDetail> {
    Ok(store.orgs.spend_totals(&counters).await?)
}

/// What each of `scopes` (users, teams, memberships, each in its current window) spent:
/// the counters their budgets are judged on, which every call of their keys adds to when
/// it settles.
async fn budget_spend(
    store: &Store,
    scopes: Vec<(BudgetScope, u64)>,
) -> Result<Vec<f64>, ErrorDetail> {
    Ok(store.keys.budget_spend(&scopes).await?)
}

/// `described` with `more`'s fields beside its own.
fn extend(described: &mut Value, more: Value) {
    if let (Value::Object(fields), Value::Object(more)) = (described, more) {
        fields.extend(more);
    }
}

/// How LiteLLM's answers show a team's or user's budget period: its duration, and when
/// its current window ends.
fn shown_period(period: &BudgetPeriod, now_ms: i64) -> Value {
    let (_, reset_at) = crate::budget::period_window(period, now_ms);
    serde_json::json!({
        "budget_duration": period.budget_duration,
        "budget_reset_at": reset_at.map_or(Value::Null, crate::keys::iso_time),
    })
}

/// The keys of a user or a team, as `/user/info` and `/team/info` list them, with the
/// spend each made (its counter in all, kept when the key goes).
async fn keys_of(store: &Store, owner: KeyOwner) -> Result<Vec<Value>, ErrorDetail> {
    let keys = store.keys.keys_of(&owner).await?;
    let spent = totals(
        store,
        keys.iter()
            .map(|key| (SpendScope::Key, key.token.clone()))
            .collect(),
    )
    .await?;
    let now = crate::support::now_ms();
    Ok(keys
        .iter()
        .zip(spent)
        .map(|(key, spend)| Value::Object(crate::keys::describe(key, spend, now)))
        .collect())
}

/// Serves one management call of `caller`.
pub async fn manage(
    store: &Store,
    caller: &Caller,
    request: ManageOrgsRequest,
) -> Result<Bytes, ErrorDetail> {
    caller.master_only("manage teams, users and budgets")?;
    let body = object(&request.body)?;
    let operation = OrgOperation::try_from(request.operation).unwrap_or_default();
    let answered = match operation {
        OrgOperation::TeamNew => teams::new(store, &body).await?,
        OrgOperation::TeamInfo => teams::info(store, &body).await?,
        OrgOperation::TeamUpdate => teams::update(store, &body).await?,
        OrgOperation::TeamDelete => teams::delete(store, &body).await?,
        OrgOperation::TeamMemberAdd => teams::member_add(store, &body).await?,
        OrgOperation::TeamMemberUpdate => teams::member_update(store, &body).await?,
        OrgOperation::TeamMemberDelete => teams::member_delete(store, &body).await?,
        OrgOperation::TeamBlock => teams::block(store, &body, true).await?,
        OrgOperation::TeamUnblock => teams::block(store, &body, false).await?,
        OrgOperation::UserNew => users::new(store, &body).await?,
        OrgOperation::UserInfo => users::info(store, &body, true).await?,
        OrgOperation::UserInfoV2 => users::info(store, &body, false).await?,
        OrgOperation::UserUpdate => users::update(store, &body).await?,
        OrgOperation::UserDelete => users::delete(store, &body).await?,
        OrgOperation::BudgetInfo => teams::budget_info(store, &body).await?,
        OrgOperation::SpendReport => report::spend_report(store, &body).await?,
        OrgOperation::TeamList => teams::list(store, &body).await?,
        OrgOperation::UserList => users::list(store, &body).await?,
        OrgOperation::Unspecified => return Err(bad("no operation named")),
    };
    Ok(answer(answered))
}
