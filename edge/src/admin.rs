//! Runtime management (spec 4.1) → the RuntimeAdmin service: admin login and API keys
//! (the warm runtime configurations are `warm_configs.rs`).

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use bytes::Bytes;
use http::HeaderMap;
use sandgate_proto::admin::v1::{GetChallengeRequest, ListApiKeysRequest, LoginRequest};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::client::ClientAddress;
use crate::error::{ApiError, DetailBody, ValidationBody};
use crate::state::AppState;
use crate::{body, metadata};

/// `POST /api/admin/login`'s body.
#[derive(Deserialize, ToSchema)]
#[schema(as = LoginRequest)]
struct LoginBody {
    challenge: String,
    /// hex(PBKDF2-HMAC-SHA256(password, salt + challenge, iterations, 32))
    hash: String,
}

/// A login challenge.
#[derive(Serialize, ToSchema)]
pub(crate) struct Challenge {
    /// Random, single-use, valid 5 minutes
    challenge: String,
    /// ASCII hex, used as a string
    salt: String,
    /// PBKDF2-HMAC-SHA256 iterations
    iterations: u32,
}

/// `POST /api/admin/login`'s answer.
#[derive(Serialize, ToSchema)]
pub(crate) struct LoginResponse {
    /// HS256 JWT, valid 24 hours
    token: String,
}

/// An API key, with its value.
#[derive(Serialize, ToSchema)]
pub(crate) struct ApiKey {
    id: i64,
    name: String,
    key_value: String,
    max_runtimes: Option<i64>,
    remaining_credits: Option<i64>,
}

#[utoipa::path(
    get,
    path = "/api/admin/challenge",
    operation_id = "get_admin_challenge",
    tag = "Runtime management",
    summary = "A single-use login challenge",
    responses(
        (status = 200, description = "The challenge", body = Challenge),
        (status = 403, description = "No admin password is configured: `Admin functionality is disabled`", body = DetailBody),
        (
            status = 429,
            description = "Too many attempts from this client address in the current window (`ADMIN_LOGIN_RATE`): `Too many login attempts; retry in N seconds`",
            body = DetailBody,
            headers(("Retry-After" = i64, description = "Seconds until the client's window ends")),
        ),
    ),
)]
pub async fn challenge(
    State(state): State<AppState>,
    client: ClientAddress,
    headers: HeaderMap,
) -> Result<Json<Challenge>, ApiError> {
    let challenge = state
        .admin
        .clone()
        .get_challenge(metadata::request_for(
            &headers,
            client,
            GetChallengeRequest {},
        ))
        .await?
        .into_inner();
    Ok(Json(Challenge {
        challenge: challenge.challenge,
        salt: challenge.salt,
        iterations: challenge.iterations,
    }))
}

#[utoipa::path(
    post,
    path = "/api/admin/login",
    operation_id = "admin_login",
    tag = "Runtime management",
    summary = "Answer a challenge; get an admin token",
    request_body(content = LoginBody),
    responses(
        (status = 200, description = "The admin token", body = LoginResponse),
        (status = 401, description = "`Invalid or expired challenge` or `Invalid admin password`", body = DetailBody),
        (status = 403, description = "No admin password is configured: `Admin functionality is disabled`", body = DetailBody),
        (status = 422, description = "Validation error", body = ValidationBody),
        (status = 413, description = "Body larger than the configured limit", body = DetailBody),
        (
            status = 429,
            description = "Too many attempts from this client address in the current window (`ADMIN_LOGIN_RATE`), or, once the account is past `ADMIN_LOGIN_ACCOUNT_RATE`, a client that gave a wrong proof in the window: `Too many login attempts; retry in N seconds`",
            body = DetailBody,
            headers(("Retry-After" = i64, description = "Seconds until the client's window ends")),
        ),
    ),
)]
pub async fn login(
    State(state): State<AppState>,
    client: ClientAddress,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<LoginResponse>, ApiError> {
    let payload = body::buffered(payload, state.body_limit)?;
    let LoginBody { challenge, hash } = body::decode(&payload)?;
    let token = admin_token(&state, &headers, client, challenge, hash).await?;
    Ok(Json(LoginResponse { token }))
}

/// The admin token for an answered challenge, as the RuntimeAdmin service judges it (its
/// login rates by the client's address included): `POST /api/admin/login`'s, and the
/// console's sign-in.
pub(crate) async fn admin_token(
    state: &AppState,
    headers: &HeaderMap,
    client: ClientAddress,
    challenge: String,
    hash: String,
) -> Result<String, ApiError> {
    Ok(state
        .admin
        .clone()
        .login(metadata::request_for(
            headers,
            client,
            LoginRequest { challenge, hash },
        ))
        .await?
        .into_inner()
        .token)
}

#[utoipa::path(
    get,
    path = "/api/admin/api-keys",
    operation_id = "list_api_keys",
    tag = "Runtime management",
    summary = "The API keys, with their values",
    security(("AdminToken" = [])),
    responses(
        (status = 200, description = "The keys", body = Vec<ApiKey>),
        (status = 401, description = "Missing, invalid or expired admin token", body = DetailBody),
        (status = 403, description = "No admin password is configured: `Admin functionality is disabled`", body = DetailBody),
    ),
)]
pub async fn api_keys(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<ApiKey>>, ApiError> {
    let keys = state
        .admin
        .clone()
        .list_api_keys(metadata::request(&headers, ListApiKeysRequest {}))
        .await?
        .into_inner()
        .keys;
    Ok(Json(
        keys.into_iter()
            .map(|key| ApiKey {
                id: key.id,
                name: key.name,
                key_value: key.key_value,
                max_runtimes: key.max_runtimes,
                remaining_credits: key.remaining_credits,
            })
            .collect(),
    ))
}
