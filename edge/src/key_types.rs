//! The model gateway's key management bodies, as the document shows them. They are
//! LiteLLM's JSON, which the ModelGateway service reads and writes (the edge passes them
//! through): these types only describe them.
#![expect(
    dead_code,
    reason = "the types describe bodies the service parses and renders"
)]

use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, SchemaType, Type};

/// LiteLLM's key fields; those not named stay as they are on an update. Per-model limits
/// are refused: this gateway does not enforce them
#[derive(Deserialize, ToSchema)]
pub(crate) struct KeyFields {
    #[schema(max_length = 256)]
    key_alias: Option<String>,
    /// Model names the key may call (`prefix/*` and `*` too); empty or null: every model
    #[schema(schema_with = model_names)]
    models: Option<Vec<String>>,
    #[schema(minimum = 0)]
    max_budget: Option<f64>,
    /// How often the spend starts again: `30s`, `30m`, `30h`, `30d`, `2w`, `1mo`
    #[schema(pattern = r"^\s*[0-9]+(s|m|h|d|w|mo)\s*$")]
    budget_duration: Option<String>,
    #[schema(minimum = 0)]
    max_budget_per_session: Option<f64>,
    #[serde(flatten)]
    limits: crate::org_types::RateLimitFields,
    /// How long the key works from now; null: for ever
    #[schema(pattern = r"^\s*[0-9]+(s|m|h|d|w|mo)\s*$")]
    duration: Option<String>,
    #[schema(max_length = 256)]
    user_id: Option<String>,
    #[schema(max_length = 256)]
    team_id: Option<String>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
}

/// At most 1000 names of at most 256 characters, or null.
fn model_names() -> ArrayBuilder {
    ArrayBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Array, Type::Null]))
        .items(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .max_length(Some(256)),
        )
        .max_items(Some(1000))
        .description(Some(
            "Model names the key may call (`prefix/*` and `*` too); empty or null: every model",
        ))
}

/// `POST /key/generate`'s body.
#[derive(Deserialize, ToSchema)]
pub(crate) struct GenerateKey {
    #[serde(flatten)]
    fields: KeyFields,
    /// A key of the caller's choosing; without it, a new random `sk-` key
    #[schema(min_length = 16, max_length = 256)]
    key: Option<String>,
}

/// `POST /key/update`'s body.
#[derive(Deserialize, ToSchema)]
pub(crate) struct UpdateKey {
    #[serde(flatten)]
    fields: KeyFields,
    /// The key, or its token
    #[schema(min_length = 1)]
    key: String,
}

/// At least one of `keys` and `key_aliases`
#[derive(Deserialize, ToSchema)]
pub(crate) struct DeleteKeys {
    keys: Option<Vec<String>>,
    key_aliases: Option<Vec<String>>,
}

/// `POST /key/delete`'s answer.
#[derive(Deserialize, ToSchema)]
pub(crate) struct DeletedKeys {
    #[schema(required = false)]
    deleted_keys: Vec<Value>,
}

/// A virtual key as LiteLLM's proxy describes it; never the key itself but when generated
#[derive(Deserialize, ToSchema)]
pub(crate) struct KeyInfo {
    /// The key's sha256 hex: how it is named after it is generated
    #[schema(required = false)]
    token: String,
    /// The key abbreviated, `sk-...abcd`
    #[schema(required = false)]
    key_name: String,
    key_alias: Option<String>,
    /// Spent in the current budget window
    #[schema(required = false)]
    spend: f64,
    max_budget: Option<f64>,
    budget_duration: Option<String>,
    #[schema(format = DateTime)]
    budget_reset_at: Option<String>,
    /// Sandgate's own: the most one session (its `x-gateway-session-id` or
    /// `x-litellm-session-id`) may spend
    max_budget_per_session: Option<f64>,
    #[schema(required = false)]
    models: Vec<String>,
    user_id: Option<String>,
    team_id: Option<String>,
    #[schema(value_type = Object, required = false)]
    metadata: Value,
    #[schema(format = DateTime)]
    expires: Option<String>,
    #[schema(schema_with = key_status, required = false)]
    status: String,
    #[schema(required = false)]
    blocked: bool,
    #[schema(format = DateTime)]
    created_at: Option<String>,
    #[schema(format = DateTime)]
    updated_at: Option<String>,
}

fn key_status() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["active", "expired"]))
}

/// `POST /key/generate`'s answer: the key, and what is kept of it.
#[derive(Deserialize, ToSchema)]
pub(crate) struct GeneratedKey {
    #[serde(flatten)]
    info: KeyInfo,
    /// The key: shown this once
    #[schema(required = false)]
    key: String,
}

/// `GET /key/info`'s answer.
#[derive(Deserialize, ToSchema)]
pub(crate) struct KeyInfoAnswer {
    #[schema(required = false)]
    key: String,
    #[schema(required = false)]
    info: KeyInfo,
}

/// `GET /key/list`'s answer.
#[derive(Deserialize, ToSchema)]
pub(crate) struct KeyPage {
    #[schema(required = false)]
    keys: Vec<Value>,
    #[schema(required = false)]
    total_count: u64,
    #[schema(required = false)]
    current_page: u64,
    #[schema(required = false)]
    total_pages: u64,
}
