//! The model gateway's organisation model (LiteLLM's `/team/*`, `/user/*`,
//! `/budget/info`, `/global/spend/report`) → the ModelGateway service's `ManageOrgs`:
//! bodies and queries pass as LiteLLM's JSON, which the service reads; errors in
//! OpenAI's shape, as on the gateway's other routes. The master key's only.

use std::collections::HashMap;

use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, header};
use sandgate_proto::models::v1::{ManageOrgsRequest, OrgOperation};

use crate::client::ClientAddress;
use crate::gateway_types::{KeyErrors, OpenAIError};
use crate::keys::query_object;
use crate::metadata;
use crate::models::{GatewayError, body, client};
use crate::org_types::{
    AddMembers, BudgetIds, Budgets, DeleteMember, DeleteTeams, DeleteUsers, NewTeam, NewUser,
    SpendReport, Team, TeamId, TeamInfo, UpdateMember, UpdateTeam, UpdateUser, User, UserInfo,
    UserList,
};
use crate::state::AppState;

async fn manage(
    state: &AppState,
    headers: &HeaderMap,
    address: ClientAddress,
    operation: OrgOperation,
    body: Bytes,
) -> Result<Response, GatewayError> {
    let answer = client(state)?
        .manage_orgs(metadata::request_for(
            headers,
            address,
            ManageOrgsRequest {
                operation: operation.into(),
                body,
            },
        ))
        .await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], answer.body).into_response())
}

type Payload = Result<Bytes, BytesRejection>;
type Params = Result<Query<HashMap<String, String>>, QueryRejection>;

/// `POST /team/new`.
#[utoipa::path(post, path = "/team/new", operation_id = "new_team", tag = "Model gateway",
    summary = "A team: its budget, models and metadata (LiteLLM's `/team/new`)",
    security(("MasterKey" = [])), request_body(content = NewTeam),
    responses(
        (status = 200, description = "The team", body = Team),
        (status = 400, description = "A field of the wrong type or out of bounds, or the team id is another team's (`Team id = … already exists. Please use a different team id.`)", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: teams are the master key's", body = OpenAIError),
        (status = 413, description = "The body is larger than the edge's body limit", body = OpenAIError),
    ),
)]
pub async fn team_new(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    payload: Payload,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        OrgOperation::TeamNew,
        body(payload)?,
    )
    .await
}

/// `GET /team/info?team_id=`.
#[utoipa::path(get, path = "/team/info", operation_id = "team_info", tag = "Model gateway",
    summary = "A team, its spend, keys and members with their budgets and spend (LiteLLM's `/team/info`)",
    security(("MasterKey" = [])),
    params(("team_id" = String, Query, description = "The team")),
    responses(
        (status = 200, description = "The team", body = TeamInfo),
        (status = 400, description = "No `team_id`", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: teams are the master key's", body = OpenAIError),
        (status = 404, description = "No such team", body = OpenAIError),
    ),
)]
pub async fn team_info(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    query: Params,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        OrgOperation::TeamInfo,
        query_object(query)?,
    )
    .await
}

/// `GET /team/list`.
#[utoipa::path(get, path = "/team/list", operation_id = "list_teams", tag = "Model gateway",
    summary = "Every team with its spend (LiteLLM's `/team/list`)",
    security(("MasterKey" = [])),
    params(("user_id" = Option<String>, Query, description = "Only the teams this user is a member of")),
    responses(
        (status = 200, description = "The teams, by id", body = Vec<Team>),
        KeyErrors,
        (status = 403, description = "A virtual key: teams are the master key's", body = OpenAIError),
    ),
)]
pub async fn team_list(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    query: Params,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        OrgOperation::TeamList,
        query_object(query)?,
    )
    .await
}

/// `GET /user/list`.
#[utoipa::path(get, path = "/user/list", operation_id = "list_users", tag = "Model gateway",
    summary = "A page of the users with their spend (LiteLLM's `/user/list`)",
    security(("MasterKey" = [])),
    params(
        ("page" = Option<u64>, Query, minimum = 1, description = "The page, from 1 (default 1)"),
        ("page_size" = Option<u64>, Query, minimum = 1, description = "Users a page (default 25, at most 100)"),
        ("user_ids" = Option<String>, Query, description = "Only these users (comma-separated ids)"),
    ),
    responses(
        (status = 200, description = "A page of the users, by id", body = UserList),
        (status = 400, description = "`page` or `page_size` not a whole number from 1", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: users are the master key's", body = OpenAIError),
    ),
)]
pub async fn user_list(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    query: Params,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        OrgOperation::UserList,
        query_object(query)?,
    )
    .await
}

/// `POST /team/update`.
#[utoipa::path(post, path = "/team/update", operation_id = "update_team", tag = "Model gateway",
    summary = "Changes the fields of a team the body names (LiteLLM's `/team/update`)",
    security(("MasterKey" = [])), request_body(content = UpdateTeam),
    responses(
        (status = 200, description = "`team_id` and the team as it is now, in `data`", body = TeamInfo),
        (status = 400, description = "No `team_id`, or a field of the wrong type or out of bounds", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: teams are the master key's", body = OpenAIError),
        (status = 404, description = "No such team", body = OpenAIError),
        (status = 409, description = "Other calls kept changing the team meanwhile; retry", body = OpenAIError),
        (status = 413, description = "The body is larger than the edge's body limit", body = OpenAIError),
    ),
)]
pub async fn team_update(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    payload: Payload,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        OrgOperation::TeamUpdate,
        body(payload)?,
    )
    .await
}

/// `POST /team/delete`.
#[utoipa::path(post, path = "/team/delete", operation_id = "delete_teams", tag = "Model gateway",
    summary = "Deletes teams, all of them or none; their spend stays counted",
    security(("MasterKey" = [])), request_body(content = DeleteTeams),
    responses(
        (status = 200, description = "`deleted_teams`", body = TeamInfo),
        (status = 400, description = "No `team_ids`", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: teams are the master key's", body = OpenAIError),
        (status = 404, description = "A named team does not exist: none was deleted", body = OpenAIError),
        (status = 413, description = "The body is larger than the edge's body limit", body = OpenAIError),
    ),
)]
pub async fn team_delete(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    payload: Payload,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        OrgOperation::TeamDelete,
        body(payload)?,
    )
    .await
}

/// `POST /team/member_add`.
#[utoipa::path(post, path = "/team/member_add", operation_id = "add_team_members", tag = "Model gateway",
    summary = "Adds users to a team, each with a budget in it (LiteLLM's `/team/member_add`)",
    security(("MasterKey" = [])), request_body(content = AddMembers),
    responses(
        (status = 200, description = "`updated_team`, `updated_users`, `updated_team_memberships`", body = TeamInfo),
        (status = 400, description = "A field of the wrong type, or a user already in the team (`User=… already in team=…`)", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: teams are the master key's", body = OpenAIError),
        (status = 404, description = "No such team", body = OpenAIError),
        (status = 409, description = "Other calls kept changing the team meanwhile; retry", body = OpenAIError),
        (status = 413, description = "The body is larger than the edge's body limit", body = OpenAIError),
    ),
)]
pub async fn member_add(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    payload: Payload,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        OrgOperation::TeamMemberAdd,
        body(payload)?,
    )
    .await
}

/// `POST /team/member_update`.
#[utoipa::path(post, path = "/team/member_update", operation_id = "update_team_member", tag = "Model gateway",
    summary = "Changes a member's budget in its team, or its role (LiteLLM's `/team/member_update`)",
    security(("MasterKey" = [])), request_body(content = UpdateMember),
    responses(
        (status = 200, description = "`team_id`, `user_id`, `max_budget_in_team`, `role`", body = TeamInfo),
        (status = 400, description = "A field of the wrong type or out of bounds", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: teams are the master key's", body = OpenAIError),
        (status = 404, description = "No such team, or the user is not in it", body = OpenAIError),
        (status = 409, description = "Other calls kept changing the team meanwhile; retry", body = OpenAIError),
        (status = 413, description = "The body is larger than the edge's body limit", body = OpenAIError),
    ),
)]
pub async fn member_update(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    payload: Payload,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        OrgOperation::TeamMemberUpdate,
        body(payload)?,
    )
    .await
}

/// `POST /team/member_delete`.
#[utoipa::path(post, path = "/team/member_delete", operation_id = "delete_team_member", tag = "Model gateway",
    summary = "Removes a user from a team (LiteLLM's `/team/member_delete`)",
    security(("MasterKey" = [])), request_body(content = DeleteMember),
    responses(
        (status = 200, description = "The team as it is now", body = Team),
        (status = 400, description = "A field of the wrong type", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: teams are the master key's", body = OpenAIError),
        (status = 404, description = "No such team, or the user is not in it", body = OpenAIError),
        (status = 409, description = "Other calls kept changing the team meanwhile; retry", body = OpenAIError),
        (status = 413, description = "The body is larger than the edge's body limit", body = OpenAIError),
    ),
)]
pub async fn member_delete(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    payload: Payload,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        OrgOperation::TeamMemberDelete,
        body(payload)?,
    )
    .await
}

/// `POST /team/block`.
#[utoipa::path(post, path = "/team/block", operation_id = "block_team", tag = "Model gateway",
    summary = "Blocks a team: its keys are refused (401, LiteLLM's answer) until it is unblocked",
    security(("MasterKey" = [])), request_body(content = TeamId),
    responses(
        (status = 200, description = "The team as it is now", body = Team),
        (status = 400, description = "No `team_id`", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: teams are the master key's", body = OpenAIError),
        (status = 404, description = "No such team", body = OpenAIError),
        (status = 409, description = "Other calls kept changing the team meanwhile; retry", body = OpenAIError),
        (status = 413, description = "The body is larger than the edge's body limit", body = OpenAIError),
    ),
)]
pub async fn team_block(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    payload: Payload,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        OrgOperation::TeamBlock,
        body(payload)?,
    )
    .await
}

/// `POST /team/unblock`.
#[utoipa::path(post, path = "/team/unblock", operation_id = "unblock_team", tag = "Model gateway",
    summary = "Unblocks a team: its keys call again",
    security(("MasterKey" = [])), request_body(content = TeamId),
    responses(
        (status = 200, description = "The team as it is now", body = Team),
        (status = 400, description = "No `team_id`", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: teams are the master key's", body = OpenAIError),
        (status = 404, description = "No such team", body = OpenAIError),
        (status = 409, description = "Other calls kept changing the team meanwhile; retry", body = OpenAIError),
        (status = 413, description = "The body is larger than the edge's body limit", body = OpenAIError),
    ),
)]
pub async fn team_unblock(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    payload: Payload,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        OrgOperation::TeamUnblock,
        body(payload)?,
    )
    .await
}

/// `POST /user/new`.
#[utoipa::path(post, path = "/user/new", operation_id = "new_user", tag = "Model gateway",
    summary = "A user, in the teams it names, with a key unless `auto_create_key` is false (LiteLLM's `/user/new`)",
    security(("MasterKey" = [])), request_body(content = NewUser),
    responses(
        (status = 200, description = "The user (and its `key`, shown once)", body = User),
        (status = 400, description = "A field of the wrong type or out of bounds", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: users are the master key's", body = OpenAIError),
        (status = 404, description = "A named team does not exist", body = OpenAIError),
        (status = 409, description = "The user id is another user's (`User with id = … already exists.`)", body = OpenAIError),
        (status = 413, description = "The body is larger than the edge's body limit", body = OpenAIError),
    ),
)]
pub async fn user_new(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    payload: Payload,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        OrgOperation::UserNew,
        body(payload)?,
    )
    .await
}

/// `GET /user/info?user_id=`.
#[utoipa::path(get, path = "/user/info", operation_id = "user_info", tag = "Model gateway",
    summary = "A user, its spend, keys and teams (LiteLLM's `/user/info`)",
    security(("MasterKey" = [])),
    params(("user_id" = String, Query, description = "The user")),
    responses(
        (status = 200, description = "The user", body = UserInfo),
        (status = 400, description = "No `user_id`", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: users are the master key's", body = OpenAIError),
        (status = 404, description = "No such user", body = OpenAIError),
    ),
)]
pub async fn user_info(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    query: Params,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        OrgOperation::UserInfo,
        query_object(query)?,
    )
    .await
}

/// `GET /v2/user/info?user_id=`.
#[utoipa::path(get, path = "/v2/user/info", operation_id = "user_info_v2", tag = "Model gateway",
    summary = "A user and its spend, without its keys and teams (LiteLLM's `/v2/user/info`)",
    security(("MasterKey" = [])),
    params(("user_id" = String, Query, description = "The user")),
    responses(
        (status = 200, description = "The user", body = User),
        (status = 400, description = "No `user_id`", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: users are the master key's", body = OpenAIError),
        (status = 404, description = "No such user", body = OpenAIError),
    ),
)]
pub async fn user_info_v2(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    query: Params,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        OrgOperation::UserInfoV2,
        query_object(query)?,
    )
    .await
}

/// `POST /user/update`.
#[utoipa::path(post, path = "/user/update", operation_id = "update_user", tag = "Model gateway",
    summary = "Changes the fields of a user the body names, its spend too (LiteLLM's `/user/update`)",
    security(("MasterKey" = [])), request_body(content = UpdateUser),
    responses(
        (status = 200, description = "`user_id` and the user as it is now, in `data`", body = UserInfo),
        (status = 400, description = "No `user_id`, or a field of the wrong type or out of bounds", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: users are the master key's", body = OpenAIError),
        (status = 404, description = "No such user", body = OpenAIError),
        (status = 409, description = "Other calls kept changing the user meanwhile; retry", body = OpenAIError),
        (status = 413, description = "The body is larger than the edge's body limit", body = OpenAIError),
    ),
)]
pub async fn user_update(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    payload: Payload,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        OrgOperation::UserUpdate,
        body(payload)?,
    )
    .await
}

/// `POST /user/delete`.
#[utoipa::path(post, path = "/user/delete", operation_id = "delete_users", tag = "Model gateway",
    summary = "Deletes users with their keys and memberships, all of them or none; their spend stays counted",
    security(("MasterKey" = [])), request_body(content = DeleteUsers),
    responses(
        (status = 200, description = "`deleted_users`", body = UserInfo),
        (status = 400, description = "No `user_ids`", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: users are the master key's", body = OpenAIError),
        (status = 404, description = "A named user does not exist: none was deleted", body = OpenAIError),
        (status = 413, description = "The body is larger than the edge's body limit", body = OpenAIError),
    ),
)]
pub async fn user_delete(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    payload: Payload,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        OrgOperation::UserDelete,
        body(payload)?,
    )
    .await
}

/// `POST /budget/info`.
#[utoipa::path(post, path = "/budget/info", operation_id = "budget_info", tag = "Model gateway",
    summary = "The budgets of team memberships, by the `budget_id`s `/team/info` gives them",
    security(("MasterKey" = [])), request_body(content = BudgetIds),
    responses(
        (status = 200, description = "The budgets found", body = Budgets),
        (status = 400, description = "No `budgets`", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: budgets are the master key's", body = OpenAIError),
        (status = 413, description = "The body is larger than the edge's body limit", body = OpenAIError),
    ),
)]
pub async fn budget_info(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    payload: Payload,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        OrgOperation::BudgetInfo,
        body(payload)?,
    )
    .await
}

/// `GET /global/spend/report?start_date=&end_date=&group_by=`.
#[utoipa::path(get, path = "/global/spend/report", operation_id = "spend_report", tag = "Model gateway",
    summary = "Spend per day, grouped by team, user, key, model or session, from exact counters",
    security(("MasterKey" = [])),
    params(
        ("start_date" = Option<String>, Query, format = Date, description = "The first day (`2026-03-01`); default: 30 days before `end_date`"),
        ("end_date" = Option<String>, Query, format = Date, description = "The last day; default: today (UTC). At most 400 days after `start_date`"),
        ("group_by" = Option<String>, Query, description = "`team` (default), `user` (or LiteLLM's `customer`), `api_key`, `model` or `session`"),
    ),
    responses(
        (status = 200, description = "One entry per day with spend", body = SpendReport),
        (status = 400, description = "A date that is not one, a range past 400 days, or an unknown `group_by`", body = OpenAIError),
        KeyErrors,
        (status = 403, description = "A virtual key: reports are the master key's", body = OpenAIError),
    ),
)]
pub async fn spend_report(
    State(state): State<AppState>,
    headers: HeaderMap,
    address: ClientAddress,
    query: Params,
) -> Result<Response, GatewayError> {
    manage(
        &state,
        &headers,
        address,
        OrgOperation::SpendReport,
        query_object(query)?,
    )
    .await
}
