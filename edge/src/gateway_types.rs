//! The model gateway's requests and answers as the document shows them. The answers the
//! edge renders are built from these types; the key management bodies are LiteLLM's JSON,
//! read and written by the ModelGateway service, and these types only describe them.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use utoipa::openapi::schema::{ObjectBuilder, Type};

/// The `api_base`s `/model/new` takes, as the document states them: the gateway's own
/// check (`sandgate_model_gw::config::API_BASE_PATTERN`, which writes `[\s\S]` as
/// `(?s:.)`; a test holds them equal).
pub const API_BASE_PATTERN: &str = concat!(
    "^[Hh][Tt][Tt][Pp][Ss]?://",
    "(([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\\.)*[A-Za-z]([A-Za-z0-9-]*[A-Za-z0-9])?\\.?",
    "|(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3})",
    "(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4}))?",
    "([/?#][\\s\\S]*)?$",
);

/// The answers a master-key read of the gateway's store may give besides its own: a
/// missing or wrong key, and the store unavailable.
#[derive(utoipa::IntoResponses)]
#[expect(dead_code, reason = "describes the answers, for the document")]
pub(crate) enum MasterKeyErrors {
    /// Missing or wrong master key
    #[response(status = 401)]
    Unauthorized(OpenAIError),
    /// The store is unavailable; retry later
    #[response(status = 503)]
    Unavailable(OpenAIError),
}

/// The answers a key's management call may give besides its own: a missing, wrong or
/// expired key, and the store unavailable.
#[derive(utoipa::IntoResponses)]
#[expect(dead_code, reason = "describes the answers, for the document")]
pub(crate) enum KeyErrors {
    /// Missing or wrong key, or an expired virtual key
    #[response(status = 401)]
    Unauthorized(OpenAIError),
    /// The store is unavailable; retry later
    #[response(status = 503)]
    Unavailable(OpenAIError),
}

/// OpenAI's error shape, on the gateway's routes but the Messages API's.
#[derive(ToSchema)]
#[expect(
    dead_code,
    reason = "describes sandgate_proto::models::openai_error_of_type's body"
)]
pub(crate) struct OpenAIError {
    #[schema(inline)]
    error: OpenAIErrorBody,
}

#[derive(ToSchema)]
#[expect(
    dead_code,
    reason = "describes sandgate_proto::models::openai_error_of_type's body"
)]
struct OpenAIErrorBody {
    message: String,
    #[schema(rename = "type")]
    kind: String,
    /// The parameter at fault (`model`), or null
    #[schema(required = true)]
    param: Option<String>,
    code: String,
}

/// Anthropic's error shape, on the Messages API's routes
#[derive(Serialize, ToSchema)]
pub(crate) struct AnthropicError {
    #[serde(rename = "type")]
    #[schema(rename = "type", inline)]
    pub(crate) kind: ErrorTag,
    #[schema(inline)]
    pub(crate) error: AnthropicErrorBody,
}

/// The tag of Anthropic's error objects.
#[derive(Serialize, ToSchema)]
pub(crate) enum ErrorTag {
    #[serde(rename = "error")]
    Error,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct AnthropicErrorBody {
    /// `invalid_request_error`, `authentication_error`, `not_found_error`,
    /// `rate_limit_error`, `api_error`, …
    #[serde(rename = "type")]
    #[schema(rename = "type")]
    pub(crate) kind: String,
    pub(crate) message: String,
}

/// A model of the list.
#[derive(Serialize, ToSchema)]
pub(crate) struct Model {
    pub(crate) id: String,
    pub(crate) object: ModelTag,
    pub(crate) created: i64,
    pub(crate) owned_by: String,
}

#[derive(Serialize, ToSchema)]
pub(crate) enum ModelTag {
    #[serde(rename = "model")]
    Model,
}

/// `GET /v1/models`' answer.
#[derive(Serialize, ToSchema)]
pub(crate) struct ModelList {
    pub(crate) data: Vec<Model>,
    pub(crate) object: ListTag,
}

#[derive(Serialize, ToSchema)]
pub(crate) enum ListTag {
    #[serde(rename = "list")]
    List,
}

/// `POST /model/new`'s body.
#[derive(Deserialize, ToSchema)]
pub(crate) struct NewModel {
    #[schema(min_length = 1)]
    pub(crate) model_name: String,
    // Also read as `litellm_params`, LiteLLM's name (a doc comment here would wrap the
    // inlined schema, whose `api_base` pattern the document states).
    #[serde(
        deserialize_with = "sandgate_proto::json::object",
        alias = "litellm_params"
    )]
    #[schema(inline)]
    pub(crate) gateway_params: NewParams,
    /// LiteLLM's `model_info`: `input_cost_per_token`, `output_cost_per_token`,
    /// `cache_read_input_token_cost`, `cache_creation_input_token_cost` price its calls
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub(crate) model_info: Option<Value>,
    /// Take over a name the configuration file's wildcard entry routes (a name the file
    /// lists itself is never taken)
    #[serde(default)]
    #[schema(default = false)]
    pub(crate) replace_configured: bool,
}

#[derive(Deserialize, ToSchema)]
pub(crate) struct NewParams {
    /// `gateway_proxy/<m>` or `openai/<provider>/<m>`
    #[schema(pattern = "^(gateway_proxy|openai)/[\\s\\S]+$")]
    pub(crate) model: String,
    /// An http(s) URL
    #[schema(schema_with = api_base)]
    pub(crate) api_base: String,
    /// Sent as Authorization: Bearer <key>: no control character but tab
    #[serde(default)]
    #[schema(
        pattern = "^[^\\u0000-\\u0008\\u000a-\\u001f\\u007f]*$",
        required = false
    )]
    pub(crate) api_key: String,
    /// LiteLLM's per-deployment price per input token: set in `model_info`, in place of
    /// its own
    #[serde(default)]
    #[schema(minimum = 0)]
    pub(crate) input_cost_per_token: Option<f64>,
    /// Per output token, as `input_cost_per_token`
    #[serde(default)]
    #[schema(minimum = 0)]
    pub(crate) output_cost_per_token: Option<f64>,
    /// Per input token read from the provider's cache, as `input_cost_per_token`
    #[serde(default)]
    #[schema(minimum = 0)]
    pub(crate) cache_read_input_token_cost: Option<f64>,
    /// Per input token written to the provider's cache, as `input_cost_per_token`
    #[serde(default)]
    #[schema(minimum = 0)]
    pub(crate) cache_creation_input_token_cost: Option<f64>,
}

impl NewParams {
    /// `model_info` with the prices these params name set in it (theirs first, as
    /// LiteLLM prices a deployment by its `litellm_params` before its `model_info`).
    pub(crate) fn priced(&self, model_info: Option<Value>) -> Option<Value> {
        let prices = [
            ("input_cost_per_token", self.input_cost_per_token),
            ("output_cost_per_token", self.output_cost_per_token),
            (
                "cache_read_input_token_cost",
                self.cache_read_input_token_cost,
            ),
            (
                "cache_creation_input_token_cost",
                self.cache_creation_input_token_cost,
            ),
        ];
        let mut info = model_info.filter(|info| !info.is_null());
        for (key, price) in prices {
            let Some(price) = price else { continue };
            if let Some(object) = info
                .get_or_insert_with(|| Value::Object(serde_json::Map::new()))
                .as_object_mut()
            {
                object.insert(key.to_owned(), Value::from(price));
            }
        }
        info
    }
}

fn api_base() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(API_BASE_PATTERN))
        .description(Some("An http(s) URL"))
}

/// `POST /model/new`'s answer: the stored entry, without its key.
#[derive(Serialize, ToSchema)]
pub(crate) struct AddedModel {
    pub(crate) model_name: String,
    #[schema(inline)]
    pub(crate) gateway_params: AddedParams,
    pub(crate) added_at_ms: i64,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct AddedParams {
    pub(crate) model: String,
    pub(crate) api_base: String,
}

/// A model entry as LiteLLM's proxy lists it.
#[derive(Serialize, ToSchema)]
pub(crate) struct ModelInfoEntry {
    pub(crate) model_name: String,
    #[schema(inline)]
    pub(crate) litellm_params: AddedParams,
    #[schema(value_type = Object)]
    pub(crate) model_info: serde_json::Map<String, Value>,
}

/// `/model/info`'s answer.
#[derive(Serialize, ToSchema)]
pub(crate) struct ModelInfoList {
    pub(crate) data: Vec<ModelInfoEntry>,
}

/// `/model_group/info`'s answer: per model name, its `model_info` keys at the top, with
/// `model_group` and `providers`.
#[derive(Serialize, ToSchema)]
pub(crate) struct ModelGroupList {
    #[schema(value_type = Vec<ModelGroup>)]
    pub(crate) data: Vec<serde_json::Map<String, Value>>,
}

#[derive(ToSchema)]
#[expect(dead_code, reason = "describes the groups, built as maps")]
struct ModelGroup {
    model_group: String,
    providers: Vec<String>,
}

/// An entry of the spend log: metadata only, never prompt or response content.
#[derive(Serialize, ToSchema)]
pub(crate) struct SpendLogEntry {
    pub(crate) request_id: String,
    pub(crate) started_at_ms: i64,
    pub(crate) model: String,
    pub(crate) upstream_model: String,
    pub(crate) prompt_tokens: Option<u64>,
    pub(crate) completion_tokens: Option<u64>,
    pub(crate) total_tokens: Option<u64>,
    pub(crate) latency_ms: u64,
    pub(crate) status: u32,
    pub(crate) user: Option<String>,
    pub(crate) session_id: Option<String>,
    /// The API called: `completion`, `responses`, `anthropic_messages`, `count_tokens`,
    /// `embedding`, `text_completion`
    pub(crate) call_type: Option<String>,
    pub(crate) metadata: Option<Value>,
    /// The call's cost by its entry's prices (`model_info`); null when the entry has none
    pub(crate) spend: Option<f64>,
    /// The virtual key that called, as its sha256 hex; null for the master key
    pub(crate) api_key: Option<String>,
    pub(crate) key_alias: Option<String>,
    /// The virtual key's user and team (LiteLLM's `user` and `team_id` of a spend log)
    pub(crate) key_user_id: Option<String>,
    pub(crate) team_id: Option<String>,
}
