//! `POST` and `GET /api/v1/settings/profiles/{profile_name}` → the Settings service.

use axum::Json;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use bytes::Bytes;
use http::HeaderMap;
use sandgate_proto::settings::v1::{GetLlmProfileRequest, LlmProfile, SaveLlmProfileRequest};
use std::collections::HashMap;

use serde::Serialize;
use utoipa::ToSchema;

use crate::error::{ApiError, DetailBody, ValidationBody};
use crate::state::AppState;
use crate::{body, metadata};

/// An LLM profile: as saved (the body of a save, which the Settings service reads) and as
/// answered (with its name).
#[derive(Serialize, ToSchema)]
#[schema(as = LLMProfile)]
pub(crate) struct Profile {
    // Answered, but no field of a saved body (the path names the profile): the schema,
    // which is also the body's, leaves it out.
    #[schema(ignore)]
    profile_name: String,
    #[schema(default = false, required = false)]
    preserve_existing_api_key: bool,
    #[schema(inline)]
    llm: Llm,
}

/// The profile's model and where it is called.
#[derive(Serialize, ToSchema)]
pub(crate) struct Llm {
    model: String,
    #[schema(required = false)]
    base_url: String,
    /// x-gateway-session-id is reserved and rejected
    #[schema(required = false)]
    extra_headers: HashMap<String, String>,
}

fn rest(
    profile_name: String,
    preserve_existing_api_key: bool,
    llm: Option<LlmProfile>,
) -> Json<Profile> {
    let llm = llm.unwrap_or_default();
    Json(Profile {
        profile_name,
        preserve_existing_api_key,
        llm: Llm {
            model: llm.model,
            base_url: llm.base_url,
            extra_headers: llm.extra_headers,
        },
    })
}

#[utoipa::path(
    post,
    path = "/api/v1/settings/profiles/{profile_name}",
    operation_id = "save_llm_profile",
    tag = "Settings",
    summary = "Create or replace an LLM profile of the caller",
    security(("APIKeyHeader" = [])),
    params((
        "profile_name" = String,
        Path,
        min_length = 1,
        // Not blank as Rust's `str::trim` sees it (the Settings service's rule).
        pattern = "[^\\t-\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]",
    )),
    request_body(content = Profile),
    responses(
        (status = 200, description = "The saved profile", body = Profile),
        (status = 401, description = "No valid key", body = DetailBody),
        (status = 422, description = "Validation error", body = ValidationBody),
        (status = 413, description = "Body larger than the configured limit", body = DetailBody),
    ),
)]
pub async fn save(
    State(state): State<AppState>,
    Path(profile_name): Path<String>,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<Profile>, ApiError> {
    let payload = body::buffered(payload, state.body_limit)?;
    let request = SaveLlmProfileRequest {
        profile_name,
        json: payload,
        ..Default::default()
    };
    let saved = state
        .settings
        .clone()
        .save_llm_profile(metadata::request(&headers, request))
        .await?
        .into_inner();
    Ok(rest(
        saved.profile_name,
        saved.preserve_existing_api_key,
        saved.llm,
    ))
}

#[utoipa::path(
    get,
    path = "/api/v1/settings/profiles/{profile_name}",
    operation_id = "get_llm_profile",
    tag = "Settings",
    summary = "One of the caller's LLM profiles",
    security(("APIKeyHeader" = [])),
    params(("profile_name" = String, Path, min_length = 1)),
    responses(
        (status = 200, description = "The profile", body = Profile),
        (status = 401, description = "No valid key", body = DetailBody),
        (status = 404, description = "No such profile", body = DetailBody),
    ),
)]
pub async fn get(
    State(state): State<AppState>,
    Path(profile_name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Profile>, ApiError> {
    let profile = state
        .settings
        .clone()
        .get_llm_profile(metadata::request(
            &headers,
            GetLlmProfileRequest { profile_name },
        ))
        .await?
        .into_inner();
    Ok(rest(
        profile.profile_name,
        profile.preserve_existing_api_key,
        profile.llm,
    ))
}
