//! The Settings service: LLM profiles saved per sender (spec 2.6, 4.4).

use std::sync::Arc;

use std::collections::HashMap;

use sandgate_proto::error::{ErrorCode, ErrorDetail, decode_json};
use sandgate_proto::settings::v1::settings_server::Settings;
use sandgate_proto::settings::v1::{
    GetLlmProfileRequest, GetLlmProfileResponse, LlmProfile, SaveLlmProfileRequest,
    SaveLlmProfileResponse,
};
use serde::Deserialize;
use tonic::{Request, Response, Status};

use crate::auth::Authenticator;
use crate::validation;
use sandgate_conversation::LocItem;
use sandgate_store::{Store, StoredProfile};

/// Set by the client library to the conversation id on every LLM call; a profile may not
/// set it.
pub const RESERVED_HEADER: &str = "x-gateway-session-id";

pub struct SettingsService {
    store: Store,
    auth: Arc<Authenticator>,
}

impl SettingsService {
    pub fn new(store: Store, auth: Arc<Authenticator>) -> Self {
        Self { store, auth }
    }
}

/// The REST body of a save.
#[derive(Deserialize)]
struct ProfileBody {
    #[serde(default)]
    preserve_existing_api_key: bool,
    #[serde(deserialize_with = "sandgate_proto::json::object")]
    llm: LlmBody,
}

#[derive(Deserialize)]
struct LlmBody {
    model: String,
    #[serde(default)]
    base_url: String,
    #[serde(default)]
    extra_headers: HashMap<String, String>,
}

impl ProfileBody {
    fn decode(json: &[u8]) -> Result<(bool, LlmProfile), ErrorDetail> {
        let Self {
            preserve_existing_api_key,
            llm,
        } = decode_json(json)?;
        Ok((
            preserve_existing_api_key,
            LlmProfile {
                model: llm.model,
                base_url: llm.base_url,
                extra_headers: llm.extra_headers,
            },
        ))
    }
}

fn key(name: &str) -> LocItem {
    LocItem::Key(name.to_owned())
}

fn llm(profile: &StoredProfile) -> LlmProfile {
    LlmProfile {
        model: profile.model.clone(),
        base_url: profile.base_url.clone(),
        extra_headers: profile.extra_headers.clone().into_iter().collect(),
    }
}

#[tonic::async_trait]
impl Settings for SettingsService {
    async fn save_llm_profile(
        &self,
        request: Request<SaveLlmProfileRequest>,
    ) -> Result<Response<SaveLlmProfileResponse>, Status> {
        // A body that is not JSON at all is refused before the caller is authenticated,
        // as the reference does; its shape is checked after.
        if !request.get_ref().json.is_empty() {
            decode_json::<serde::de::IgnoredAny>(&request.get_ref().json)?;
        }
        let principal = self.auth.session(request.metadata()).await?;
        let mut request = request.into_inner();
        if !request.json.is_empty() {
            let (preserve_existing_api_key, llm) = ProfileBody::decode(&request.json)?;
            request.preserve_existing_api_key = preserve_existing_api_key;
            request.llm = Some(llm);
        }
        let Some(llm_profile) = request.llm else {
            return Err(validation::single("missing", vec![key("llm")], "Field required").into());
        };
        if request.profile_name.trim().is_empty() {
            return Err(validation::single(
                "string_too_short",
                vec![key("profile_name")],
                "String should have at least 1 character",
            )
            .into());
        }
        if let Some(name) = llm_profile
            .extra_headers
            .keys()
            .find(|name| name.eq_ignore_ascii_case(RESERVED_HEADER))
        {
            return Err(validation::single(
                "value_error",
                vec![key("llm"), key("extra_headers"), key(name)],
                format!(
                    "Value error, header '{RESERVED_HEADER}' is reserved: the client library sets it to the conversation id on every LLM call"
                ),
            )
            .into());
        }
        let profile = StoredProfile {
            name: request.profile_name,
            preserve_existing_api_key: request.preserve_existing_api_key,
            model: llm_profile.model,
            base_url: llm_profile.base_url,
            extra_headers: llm_profile.extra_headers.into_iter().collect(),
        };
        self.store
            .profiles
            .put_profile(&principal.owner(), &profile)
            .await
            .map_err(ErrorDetail::from)?;
        tracing::info!(profile = %profile.name, "LLM profile saved");
        Ok(Response::new(SaveLlmProfileResponse {
            llm: Some(llm(&profile)),
            profile_name: profile.name,
            preserve_existing_api_key: profile.preserve_existing_api_key,
        }))
    }

    async fn get_llm_profile(
        &self,
        request: Request<GetLlmProfileRequest>,
    ) -> Result<Response<GetLlmProfileResponse>, Status> {
        let principal = self.auth.session(request.metadata()).await?;
        let name = &request.get_ref().profile_name;
        let profile = self
            .store
            .profiles
            .get_profile(&principal.owner(), name)
            .await
            .map_err(ErrorDetail::from)?
            .ok_or_else(|| {
                ErrorDetail::new(ErrorCode::NotFound, format!("Profile '{name}' not found"))
            })?;
        Ok(Response::new(GetLlmProfileResponse {
            llm: Some(llm(&profile)),
            profile_name: profile.name,
            preserve_existing_api_key: profile.preserve_existing_api_key,
        }))
    }
}
