//! The model gateway's organisation bodies (LiteLLM's `/team/*`, `/user/*`,
//! `/budget/info`, `/global/spend/report`), as the document shows them. They are
//! LiteLLM's JSON, which the ModelGateway service reads and writes (the edge passes them
//! through): these types only describe them.
#![expect(
    dead_code,
    reason = "the types describe bodies the service parses and renders"
)]

use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

/// LiteLLM's rate limits of a key, or of a team's or a user's keys (all their calls
/// together), across replicas; a limit of 0 refuses every call, null none
#[derive(Deserialize, ToSchema)]
pub(crate) struct RateLimitFields {
    /// Calls in flight at once
    #[schema(minimum = 0)]
    max_parallel_requests: Option<u64>,
    /// Calls per minute
    #[schema(minimum = 0)]
    rpm_limit: Option<u64>,
    /// Tokens per minute (of the calls that ended in it)
    #[schema(minimum = 0)]
    tpm_limit: Option<u64>,
}

/// A team's fields; on an update, those not named stay as they are
#[derive(Deserialize, ToSchema)]
pub(crate) struct TeamFields {
    #[schema(max_length = 256)]
    team_alias: Option<String>,
    /// What the team's keys may spend together (in each period, with `budget_duration`)
    #[schema(minimum = 0)]
    max_budget: Option<f64>,
    /// How often the team's spend starts again: `30s`, `30m`, `30h`, `30d`, `2w`, `1mo`
    #[schema(pattern = r"^\s*[0-9]+(s|m|h|d|w|mo)\s*$")]
    budget_duration: Option<String>,
    /// Model names the team's keys may call; empty or null: every model
    #[schema(max_items = 1000)]
    models: Option<Vec<String>>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
    /// A blocked team's keys are refused
    blocked: Option<bool>,
    #[serde(flatten)]
    limits: RateLimitFields,
}

/// `POST /team/new`'s body.
#[derive(Deserialize, ToSchema)]
pub(crate) struct NewTeam {
    /// The team's id; without it, a new UUID
    #[schema(min_length = 1, max_length = 256)]
    team_id: Option<String>,
    #[serde(flatten)]
    fields: TeamFields,
}

/// `POST /team/update`'s body.
#[derive(Deserialize, ToSchema)]
pub(crate) struct UpdateTeam {
    #[schema(min_length = 1, max_length = 256)]
    team_id: String,
    #[serde(flatten)]
    fields: TeamFields,
}

/// A body naming one team (`/team/block`, `/team/unblock`).
#[derive(Deserialize, ToSchema)]
pub(crate) struct TeamId {
    #[schema(min_length = 1, max_length = 256)]
    team_id: String,
}

/// `POST /team/delete`'s body.
#[derive(Deserialize, ToSchema)]
pub(crate) struct DeleteTeams {
    #[schema(min_items = 1, max_items = 1000)]
    team_ids: Vec<String>,
}

/// A member of a team.
#[derive(Deserialize, ToSchema)]
pub(crate) struct Member {
    #[schema(min_length = 1, max_length = 256)]
    user_id: String,
    /// `user` (the default) or `admin`
    role: Option<String>,
}

/// `POST /team/member_add`'s body: `member` is one member or a list of them.
#[derive(Deserialize, ToSchema)]
pub(crate) struct AddMembers {
    #[schema(min_length = 1, max_length = 256)]
    team_id: String,
    #[schema(value_type = Object)]
    member: Value,
    /// What each added member's calls through the team's keys may spend
    #[schema(minimum = 0)]
    max_budget_in_team: Option<f64>,
}

/// `POST /team/member_update`'s body.
#[derive(Deserialize, ToSchema)]
pub(crate) struct UpdateMember {
    #[schema(min_length = 1, max_length = 256)]
    team_id: String,
    #[schema(min_length = 1, max_length = 256)]
    user_id: String,
    #[schema(minimum = 0)]
    max_budget_in_team: Option<f64>,
    role: Option<String>,
}

/// `POST /team/member_delete`'s body.
#[derive(Deserialize, ToSchema)]
pub(crate) struct DeleteMember {
    #[schema(min_length = 1, max_length = 256)]
    team_id: String,
    #[schema(min_length = 1, max_length = 256)]
    user_id: String,
}

/// A team as LiteLLM shows it: `team_id`, `team_alias`, `max_budget`, `spend` (what its
/// keys spent in the budget's current period, whichever keys they were),
/// `budget_duration`, `budget_reset_at`, `models`, `metadata`, `blocked`,
/// `members_with_roles`
#[derive(ToSchema)]
#[schema(value_type = Object)]
pub(crate) struct Team(Value);

/// `/team/info`'s answer: `team_id`, `team_info` (the team, with its `spend`), `keys`,
/// `team_memberships` (each member's `user_id`, `budget_id`, `spend` and
/// `litellm_budget_table.max_budget`)
#[derive(ToSchema)]
#[schema(value_type = Object)]
pub(crate) struct TeamInfo(Value);

/// A user's fields; on an update, those not named stay as they are. `spend` (on an
/// update) sets what the user is counted to have spent
#[derive(Deserialize, ToSchema)]
pub(crate) struct UserFields {
    #[schema(max_length = 256)]
    user_email: Option<String>,
    /// What the user's keys may spend together (in each period, with `budget_duration`)
    #[schema(minimum = 0)]
    max_budget: Option<f64>,
    /// How often the user's spend starts again: `30s`, `30m`, `30h`, `30d`, `2w`, `1mo`
    #[schema(pattern = r"^\s*[0-9]+(s|m|h|d|w|mo)\s*$")]
    budget_duration: Option<String>,
    #[schema(max_items = 1000)]
    models: Option<Vec<String>>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
    #[serde(flatten)]
    limits: RateLimitFields,
}

/// `POST /user/new`'s body.
#[derive(Deserialize, ToSchema)]
pub(crate) struct NewUser {
    #[schema(min_length = 1, max_length = 256)]
    user_id: Option<String>,
    /// Teams the user joins (a null names none)
    #[schema(max_items = 1000)]
    teams: Option<Vec<Option<String>>>,
    /// Whether a key is made for the user (LiteLLM's default: yes)
    auto_create_key: Option<bool>,
    #[serde(flatten)]
    fields: UserFields,
}

/// `POST /user/update`'s body.
#[derive(Deserialize, ToSchema)]
pub(crate) struct UpdateUser {
    #[schema(min_length = 1, max_length = 256)]
    user_id: String,
    #[schema(minimum = 0)]
    spend: Option<f64>,
    #[serde(flatten)]
    fields: UserFields,
}

/// `POST /user/delete`'s body: the users go with their keys.
#[derive(Deserialize, ToSchema)]
pub(crate) struct DeleteUsers {
    #[schema(min_items = 1, max_items = 1000)]
    user_ids: Vec<String>,
}

/// A user as LiteLLM shows it: `user_id`, `user_email`, `max_budget`, `spend` (in the
/// budget's current period), `budget_duration`, `budget_reset_at`, `models`, `teams`,
/// `metadata` (with `key` when `/user/new` made one)
#[derive(ToSchema)]
#[schema(value_type = Object)]
pub(crate) struct User(Value);

/// `/user/info`'s answer: `user_id`, `user_info` (the user, with its `spend`), `keys`,
/// `teams`
#[derive(ToSchema)]
#[schema(value_type = Object)]
pub(crate) struct UserInfo(Value);

/// `/user/list`'s answer: `users` (each as `/v2/user/info` shows it), `total`, `page`,
/// `page_size`, `total_pages`
#[derive(ToSchema)]
#[schema(value_type = Object)]
pub(crate) struct UserList(Value);

/// `POST /budget/info`'s body: budget ids, as `/team/info` gives the memberships'.
#[derive(Deserialize, ToSchema)]
pub(crate) struct BudgetIds {
    #[schema(min_items = 1, max_items = 1000)]
    budgets: Vec<String>,
}

/// The budgets found, each `budget_id` and `max_budget`
#[derive(ToSchema)]
#[schema(value_type = Vec<Object>)]
pub(crate) struct Budgets(Value);

/// One entry per day with spend: `group_by_day` (`2026-03-01`) and the list of the
/// grouping (`teams`, `users`, `api_keys`, `models` or `sessions`), each its id and
/// `total_spend`
#[derive(ToSchema)]
#[schema(value_type = Vec<Object>)]
pub(crate) struct SpendReport(Value);
