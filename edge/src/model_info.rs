//! The models' info over REST (`/model/info`, `/v1/model/info`, `/model_group/info`) →
//! the ModelGateway service: each entry's parameters (never its key) and the groups of
//! entries a model name routes to, in LiteLLM's shapes.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use http::HeaderMap;
use sandgate_proto::error::ErrorCode;
use sandgate_proto::models::v1::{GetModelInfoRequest, ModelInfo};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::gateway_types::{
    AddedParams, MasterKeyErrors, ModelGroupList, ModelInfoEntry, ModelInfoList,
};
use crate::metadata;
use crate::models::{GatewayError, client};
use crate::state::AppState;

#[derive(Deserialize)]
pub struct ModelInfoQuery {
    /// One model name; without it, every entry.
    litellm_model_id: Option<String>,
    model: Option<String>,
}

async fn model_infos(
    state: &AppState,
    headers: &HeaderMap,
    model_name: String,
) -> Result<Vec<ModelInfo>, GatewayError> {
    Ok(client(state)?
        .get_model_info(metadata::request(
            headers,
            GetModelInfoRequest { model_name },
        ))
        .await?
        .models)
}

fn info_object(info: &ModelInfo) -> Map<String, Value> {
    serde_json::from_slice(&info.model_info_json).unwrap_or_default()
}

const MODEL_INFO: &str = "Every model entry as LiteLLM's proxy lists it, `model_info` from the configuration; never the key; a virtual key sees its own models only";

/// `/v1/model/info`, `/model/info`: every entry (or the one `model` names) as LiteLLM's
/// proxy lists it, its key left out.
#[utoipa::path(
    get,
    path = "/v1/model/info",
    operation_id = "model_info",
    tag = "Model gateway",
    summary = MODEL_INFO,
    security(("MasterKey" = [])),
    params(
        ("model" = Option<String>, Query, description = "One model name"),
        ("litellm_model_id" = Option<String>, Query, description = "The same, under LiteLLM's name"),
    ),
    responses(
        (status = 200, description = "The entries", body = ModelInfoList),
        MasterKeyErrors,
    ),
)]
pub async fn model_info(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<ModelInfoQuery>, QueryRejection>,
) -> Result<Json<ModelInfoList>, GatewayError> {
    let Query(query) = query
        .map_err(|rejection| GatewayError::new(ErrorCode::BadRequest, rejection.body_text()))?;
    let wanted = query.model.or(query.litellm_model_id).unwrap_or_default();
    let infos = model_infos(&state, &headers, wanted).await?;
    let data = infos
        .iter()
        .map(|info| ModelInfoEntry {
            model_name: info.model_name.clone(),
            litellm_params: AddedParams {
                model: info.model.clone(),
                api_base: info.api_base.clone(),
            },
            model_info: info_object(info),
        })
        .collect();
    Ok(Json(ModelInfoList { data }))
}

#[utoipa::path(
    get,
    path = "/model/info",
    operation_id = "model_info_unversioned",
    tag = "Model gateway",
    summary = MODEL_INFO,
    security(("MasterKey" = [])),
    params(
        ("model" = Option<String>, Query, description = "One model name"),
        ("litellm_model_id" = Option<String>, Query, description = "The same, under LiteLLM's name"),
    ),
    responses(
        (status = 200, description = "The entries", body = ModelInfoList),
        MasterKeyErrors,
    ),
)]
pub async fn model_info_unversioned(
    state: State<AppState>,
    headers: HeaderMap,
    query: Result<Query<ModelInfoQuery>, QueryRejection>,
) -> Result<Json<ModelInfoList>, GatewayError> {
    model_info(state, headers, query).await
}

/// `/model_group/info`: one group per model name, its `model_info` keys at the top, as
/// LiteLLM's proxy answers.
#[utoipa::path(
    get,
    path = "/model_group/info",
    operation_id = "model_group_info",
    tag = "Model gateway",
    summary = "One group per model name, its `model_info` keys at the top, with `providers`, as LiteLLM's proxy answers; a virtual key sees its own models only",
    security(("MasterKey" = [])),
    responses(
        (status = 200, description = "The groups", body = ModelGroupList),
        MasterKeyErrors,
    ),
)]
pub async fn model_group_info(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<ModelGroupList>, GatewayError> {
    let infos = model_infos(&state, &headers, String::new()).await?;
    let mut groups: Vec<Map<String, Value>> = Vec::new();
    for info in &infos {
        let provider = if info.model.starts_with("gateway_proxy/") {
            "litellm_proxy"
        } else {
            "openai"
        };
        match groups
            .iter_mut()
            .find(|group| group["model_group"] == info.model_name.as_str())
        {
            Some(group) => {
                if let Some(Value::Array(providers)) = group.get_mut("providers")
                    && !providers.iter().any(|known| known == provider)
                {
                    providers.push(provider.into());
                }
            }
            None => {
                let mut group = info_object(info);
                group.insert("model_group".into(), info.model_name.clone().into());
                group.insert("providers".into(), Value::from(vec![provider]));
                groups.push(group);
            }
        }
    }
    Ok(Json(ModelGroupList { data: groups }))
}
