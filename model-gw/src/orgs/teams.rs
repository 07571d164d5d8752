//! `/team/*` and `/budget/info`: teams, their members and the members' budgets.

use sandgate_proto::error::ErrorDetail;
use sandgate_store::admission::BudgetScope;
use sandgate_store::{KeyOwner, Store, StoredTeam, TeamMember};
use serde_json::{Map, Value, json};

use super::{
    MAX_MEMBERS, SWAP_ATTEMPTS, bad, budget_spend, checked_id, extend, id, ids, keys_of, metadata,
    models, not_found, raced, rate_limits, shown, shown_period, users,
};
use crate::budget::period_window;
use crate::keys::{budget, budget_period, iso_time, text};
use crate::org_budget::MEMBER_WINDOW;
use crate::support::now_ms;

fn team_not_found(team_id: &str) -> ErrorDetail {
    not_found(format!("Team not found, passed team_id={team_id}"))
}

/// A membership's budget id, as `/team/info` and `/budget/info` name it: both ids, each
/// in hex (so that any id, `-` included, reads back).
pub(super) fn budget_id(team_id: &str, user_id: &str) -> String {
    format!("member-{}-{}", hex::encode(team_id), hex::encode(user_id))
}

fn parse_budget_id(budget_id: &str) -> Option<(String, String)> {
    let (team, user) = budget_id.strip_prefix("member-")?.split_once('-')?;
    let text = |hex_text: &str| String::from_utf8(hex::decode(hex_text).ok()?).ok();
    Some((text(team)?, text(user)?))
}

/// A team as LiteLLM's answers show it, with what it spent.
fn described(team: &StoredTeam, spend: f64) -> Value {
    let mut described = json!({
        "team_id": team.team_id,
        "team_alias": team.team_alias,
        "max_budget": team.max_budget,
        "spend": spend,
        "models": team.models,
        "metadata": team.metadata.clone().unwrap_or_else(|| json!({})),
        "blocked": team.blocked,
        "members_with_roles": team.members.iter().map(|member| json!({
            "user_id": member.user_id,
            "role": member.role,
        })).collect::<Vec<_>>(),
        "created_at": iso_time(team.created_at_ms),
        "updated_at": iso_time(team.updated_at_ms),
    });
    extend(&mut described, shown(&team.limits));
    extend(&mut described, shown_period(&team.period, now_ms()));
    described
}

/// What `team` spent in its budget's current window.
async fn team_spend(store: &Store, team: &StoredTeam) -> Result<f64, ErrorDetail> {
    let window = period_window(&team.period, now_ms()).0;
    let scope = BudgetScope::Team(team.team_id.clone());
    let spent = budget_spend(store, vec![(scope, window)]).await?;
    Ok(spent.first().copied().unwrap_or(0.0))
}

/// Applies `change` to the stored team, compare-and-swap, tried again when another
/// writer got there first; the team as written.
async fn change(
    store: &Store,
    team_id: &str,
    change: impl Fn(&mut StoredTeam) -> Result<(), ErrorDetail>,
) -> Result<StoredTeam, ErrorDetail> {
    for _ in 0..SWAP_ATTEMPTS {
        let stored = store
            .orgs
            .get_team(team_id)
            .await?
            .ok_or_else(|| team_not_found(team_id))?;
        let mut team = stored.clone();
        change(&mut team)?;
        team.updated_at_ms = now_ms();
        if store.orgs.put_team(&team, stored.version).await? {
            team.version = stored.version + 1;
            return Ok(team);
        }
    }
    Err(raced("the team"))
}

/// The fields of `/team/new` and `/team/update` that `body` names, applied to `team`.
fn apply(team: &mut StoredTeam, body: &Map<String, Value>) -> Result<(), ErrorDetail> {
    budget_period(&mut team.period, body, now_ms())?;
    rate_limits(&mut team.limits, body)?;
    if let Some(value) = body.get("team_alias") {
        team.team_alias = text(value, "team_alias")?;
    }
    if let Some(value) = body.get("max_budget") {
        team.max_budget = budget(value, "max_budget")?;
    }
    if let Some(value) = body.get("models") {
        team.models = models(value)?;
    }
    if let Some(value) = body.get("metadata") {
        team.metadata = metadata(value)?;
    }
    if let Some(value) = body.get("blocked") {
        team.blocked = match value {
            Value::Null => false,
            Value::Bool(blocked) => *blocked,
            _ => return Err(bad("`blocked` must be a boolean")),
        };
    }
    Ok(())
}

pub(super) async fn new(store: &Store, body: &Map<String, Value>) -> Result<Value, ErrorDetail> {
    let team_id = match body.get("team_id") {
        None | Some(Value::Null) => uuid::Uuid::new_v4().to_string(),
        Some(_) => id(body, "team_id")?,
    };
    let now = now_ms();
    let mut team = StoredTeam {
        team_id: team_id.clone(),
        created_at_ms: now,
        updated_at_ms: now,
        ..StoredTeam::default()
    };
    apply(&mut team, body)?;
    if !store.orgs.put_team(&team, 0).await? {
        return Err(bad(format!(
            "Team id = {team_id} already exists. Please use a different team id."
        )));
    }
    tracing::info!(team_id = %team_id, "team created");
    Ok(described(&team, team_spend(store, &team).await?))
}

pub(super) async fn info(store: &Store, body: &Map<String, Value>) -> Result<Value, ErrorDetail> {
    let team_id = id(body, "team_id")?;
    let team = store
        .orgs
        .get_team(&team_id)
        .await?
        .ok_or_else(|| team_not_found(&team_id))?;
    let mut scopes = vec![(
        BudgetScope::Team(team_id.clone()),
        period_window(&team.period, now_ms()).0,
    )];
    scopes.extend(team.members.iter().map(|member| {
        let scope = BudgetScope::Member {
            team: team_id.clone(),
            user: member.user_id.clone(),
        };
        (scope, MEMBER_WINDOW)
    }));
    let spent = budget_spend(store, scopes).await?;
    let memberships: Vec<Value> = team
        .members
        .iter()
        .zip(spent.iter().skip(1))
        .map(|(member, spend)| {
            let budget_id = budget_id(&team_id, &member.user_id);
            json!({
                "team_id": team_id,
                "user_id": member.user_id,
                "budget_id": budget_id,
                "spend": spend,
                "litellm_budget_table": member.max_budget_in_team.map(|max| json!({
                    "budget_id": budget_id,
                    "max_budget": max,
                })),
            })
        })
        .collect();
    let keys = keys_of(store, KeyOwner::Team(team_id.clone())).await?;
    Ok(json!({
        "team_id": team_id,
        "team_info": described(&team, spent.first().copied().unwrap_or(0.0)),
        "keys": keys,
        "team_memberships": memberships,
    }))
}

/// `GET /team/list`: every team, with what it spent in its budget's current period (one
/// read of the counters for all); with `user_id`, those it is a member of.
pub(super) async fn list(store: &Store, body: &Map<String, Value>) -> Result<Value, ErrorDetail> {
    let member = match body.get("user_id") {
        None | Some(Value::Null) => None,
        Some(_) => Some(id(body, "user_id")?),
    };
    let teams: Vec<StoredTeam> = store
        .orgs
        .list_teams()
        .await?
        .into_iter()
        .filter(|team| {
            member
                .as_ref()
                .is_none_or(|user| team.members.iter().any(|m| &m.user_id == user))
        })
        .collect();
    let now = now_ms();
    let scopes = teams
        .iter()
        .map(|team| {
            let scope = BudgetScope::Team(team.team_id.clone());
            (scope, period_window(&team.period, now).0)
        })
        .collect();
    let spent = budget_spend(store, scopes).await?;
    Ok(Value::Array(
        teams
            .iter()
            .zip(spent)
            .map(|(team, spend)| described(team, spend))
            .collect(),
    ))
}

pub(super) async fn update(store: &Store, body: &Map<String, Value>) -> Result<Value, ErrorDetail> {
    let team_id = id(body, "team_id")?;
    let team = change(store, &team_id, |team| apply(team, body)).await?;
    tracing::info!(team_id = %team_id, "team updated");
    Ok(json!({
        "team_id": team_id,
        "data": described(&team, team_spend(store, &team).await?),
    }))
}

pub(super) async fn delete(store: &Store, body: &Map<String, Value>) -> Result<Value, ErrorDetail> {
    let team_ids = ids(body, "team_ids")?;
    let mut teams = Vec::new();
    // Every named team must exist before any is deleted, as LiteLLM does.
    for team_id in &team_ids {
        teams.push(
            store
                .orgs
                .get_team(team_id)
                .await?
                .ok_or_else(|| team_not_found(team_id))?,
        );
    }
    store.orgs.delete_teams(&team_ids).await?;
    for team in &teams {
        for member in &team.members {
            users::leave(store, &member.user_id, &team.team_id).await?;
        }
    }
    tracing::info!(teams = team_ids.len(), "teams deleted");
    Ok(json!({ "deleted_teams": team_ids }))
}

/// The members a `/team/member_add` body names: `member`, one or a list.
fn named_members(body: &Map<String, Value>) -> Result<Vec<TeamMember>, ErrorDetail> {
    let members = match body.get("member") {
        Some(Value::Array(members)) if members.len() <= MAX_MEMBERS => members.clone(),
        Some(member @ Value::Object(_)) => vec![member.clone()],
        _ => return Err(bad("`member` must be a member, or a list of them")),
    };
    let max_budget_in_team = budget(
        body.get("max_budget_in_team").unwrap_or(&Value::Null),
        "max_budget_in_team",
    )?;
    members
        .iter()
        .map(|member| {
            let Value::Object(member) = member else {
                return Err(bad("a `member` must be an object with `user_id`"));
            };
            let role = match text(member.get("role").unwrap_or(&Value::Null), "role")?.as_deref() {
                None | Some("user") => "user",
                Some("admin") => "admin",
                Some(_) => return Err(bad("`role` must be `user` or `admin`")),
            };
            Ok(TeamMember {
                user_id: id(member, "user_id")?,
                role: role.to_owned(),
                max_budget_in_team,
            })
        })
        .collect()
}

pub(super) async fn member_add(
    store: &Store,
    body: &Map<String, Value>,
) -> Result<Value, ErrorDetail> {
    let team_id = id(body, "team_id")?;
    let added = named_members(body)?;
    let team = change(store, &team_id, |team| {
        for member in &added {
            if team.members.iter().any(|old| old.user_id == member.user_id) {
                return Err(bad(format!(
                    "User={} already in team={team_id}",
                    member.user_id
                )));
            }
            if team.members.len() >= MAX_MEMBERS {
                return Err(bad(format!("a team has at most {MAX_MEMBERS} members")));
            }
            team.members.push(member.clone());
        }
        Ok(())
    })
    .await?;
    let mut updated_users = Vec::new();
    for member in &added {
        updated_users.push(users::join(store, &member.user_id, &team_id).await?);
    }
    tracing::info!(team_id = %team_id, members = added.len(), "team members added");
    Ok(json!({
        "team_id": team_id,
        "updated_team": described(&team, team_spend(store, &team).await?),
        "updated_users": updated_users,
        "updated_team_memberships": added.iter().map(|member| json!({
            "team_id": team_id,
            "user_id": member.user_id,
            "budget_id": budget_id(&team_id, &member.user_id),
            "litellm_budget_table": member.max_budget_in_team.map(|max| json!({"max_budget": max})),
        })).collect::<Vec<_>>(),
    }))
}

pub(super) async fn member_update(
    store: &Store,
    body: &Map<String, Value>,
) -> Result<Value, ErrorDetail> {
    let team_id = id(body, "team_id")?;
    let user_id = id(body, "user_id")?;
    let max_budget = body
        .get("max_budget_in_team")
        .map(|value| budget(value, "max_budget_in_team"))
        .transpose()?;
    let role = match body
        .get("role")
        .map(|value| text(value, "role"))
        .transpose()?
    {
        None | Some(None) => None,
        Some(Some(role)) if role == "user" || role == "admin" => Some(role),
        Some(Some(_)) => return Err(bad("`role` must be `user` or `admin`")),
    };
    let team = change(store, &team_id, |team| {
        let member = team
            .members
            .iter_mut()
            .find(|member| member.user_id == user_id)
            .ok_or_else(|| not_found(format!("User={user_id} not found in team={team_id}")))?;
        if let Some(max_budget) = max_budget {
            member.max_budget_in_team = max_budget;
        }
        if let Some(role) = &role {
            member.role.clone_from(role);
        }
        Ok(())
    })
    .await?;
    let member = team.members.iter().find(|member| member.user_id == user_id);
    Ok(json!({
        "team_id": team_id,
        "user_id": user_id,
        "max_budget_in_team": member.and_then(|member| member.max_budget_in_team),
        "role": member.map(|member| member.role.clone()),
    }))
}

pub(super) async fn member_delete(
    store: &Store,
    body: &Map<String, Value>,
) -> Result<Value, ErrorDetail> {
    let team_id = id(body, "team_id")?;
    let user_id = id(body, "user_id")?;
    let team = change(store, &team_id, |team| {
        let before = team.members.len();
        team.members.retain(|member| member.user_id != user_id);
        if team.members.len() == before {
            return Err(not_found(format!(
                "User={user_id} not found in team={team_id}"
            )));
        }
        Ok(())
    })
    .await?;
    users::leave(store, &user_id, &team_id).await?;
    tracing::info!(team_id = %team_id, "team member removed");
    Ok(described(&team, team_spend(store, &team).await?))
}

pub(super) async fn block(
    store: &Store,
    body: &Map<String, Value>,
    blocked: bool,
) -> Result<Value, ErrorDetail> {
    let team_id = id(body, "team_id")?;
    let team = change(store, &team_id, |team| {
        team.blocked = blocked;
        Ok(())
    })
    .await?;
    tracing::info!(team_id = %team_id, blocked, "team blocked or unblocked");
    Ok(described(&team, team_spend(store, &team).await?))
}

/// `/budget/info`: the budgets of memberships, by the ids `/team/info` gives them.
pub(super) async fn budget_info(
    store: &Store,
    body: &Map<String, Value>,
) -> Result<Value, ErrorDetail> {
    let budget_ids = ids(body, "budgets")?;
    let mut budgets = Vec::new();
    for named in budget_ids {
        let Some((team_id, user_id)) = parse_budget_id(&named) else {
            continue;
        };
        let team_id = checked_id(team_id, "budgets")?;
        let Some(team) = store.orgs.get_team(&team_id).await? else {
            continue;
        };
        if let Some(member) = team.members.iter().find(|member| member.user_id == user_id) {
            budgets.push(json!({
                "budget_id": named,
                "max_budget": member.max_budget_in_team,
                "budget_duration": null,
                "soft_budget": null,
                "tpm_limit": null,
                "rpm_limit": null,
                "max_parallel_requests": null,
                "created_at": iso_time(team.created_at_ms),
                "updated_at": iso_time(team.updated_at_ms),
            }));
        }
    }
    Ok(Value::Array(budgets))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_ids_read_back_whatever_the_ids_hold() {
        for (team, user) in [("t", "u"), ("a-b", "c-d-e"), ("é:/", "\u{7f}x")] {
            assert_eq!(
                parse_budget_id(&budget_id(team, user)),
                Some((team.to_owned(), user.to_owned()))
            );
        }
        assert_eq!(parse_budget_id("member-zz-00"), None);
        assert_eq!(parse_budget_id("other"), None);
    }
}
