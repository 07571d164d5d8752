//! Before a virtual key's call goes upstream: whether its team is blocked, and the
//! scopes its user, its team and its team membership add to the call's admission
//! (`admit.rs`), each with its budget and rate limits.
//!
//! Those budgets are held as a key's is: the store admits the call against the spend
//! of every scope plus the holds of the calls in flight, in one atomic step, and each
//! scope's spend is the counter the call's settlement adds to (`/team/info` and
//! `/user/info` read it), in the budget's current window (a team's or user's
//! `budget_duration` starts it again each period). So concurrent calls through all of a
//! team's keys, on every replica, overshoot its budget by at most one hold, as a key's
//! calls do.

use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sandgate_store::admission::{BudgetScope, ScopeLimits};
use sandgate_store::{RateLimits, Store, StoredKey};
use tonic::Status;

use crate::budget::period_window;

/// The window of a membership's budget: one that never resets (LiteLLM's memberships
/// take no `budget_duration`).
pub(crate) const MEMBER_WINDOW: u64 = 0;

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

/// Refuses the call of `key` when its team is blocked; else the scopes it counts
/// towards beside its key's: its team's, its user's and its membership's, for each that
/// has a record (LiteLLM's keys may name a team or a user freely: one with no record
/// counts towards nothing), with their budgets and rate limits. Each is counted when
/// the call settles, whether or not it limits anything.
pub(crate) async fn org_scopes(store: &Store, key: &StoredKey) -> Result<Vec<ScopeLimits>, Status> {
    if key.team_id.is_none() && key.user_id.is_none() {
        return Ok(Vec::new());
    }
    let unavailable = |err| ErrorDetail::from(err).into_status();
    // Both records at once: one round trip's wait, not two.
    let (team, user) = tokio::join!(
        async {
            match &key.team_id {
                Some(team_id) => store.orgs.get_team(team_id).await,
                None => Ok(None),
            }
        },
        async {
            match &key.user_id {
                Some(user_id) => store.orgs.get_user(user_id).await,
                None => Ok(None),
            }
        }
    );
    let (team, user) = (team.map_err(unavailable)?, user.map_err(unavailable)?);
    let now = crate::support::now_ms();
    let mut scopes = Vec::new();
    if let Some(team) = &team {
        if team.blocked {
            return Err(team_blocked(&team.team_id));
        }
        scopes.push(ScopeLimits::new(
            BudgetScope::Team(team.team_id.clone()),
            period_window(&team.period, now).0,
            team.max_budget,
            &team.limits,
        ));
    }
    if let Some(user) = &user {
        scopes.push(ScopeLimits::new(
            BudgetScope::User(user.user_id.clone()),
            period_window(&user.period, now).0,
            user.max_budget,
            &user.limits,
        ));
    }
    let member = team.as_ref().and_then(|team| {
        let user_id = key.user_id.as_deref()?;
        let member = team
            .members
            .iter()
            .find(|member| member.user_id == user_id)?;
        Some((team, member))
    });
    if let Some((team, member)) = member {
        scopes.push(ScopeLimits::new(
            BudgetScope::Member {
                team: team.team_id.clone(),
                user: member.user_id.clone(),
            },
            MEMBER_WINDOW,
            member.max_budget_in_team,
            &RateLimits::default(),
        ));
    }
    Ok(scopes)
}
