//! Admission of the gateway's calls against every budget and limit they count towards,
//! and their settlement once they end.
//!
//! A call names its scopes (its key, its session, and its user, team and team membership
//! once those have records), each with its limits. [`KeyStore::admit`] takes, in one
//! atomic step of the store (one Redis script on the `{gateway-keys}` slot; one lock of
//! the embedded store's memory), a **hold** of the call's largest possible cost on every
//! scope with a budget or a parallel limit, counts it towards each `rpm_limit`, or refuses
//! the call naming the first scope and limit it would cross. [`KeyStore::settle`]
//! releases holds and adds what calls really cost (and their tokens, for `tpm_limit`).
//!
//! The rule: a call is admitted while a scope's spend plus its holds is below its budget.
//! So every admitted call but the last finds room for its whole hold, and the spend once
//! every call has ended is below `max_budget` plus one hold (the largest a call of that
//! scope took), however many calls and replicas there are, as long as no call costs more
//! than its hold.
//!
//! **A replica's share.** An admission may ask for more than its call's hold
//! ([`Admission::most`]): the store then holds, in the same atomic step and under the same
//! rule, on each scope with a budget up to a quarter of the room it has left (never less
//! than the call's hold, never more than asked). Each such hold is the replica's share of
//! that scope: the gateway admits its next calls on the scope against it in its own
//! memory, without a round trip, and each call's settlement moves its cost from the
//! share's hold to the spend ([`Consume`]), so the store counts every call once, spent or
//! held, at every moment. Grants never exceed the
//! room but for the last one (the call's own hold where less is left), so the bound above
//! holds with shares too.
//!
//! A hold lives at most its lease ([`Admission::lease_ms`]): a replica that dies mid-call
//! cannot settle it, and on Redis the next admission on that scope drops it once its lease
//! has passed. The embedded store keeps holds in memory: they end with the process.
//!
//! [`KeyStore::admit`]: crate::KeyStore::admit
//! [`KeyStore::settle`]: crate::KeyStore::settle

/// What a call counts towards.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum BudgetScope {
    /// A virtual key, by its token: its spend is the key's counter (`/key/info`).
    Key(String),
    /// A session (a [`session_digest`](crate::keys::session_digest)) of a key: its spend
    /// expires [`SESSION_SPEND_TTL_MS`](crate::keys::SESSION_SPEND_TTL_MS) after its last
    /// call, whatever the window.
    Session { token: String, session: String },
    /// A user (LiteLLM's `user_id`).
    User(String),
    /// A team (LiteLLM's `team_id`).
    Team(String),
    /// A user's membership of a team: its own budget within the team's.
    Member { team: String, user: String },
}

impl BudgetScope {
    /// The scope's name in the store: unique per scope, of bounded length whatever the
    /// ids (longer ids are digested).
    pub fn name(&self) -> String {
        let bounded = |id: &str| {
            if id.len() <= 128 && !id.contains(['\0', '\n']) {
                id.to_owned()
            } else {
                format!("#{}", crate::keys::session_digest(id))
            }
        };
        match self {
            Self::Key(token) => format!("key:{token}"),
            Self::Session { token, session } => format!("session:{token}:{session}"),
            Self::User(user) => format!("user:{}", bounded(user)),
            Self::Team(team) => format!("team:{}", bounded(team)),
            // Digested together: a team id holding `:` cannot meet another pair's name.
            Self::Member { team, user } => format!(
                "member:{}",
                crate::keys::session_digest(&format!("{}\0{team}{user}", team.len()))
            ),
        }
    }

    /// The key whose deletion drops the scope's spend (spend of a deleted key is not
    /// counted); `None` for the scopes that outlive keys.
    pub fn key_token(&self) -> Option<&str> {
        match self {
            Self::Key(token) | Self::Session { token, .. } => Some(token),
            _ => None,
        }
    }
}

/// A scope and the limits a call is held to on it.
#[derive(Clone, Debug, PartialEq)]
pub struct ScopeLimits {
    pub scope: BudgetScope,
    /// The budget window the scope's spend counts in (0: a budget that never resets).
    pub window: u64,
    pub max_budget: Option<f64>,
    /// Calls in flight at most (LiteLLM's `max_parallel_requests`).
    pub max_parallel_requests: Option<u64>,
    /// Calls per minute at most (LiteLLM's `rpm_limit`): counted when admitted.
    pub rpm_limit: Option<u64>,
    /// Tokens per minute at most (LiteLLM's `tpm_limit`): a call is refused once the
    /// minute's tokens, counted when calls end, reach it.
    pub tpm_limit: Option<u64>,
}

impl ScopeLimits {
    /// `scope`'s budget (in `window`) and rate limits.
    pub fn new(
        scope: BudgetScope,
        window: u64,
        max_budget: Option<f64>,
        limits: &crate::RateLimits,
    ) -> Self {
        Self {
            scope,
            window,
            max_budget,
            max_parallel_requests: limits.max_parallel_requests,
            rpm_limit: limits.rpm_limit,
            tpm_limit: limits.tpm_limit,
        }
    }

    /// Whether a call holds part of this scope while in flight.
    pub fn holds(&self) -> bool {
        self.max_budget.is_some() || self.max_parallel_requests.is_some()
    }

    /// Whether the scope limits anything.
    pub fn limits(&self) -> bool {
        self.holds() || self.rpm_limit.is_some() || self.tpm_limit.is_some()
    }
}

/// A call asking to be admitted.
#[derive(Clone, Debug, PartialEq)]
pub struct Admission {
    /// The hold's id: unique per call.
    pub hold: String,
    pub scopes: Vec<ScopeLimits>,
    /// The call's largest possible cost: what it holds of each budget.
    pub amount: f64,
    /// The most to hold, at least `amount`: a replica's share of each scope's budget,
    /// granted up to a quarter of the room it has left (never less than `amount`).
    /// `amount` itself: a call's own hold.
    pub most: f64,
    /// How long the hold lives unless settled (milliseconds): longer than any call may
    /// last.
    pub lease_ms: i64,
    /// Now, in milliseconds since the epoch (the minute of the rate limits).
    pub now_ms: i64,
}

/// What a scope had when a call was refused.
#[derive(Clone, Debug, PartialEq)]
pub enum Refusal {
    /// Its spend plus its holds reached its budget.
    Budget {
        scope: BudgetScope,
        spent: f64,
        reserved: f64,
        max_budget: f64,
    },
    /// One of its rate limits: the counts as they were (the limits are the caller's).
    Rate {
        scope: BudgetScope,
        in_flight: u64,
        requests: u64,
        tokens: u64,
    },
}

/// Spend to add to a scope's counter once calls end.
#[derive(Clone, Debug, PartialEq)]
pub struct ScopeSpend {
    pub scope: BudgetScope,
    pub window: u64,
    pub amount: f64,
    /// Tokens to count towards the minute's `tpm_limit` (0 when the scope has none).
    pub tokens: u64,
}

/// A hold to release: its id and the scopes it was taken on.
#[derive(Clone, Debug, PartialEq)]
pub struct Release {
    pub hold: String,
    pub scopes: Vec<BudgetScope>,
}

/// What calls admitted against a share cost: taken off the share's hold on each of its
/// scopes (down to nothing, never below) as their spend is added.
#[derive(Clone, Debug, PartialEq)]
pub struct Consume {
    pub hold: String,
    pub scopes: Vec<BudgetScope>,
    pub amount: f64,
}

/// What ended calls settle, in one store write: their spend is added, then what they cost
/// taken off the shares they were admitted against, then holds released, so that no
/// moment counts neither.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settlement {
    pub spend: Vec<ScopeSpend>,
    pub consumed: Vec<Consume>,
    pub releases: Vec<Release>,
    /// Now, in milliseconds since the epoch (the minute tokens count in).
    pub now_ms: i64,
}

/// The minute `now_ms` falls in: the rate limits' window.
pub fn minute(now_ms: i64) -> i64 {
    now_ms.div_euclid(60_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_names_are_distinct_and_bounded() {
        let long = "x".repeat(10_000);
        let names = [
            BudgetScope::User("a:b".into()).name(),
            BudgetScope::Team("a:b".into()).name(),
            BudgetScope::Member {
                team: "a".into(),
                user: "b:c".into(),
            }
            .name(),
            BudgetScope::Member {
                team: "a:b".into(),
                user: "c".into(),
            }
            .name(),
            BudgetScope::User(long.clone()).name(),
        ];
        let unique: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
        assert!(names.iter().all(|name| name.len() < 200));
        assert_eq!(minute(119_999), 1);
    }
}
