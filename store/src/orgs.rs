//! The model gateway's organisations, as LiteLLM's proxy keeps them: teams with their
//! members (each with a budget in the team), users, and what each spent.
//!
//! Spend is kept in counters apart from the keys: per key, user, team, team member,
//! session and model, in all (key, user, team, member, model) and per day (all six). A
//! key deleted or rotated leaves them as they are: a team's spend is what its keys spent,
//! whichever keys they were. Counters are added to by increments (atomic in the store),
//! so replicas adding at once count every call exactly once.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::StoreResult;

/// A team: LiteLLM's `/team/new` record.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StoredTeam {
    pub team_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_alias: Option<String>,
    /// What the team's keys may spend together (in each period, with one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_budget: Option<f64>,
    #[serde(default, flatten)]
    pub period: BudgetPeriod,
    /// The model names the team's keys may call; empty: every model.
    #[serde(default)]
    pub models: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Value>,
    /// A blocked team's keys are refused.
    #[serde(default)]
    pub blocked: bool,
    /// What the team's keys may do together, per minute and at once.
    #[serde(default, flatten)]
    pub limits: RateLimits,
    #[serde(default)]
    pub members: Vec<TeamMember>,
    /// Moves on with every write: writes are compare-and-swap on it.
    #[serde(default)]
    pub version: u64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// How often a budget's spend starts again from nothing (LiteLLM's `budget_duration`),
/// for a key, a team or a user.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetPeriod {
    /// LiteLLM's duration (`30s`, `1h`, `7d`, `1mo`); `None`: the budget never resets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_duration: Option<String>,
    /// When the first budget window began (milliseconds since the epoch): windows follow
    /// each other from it.
    #[serde(default)]
    pub budget_start_ms: i64,
}

/// LiteLLM's rate limits of a key, or of a team's or a user's keys together (`None`: no
/// limit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimits {
    /// Calls in flight at most, across replicas (`max_parallel_requests`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel_requests: Option<u64>,
    /// Calls per minute at most (`rpm_limit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm_limit: Option<u64>,
    /// Tokens per minute at most (`tpm_limit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm_limit: Option<u64>,
}

impl RateLimits {
    /// Whether any is set.
    pub fn any(&self) -> bool {
        self.max_parallel_requests.is_some() || self.rpm_limit.is_some() || self.tpm_limit.is_some()
    }
}

/// A user's membership of a team.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TeamMember {
    pub user_id: String,
    /// LiteLLM's roles: `user` or `admin`.
    pub role: String,
    /// What the member's calls through the team's keys may spend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_budget_in_team: Option<f64>,
}

/// A user: LiteLLM's `/user/new` record.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StoredUser {
    pub user_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_email: Option<String>,
    /// What the user's keys may spend together (in each period, with one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_budget: Option<f64>,
    #[serde(default, flatten)]
    pub period: BudgetPeriod,
    #[serde(default)]
    pub models: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Value>,
    /// The teams the user is a member of.
    #[serde(default)]
    pub teams: Vec<String>,
    /// What the user's keys may do together, per minute and at once.
    #[serde(default, flatten)]
    pub limits: RateLimits,
    #[serde(default)]
    pub version: u64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// What a spend counter counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SpendScope {
    /// A key, by its token.
    Key,
    User,
    Team,
    /// A membership: [`member_id`] of its team and user.
    Member,
    /// A session (conversation), by its id as the call named it (bounded); by day only.
    Session,
    /// A model, by the name the client asked for.
    Model,
}

impl SpendScope {
    pub const ALL: [SpendScope; 6] = [
        Self::Key,
        Self::User,
        Self::Team,
        Self::Member,
        Self::Session,
        Self::Model,
    ];

    /// Its name in stored counters' names.
    pub fn name(self) -> &'static str {
        match self {
            Self::Key => "key",
            Self::User => "user",
            Self::Team => "team",
            Self::Member => "member",
            Self::Session => "session",
            Self::Model => "model",
        }
    }

    /// Whether its counters are also kept in all (sessions are kept by day only: there
    /// are as many as conversations, and their days expire).
    pub fn has_total(self) -> bool {
        self != Self::Session
    }
}

/// A membership's counter id: the team and the user, which neither can hold (ids are
/// bounded text without control characters).
pub fn member_id(team_id: &str, user_id: &str) -> String {
    format!("{team_id}\u{1}{user_id}")
}

/// Spend to add to one counter, on one day (days since the epoch, UTC).
#[derive(Clone, Debug, PartialEq)]
pub struct SpendCount {
    pub day: u32,
    pub scope: SpendScope,
    pub id: String,
    pub amount: f64,
}

/// One counter of one day, as a report reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct DaySpend {
    pub day: u32,
    pub id: String,
    pub amount: f64,
}

/// How long per-day counters are kept after their day (totals are kept for ever).
pub const DAY_SPEND_RETENTION_DAYS: u32 = 400;

/// The days since the epoch (UTC) of `ms` since the epoch.
pub fn day_of(ms: i64) -> u32 {
    u32::try_from(ms.div_euclid(86_400_000)).unwrap_or(0)
}

/// Day `day` (since the epoch, UTC) as its date, `2026-11-29`.
pub fn date_of(day: u32) -> String {
    speedate::Date::from_timestamp(i64::from(day) * 86_400, false, &Default::default())
        .map(|date| date.to_string())
        .unwrap_or_default()
}

/// The gateway's teams, users and the spend counters of everything a call counts towards.
#[async_trait]
pub trait OrgStore: Send + Sync + 'static {
    /// Writes `team` when the stored one's version is `expected` (0: none stored), with
    /// its version moved on to `expected + 1`. `Ok(false)`: another writer got there
    /// first (or, with 0, the team exists).
    async fn put_team(&self, team: &StoredTeam, expected: u64) -> StoreResult<bool>;

    async fn get_team(&self, team_id: &str) -> StoreResult<Option<StoredTeam>>;

    /// Deletes the teams of `ids`; the ids that were there. Their spend stays.
    async fn delete_teams(&self, ids: &[String]) -> StoreResult<Vec<String>>;

    /// As [`OrgStore::put_team`], for users.
    async fn put_user(&self, user: &StoredUser, expected: u64) -> StoreResult<bool>;

    async fn get_user(&self, user_id: &str) -> StoreResult<Option<StoredUser>>;

    /// Deletes the users of `ids`; the ids that were there. Their spend stays.
    async fn delete_users(&self, ids: &[String]) -> StoreResult<Vec<String>>;

    /// A generation that moves on with every change of a team or a user record, this
    /// replica's or another's (on Redis, within milliseconds, by a notification), so that
    /// the gateway may keep the records a call reads until it moves. `None` while changes
    /// could go unseen (the notifications are down): then nothing may be kept.
    fn org_changes(&self) -> tokio::sync::watch::Receiver<Option<u64>>;

    /// Every team, by id (an organisation's teams: an operator's list, not a hot path).
    async fn list_teams(&self) -> StoreResult<Vec<StoredTeam>>;

    /// Every user, by id.
    async fn list_users(&self) -> StoreResult<Vec<StoredUser>>;

    /// Adds each count to its counter of its day and, where its scope has one, to its
    /// total: in one atomic write (one Redis transaction, one redb commit).
    async fn add_spend(&self, counts: &[SpendCount]) -> StoreResult<()>;

    /// The totals of `counters` (nothing spent: 0), in their order.
    async fn spend_totals(&self, counters: &[(SpendScope, String)]) -> StoreResult<Vec<f64>>;

    /// Every counter of `scope` on the days `from..=to`, by day then id.
    async fn spend_by_day(
        &self,
        scope: SpendScope,
        from: u32,
        to: u32,
    ) -> StoreResult<Vec<DaySpend>>;
}
