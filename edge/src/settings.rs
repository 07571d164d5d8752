//! `POST` and `GET /api/v1/settings/profiles/{profile_name}` → the Settings service.

use axum::Json;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use bytes::Bytes;
use http::HeaderMap;
use sandgate_proto::settings::v1::{GetLlmProfileRequest, LlmProfile, SaveLlmProfileRequest};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::state::AppState;
use crate::{body, metadata};

fn rest(
    profile_name: String,
    preserve_existing_api_key: bool,
    llm: Option<LlmProfile>,
) -> Json<Value> {
    let llm = llm.unwrap_or_default();
    Json(json!({
        "profile_name": profile_name,
        "preserve_existing_api_key": preserve_existing_api_key,
        "llm": { "model": llm.model, "base_url": llm.base_url, "extra_headers": llm.extra_headers },
    }))
}

pub async fn save(
    State(state): State<AppState>,
    Path(profile_name): Path<String>,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
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

pub async fn get(
    State(state): State<AppState>,
    Path(profile_name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
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
