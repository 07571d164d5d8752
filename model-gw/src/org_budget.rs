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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sandgate_store::admission::{BudgetScope, ScopeLimits};
use sandgate_store::{RateLimits, Store, StoreResult, StoredKey, StoredTeam, StoredUser};
use tokio::sync::watch;
use tonic::Status;

use crate::auth::{KEEP_AT_MOST, MAX_KEPT};
use crate::budget::period_window;

/// The team and user records keys' calls read, kept until the store says a team or a
/// user changed (`OrgStore::org_changes`: on Redis a notification every replica follows,
/// within milliseconds), at most [`KEEP_AT_MOST`]: so a call makes no store round trip
/// for them, and a blocked team or a changed budget holds on every replica within that
/// notification's delay.
pub(crate) struct OrgRecords {
    store: Store,
    changes: watch::Receiver<Option<u64>>,
    kept: Mutex<Kept>,
}

type Team = Option<Arc<StoredTeam>>;
type User = Option<Arc<StoredUser>>;

#[derive(Default)]
struct Kept {
    /// The generation what is kept was read under, and when the oldest of it was.
    generation: Option<u64>,
    since: Option<Instant>,
    teams: HashMap<String, Team>,
    users: HashMap<String, User>,
}

impl Kept {
    /// Forgets everything read under another generation, or too long ago.
    fn follow(&mut self, generation: Option<u64>) {
        let aged = self
            .since
            .is_some_and(|since| since.elapsed() >= KEEP_AT_MOST);
        if self.generation != generation || aged || self.teams.len() + self.users.len() >= MAX_KEPT
        {
            *self = Self {
                generation,
                ..Self::default()
            };
        }
    }
}

impl OrgRecords {
    pub(crate) fn new(store: Store) -> Self {
        Self {
            changes: store.orgs.org_changes(),
            store,
            kept: Mutex::default(),
        }
    }

    /// The team and the user `key` names (`None`: it names none, or none is stored).
    async fn of(&self, key: &StoredKey) -> StoreResult<(Team, User)> {
        // Read before the store is: a change meanwhile makes what is read stale.
        let generation = *self.changes.borrow();
        let kept = generation.and_then(|generation| {
            let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            kept.follow(Some(generation));
            let team = match &key.team_id {
                Some(id) => kept.teams.get(id).cloned()?,
                None => None,
            };
            let user = match &key.user_id {
                Some(id) => kept.users.get(id).cloned()?,
                None => None,
            };
            Some((team, user))
        });
        if let Some(kept) = kept {
            return Ok(kept);
        }
        // Both records at once: one round trip's wait, not two.
        let (team, user) = tokio::join!(
            async {
                match &key.team_id {
                    Some(team_id) => self.store.orgs.get_team(team_id).await,
                    None => Ok(None),
                }
            },
            async {
                match &key.user_id {
                    Some(user_id) => self.store.orgs.get_user(user_id).await,
                    None => Ok(None),
                }
            }
        );
        let (team, user) = (team?.map(Arc::new), user?.map(Arc::new));
        if generation.is_some() {
            let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            if kept.generation == generation {
                kept.since.get_or_insert_with(Instant::now);
                if let Some(id) = &key.team_id {
                    kept.teams.insert(id.clone(), team.clone());
                }
                if let Some(id) = &key.user_id {
                    kept.users.insert(id.clone(), user.clone());
                }
            }
        }
        Ok((team, user))
    }
}

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
pub(crate) async fn org_scopes(
    records: &OrgRecords,
    key: &StoredKey,
) -> Result<Vec<ScopeLimits>, Status> {
    if key.team_id.is_none() && key.user_id.is_none() {
        return Ok(Vec::new());
    }
    let (team, user) = records
        .of(key)
        .await
        .map_err(|err| ErrorDetail::from(err).into_status())?;
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
