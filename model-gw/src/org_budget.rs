//! Before a virtual key's call goes upstream: whether its team is blocked, and whether
//! its user's, its team's and its team membership's budgets allow one more call, with
//! LiteLLM's answers; and the team's and user's rate limits, which the store's
//! admission holds with the key's (`admit.rs`).
//!
//! The budgets, the simple way: the spend counters are read at admission and a call's
//! cost is counted once it ends, so a budget is overshot by the calls in flight when it
//! is reached (see docs/model-gateway.md). [`admit_org_budgets`] is the one place that
//! decides it, for admission with reservations to replace.

use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sandgate_store::admission::{BudgetScope, ScopeLimits};
use sandgate_store::{RateLimits, SpendScope, Store, StoredKey, member_id};
use tonic::Status;

/// A team's or user's budget refusal, as LiteLLM's proxy answers it: 400,
/// `budget_exceeded` (the OpenHands app reads a 400 naming the budget as a key that
/// works, whose budget is spent).
fn over_budget(message: String) -> Status {
    ErrorDetail::new(ErrorCode::BadRequest, message)
        .with_reason("budget_exceeded")
        .into_status()
}

/// A number as Python prints a float (`3.0`, `0.1`), as LiteLLM's messages show them.
fn float(value: f64) -> String {
    if value.is_finite() && value.fract() == 0.0 && value.abs() < 1e16 {
        format!("{value:.1}")
    } else {
        format!("{value}")
    }
}

/// The refusal of a blocked team's key, as LiteLLM's proxy words it (401, `auth_error`).
fn team_blocked(team_id: &str) -> Status {
    ErrorDetail::new(
        ErrorCode::Unauthenticated,
        format!(
            "Authentication Error, Team={team_id} is blocked. Update via `/team/unblock` if you're an admin."
        ),
    )
    .with_reason("auth_error")
    .into_status()
}

/// The scope of `limits`, held by the store's admission: rates only (a budget of these
/// scopes is judged here, from the counters).
fn rated(scope: BudgetScope, limits: &RateLimits) -> Option<ScopeLimits> {
    limits
        .any()
        .then(|| ScopeLimits::new(scope, 0, None, limits))
}

/// Refuses the call of `key` when its team is blocked or a budget it counts towards
/// (its user's, its team's, its membership's) is spent; else the rate limits of its team
/// and its user, for the admission to hold. A key naming a team or user with no record
/// counts towards no such budget or limit (LiteLLM's keys may name either freely).
pub(crate) async fn admit_org_budgets(
    store: &Store,
    key: &StoredKey,
) -> Result<Vec<ScopeLimits>, Status> {
    if key.team_id.is_none() && key.user_id.is_none() {
        return Ok(Vec::new());
    }
    let unavailable = |err| ErrorDetail::from(err).into_status();
    let team = match &key.team_id {
        Some(team_id) => store.orgs.get_team(team_id).await.map_err(unavailable)?,
        None => None,
    };
    let user = match &key.user_id {
        Some(user_id) => store.orgs.get_user(user_id).await.map_err(unavailable)?,
        None => None,
    };
    if let Some(team) = &team
        && team.blocked
    {
        return Err(team_blocked(&team.team_id));
    }
    let member = team.as_ref().and_then(|team| {
        let user_id = key.user_id.as_deref()?;
        team.members
            .iter()
            .find(|member| member.user_id == user_id)
            .map(|member| (team, member))
    });
    let mut counters = Vec::new();
    if let Some(team) = &team {
        counters.push((SpendScope::Team, team.team_id.clone()));
    }
    if let Some(user) = &user {
        counters.push((SpendScope::User, user.user_id.clone()));
    }
    if let Some((team, member)) = member {
        counters.push((
            SpendScope::Member,
            member_id(&team.team_id, &member.user_id),
        ));
    }
    let spent = store
        .orgs
        .spend_totals(&counters)
        .await
        .map_err(unavailable)?;
    let mut spent = spent.into_iter();
    if let Some(team) = &team {
        let spend = spent.next().unwrap_or(0.0);
        if let Some(max) = team.max_budget
            && spend >= max
        {
            return Err(over_budget(format!(
                "Budget has been exceeded! Team={} Current cost: {}, Max budget: {}",
                team.team_id,
                float(spend),
                float(max)
            )));
        }
    }
    if let Some(user) = &user {
        let spend = spent.next().unwrap_or(0.0) + user.spend_adjustment;
        if let Some(max) = user.max_budget
            && spend >= max
        {
            return Err(over_budget(format!(
                "ExceededBudget: User={} over budget. Spend={}, Budget={}",
                user.user_id,
                float(spend),
                float(max)
            )));
        }
    }
    if let Some((team, member)) = member {
        let spend = spent.next().unwrap_or(0.0);
        if let Some(max) = member.max_budget_in_team
            && spend >= max
        {
            return Err(over_budget(format!(
                "Budget has been exceeded! User={} in Team={} Current cost: {}, Max budget: {}",
                member.user_id,
                team.team_id,
                float(spend),
                float(max)
            )));
        }
    }
    let mut rates = Vec::new();
    if let Some(team) = &team {
        rates.extend(rated(BudgetScope::Team(team.team_id.clone()), &team.limits));
    }
    if let Some(user) = &user {
        rates.extend(rated(BudgetScope::User(user.user_id.clone()), &user.limits));
    }
    Ok(rates)
}

#[cfg(test)]
mod tests {
    use super::float;

    #[test]
    fn amounts_read_as_python_prints_them() {
        assert_eq!(float(3.0), "3.0");
        assert_eq!(float(0.1), "0.1");
    }
}
