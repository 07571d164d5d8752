//! `/user/*`: users, the teams they are in, their keys and spend.

use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sandgate_store::admission::BudgetScope;
use sandgate_store::{KeyOwner, Store, StoredUser};
use serde_json::{Map, Value, json};

use super::{
    MAX_MEMBERS, SWAP_ATTEMPTS, bad, budget_spend, extend, id, ids, keys_of, metadata, models,
    not_found, raced, rate_limits, shown, shown_period,
};
use crate::budget::period_window;
use crate::keys::{budget, budget_period, iso_time, text};
use crate::support::now_ms;

fn user_not_found(user_id: &str) -> ErrorDetail {
    not_found(format!("User not found, passed user_id={user_id}"))
}

/// `user`'s budget scope, in its current window.
fn user_scope(user: &StoredUser) -> (BudgetScope, u64) {
    (
        BudgetScope::User(user.user_id.clone()),
        period_window(&user.period, now_ms()).0,
    )
}

/// What `user` spent in its budget's current window: its counter, as `/user/update` may
/// have set it.
pub(crate) async fn user_spend(store: &Store, user: &StoredUser) -> Result<f64, ErrorDetail> {
    let spent = budget_spend(store, vec![user_scope(user)]).await?;
    Ok(spent.first().copied().unwrap_or(0.0))
}

fn described(user: &StoredUser, spend: f64) -> Value {
    let mut described = json!({
        "user_id": user.user_id,
        "user_email": user.user_email,
        "max_budget": user.max_budget,
        "spend": spend,
        "models": user.models,
        "teams": user.teams,
        "metadata": user.metadata.clone().unwrap_or_else(|| json!({})),
        "user_role": "internal_user",
        "created_at": iso_time(user.created_at_ms),
        "updated_at": iso_time(user.updated_at_ms),
    });
    extend(&mut described, shown(&user.limits));
    extend(&mut described, shown_period(&user.period, now_ms()));
    described
}

/// Applies `change` to the user (a new one when `create` and there is none),
/// compare-and-swap, tried again when another writer got there first.
async fn change(
    store: &Store,
    user_id: &str,
    create: bool,
    change: impl Fn(&mut StoredUser) -> Result<(), ErrorDetail>,
) -> Result<StoredUser, ErrorDetail> {
    for _ in 0..SWAP_ATTEMPTS {
        let stored = match store.orgs.get_user(user_id).await? {
            Some(user) => user,
            None if create => StoredUser {
                user_id: user_id.to_owned(),
                created_at_ms: now_ms(),
                ..StoredUser::default()
            },
            None => return Err(user_not_found(user_id)),
        };
        let mut user = stored.clone();
        change(&mut user)?;
        user.updated_at_ms = now_ms();
        if store.orgs.put_user(&user, stored.version).await? {
            user.version = stored.version + 1;
            return Ok(user);
        }
    }
    Err(raced("the user"))
}

/// Records that `user_id` is in `team_id` (creating the user, as LiteLLM's
/// `/team/member_add` does); the user as LiteLLM shows it.
pub(super) async fn join(
    store: &Store,
    user_id: &str,
    team_id: &str,
) -> Result<Value, ErrorDetail> {
    let user = change(store, user_id, true, |user| {
        if !user.teams.iter().any(|team| team == team_id) && user.teams.len() < MAX_MEMBERS {
            user.teams.push(team_id.to_owned());
        }
        Ok(())
    })
    .await?;
    Ok(described(&user, user_spend(store, &user).await?))
}

/// Records that `user_id` left `team_id`, if the user exists.
pub(super) async fn leave(store: &Store, user_id: &str, team_id: &str) -> Result<(), ErrorDetail> {
    match change(store, user_id, false, |user| {
        user.teams.retain(|team| team != team_id);
        Ok(())
    })
    .await
    {
        Err(err) if err.code() == ErrorCode::NotFound => Ok(()),
        other => other.map(drop),
    }
}

fn apply(user: &mut StoredUser, body: &Map<String, Value>) -> Result<(), ErrorDetail> {
    budget_period(&mut user.period, body, now_ms())?;
    rate_limits(&mut user.limits, body)?;
    if let Some(value) = body.get("user_email") {
        user.user_email = text(value, "user_email")?;
    }
    if let Some(value) = body.get("max_budget") {
        user.max_budget = budget(value, "max_budget")?;
    }
    if let Some(value) = body.get("models") {
        user.models = models(value)?;
    }
    if let Some(value) = body.get("metadata") {
        user.metadata = metadata(value)?;
    }
    Ok(())
}

/// The teams a `/user/new` body names (`teams`: ids, and nulls that name none).
fn named_teams(body: &Map<String, Value>) -> Result<Vec<String>, ErrorDetail> {
    match body.get("teams") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(teams)) if teams.len() <= MAX_MEMBERS => {
            let mut named = Vec::new();
            for team in teams {
                if let Some(team) = text(team, "teams")? {
                    named.push(super::checked_id(team, "teams")?);
                }
            }
            Ok(named)
        }
        Some(_) => Err(bad("`teams` must be a list of team ids")),
    }
}

pub(super) async fn new(store: &Store, body: &Map<String, Value>) -> Result<Value, ErrorDetail> {
    let user_id = match body.get("user_id") {
        None | Some(Value::Null) => uuid::Uuid::new_v4().to_string(),
        Some(_) => id(body, "user_id")?,
    };
    let teams = named_teams(body)?;
    let now = now_ms();
    let mut user = StoredUser {
        user_id: user_id.clone(),
        created_at_ms: now,
        updated_at_ms: now,
        ..StoredUser::default()
    };
    apply(&mut user, body)?;
    for team in &teams {
        if store.orgs.get_team(team).await?.is_none() {
            return Err(not_found(format!("Team not found, passed team_id={team}")));
        }
    }
    if !store.orgs.put_user(&user, 0).await? {
        return Err(ErrorDetail::new(
            ErrorCode::Conflict,
            format!("User with id = {user_id} already exists. Please use a different user id."),
        ));
    }
    for team in &teams {
        let member = json!({"team_id": team, "member": {"user_id": user_id, "role": "user"}});
        if let Value::Object(member) = member {
            match super::teams::member_add(store, &member).await {
                // Already in it: what was asked holds.
                Err(err) if err.code() == ErrorCode::BadRequest => {}
                other => drop(other?),
            }
        }
    }
    let mut answer = described(&user, user_spend(store, &user).await?);
    // LiteLLM makes the user a key unless asked not to.
    if !matches!(body.get("auto_create_key"), Some(Value::Bool(false))) {
        let mut key_body = Map::new();
        key_body.insert("user_id".into(), Value::String(user_id.clone()));
        let (secret, key) = crate::keys::generate(&key_body, now)?;
        store.keys.put_key(&key, true).await?;
        answer["key"] = Value::String(secret);
        answer["token"] = Value::String(key.token);
    }
    answer["teams"] = json!(teams);
    tracing::info!(user_id = %user_id, "user created");
    Ok(answer)
}

/// `/user/info` (with the user's keys and teams) and `/v2/user/info` (the user alone).
pub(super) async fn info(
    store: &Store,
    body: &Map<String, Value>,
    whole: bool,
) -> Result<Value, ErrorDetail> {
    let user_id = id(body, "user_id")?;
    let user = store
        .orgs
        .get_user(&user_id)
        .await?
        .ok_or_else(|| user_not_found(&user_id))?;
    let user_info = described(&user, user_spend(store, &user).await?);
    if !whole {
        return Ok(user_info);
    }
    let keys = keys_of(store, KeyOwner::User(user_id.clone())).await?;
    let mut teams = Vec::new();
    for team_id in &user.teams {
        if let Some(team) = store.orgs.get_team(team_id).await? {
            teams.push(json!({
                "team_id": team.team_id,
                "team_alias": team.team_alias,
                "max_budget": team.max_budget,
                "blocked": team.blocked,
                "models": team.models,
            }));
        }
    }
    Ok(json!({
        "user_id": user_id,
        "user_info": user_info,
        "keys": keys,
        "teams": teams,
    }))
}

/// A `/user/list` page's users when none is asked, and the most.
const DEFAULT_USER_PAGE: u64 = 25;
const MAX_USER_PAGE: u64 = 100;

/// A positive whole number of the query (`page`, `page_size`), or `default`.
fn whole(body: &Map<String, Value>, field: &str, default: u64) -> Result<u64, ErrorDetail> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::String(text)) => text
            .parse::<u64>()
            .ok()
            .filter(|number| *number > 0)
            .ok_or_else(|| bad(format!("`{field}` must be a whole number from 1"))),
        Some(Value::Number(number)) => number
            .as_u64()
            .filter(|number| *number > 0)
            .ok_or_else(|| bad(format!("`{field}` must be a whole number from 1"))),
        Some(_) => Err(bad(format!("`{field}` must be a whole number from 1"))),
    }
}

/// `GET /user/list`: a page of the users by id (LiteLLM's answer: `users`, `total`,
/// `page`, `page_size`, `total_pages`), each with what it spent in its budget's current
/// period; `user_ids` (comma-separated) keeps those alone.
pub(super) async fn list(store: &Store, body: &Map<String, Value>) -> Result<Value, ErrorDetail> {
    let page = whole(body, "page", 1)?;
    let page_size = whole(body, "page_size", DEFAULT_USER_PAGE)?.min(MAX_USER_PAGE);
    let wanted: Option<std::collections::HashSet<&str>> = match body.get("user_ids") {
        Some(Value::String(ids)) => Some(ids.split(',').map(str::trim).collect()),
        _ => None,
    };
    let users: Vec<StoredUser> = store
        .orgs
        .list_users()
        .await?
        .into_iter()
        .filter(|user| {
            wanted
                .as_ref()
                .is_none_or(|wanted| wanted.contains(user.user_id.as_str()))
        })
        .collect();
    let total = users.len() as u64;
    let start = usize::try_from((page - 1).saturating_mul(page_size)).unwrap_or(usize::MAX);
    let shown: Vec<&StoredUser> = users.iter().skip(start).take(page_size as usize).collect();
    let spent = budget_spend(store, shown.iter().map(|user| user_scope(user)).collect()).await?;
    Ok(json!({
        "users": shown
            .iter()
            .zip(spent)
            .map(|(user, spend)| described(user, spend))
            .collect::<Vec<_>>(),
        "total": total,
        "page": page,
        "page_size": page_size,
        "total_pages": total.div_ceil(page_size),
    }))
}

pub(super) async fn update(store: &Store, body: &Map<String, Value>) -> Result<Value, ErrorDetail> {
    let user_id = id(body, "user_id")?;
    let spend = body
        .get("spend")
        .map(|value| budget(value, "spend"))
        .transpose()?
        .flatten();
    let user = change(store, &user_id, false, |user| apply(user, body)).await?;
    // LiteLLM's `spend` sets the user's (in its current window): its counter, which
    // later calls add to.
    if let Some(spend) = spend {
        let (scope, window) = user_scope(&user);
        store.keys.set_budget_spend(&scope, window, spend).await?;
    }
    tracing::info!(user_id = %user_id, "user updated");
    let spend = user_spend(store, &user).await?;
    Ok(json!({"user_id": user_id, "data": described(&user, spend)}))
}

pub(super) async fn delete(store: &Store, body: &Map<String, Value>) -> Result<Value, ErrorDetail> {
    let user_ids = ids(body, "user_ids")?;
    let mut users = Vec::new();
    for user_id in &user_ids {
        users.push(
            store
                .orgs
                .get_user(user_id)
                .await?
                .ok_or_else(|| user_not_found(user_id))?,
        );
    }
    // As LiteLLM does: the users' keys go with them, and they leave their teams.
    let mut tokens = Vec::new();
    for user_id in &user_ids {
        let keys = store.keys.keys_of(&KeyOwner::User(user_id.clone())).await?;
        tokens.extend(keys.into_iter().map(|key| key.token));
    }
    store.keys.delete_keys(&tokens).await?;
    for user in &users {
        for team_id in &user.teams {
            let member = json!({"team_id": team_id, "user_id": user.user_id});
            if let Value::Object(member) = member {
                match super::teams::member_delete(store, &member).await {
                    Err(err) if err.code() == ErrorCode::NotFound => {}
                    other => drop(other?),
                }
            }
        }
    }
    store.orgs.delete_users(&user_ids).await?;
    tracing::info!(users = user_ids.len(), keys = tokens.len(), "users deleted");
    Ok(json!({ "deleted_users": user_ids }))
}
