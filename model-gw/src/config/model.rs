//! A model entry and the configuration in effect, as the gateway routes by them.

use std::time::Duration;

use http::{HeaderName, HeaderValue};

use crate::budget::Prices;

/// One model a client may ask for.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ModelEntry {
    pub model_name: String,
    /// The upstream model with its routing prefix (spec 2.5).
    pub model: String,
    pub api_base: String,
    pub api_key: String,
    /// `model_info`: what `/model/info` says of it (LiteLLM's keys), as configured.
    pub model_info: Option<serde_json::Value>,
    /// How its calls are made, when the entry says.
    pub params: CallParams,
    /// Its prices per token, from `model_info`: what its calls cost.
    pub prices: Prices,
    /// Added at runtime (`/model/new`), not by the operator's file: its upstream is held
    /// to the egress rules (see `egress`).
    pub added: bool,
    /// The upstream's base URL, parsed at the entry's first call (see `routing`).
    pub base_url: BaseUrl,
}

/// A parsed URL kept with the entry it was parsed from, so that a call does not parse its
/// upstream's URL again: `None` until the first call, then the URL (or `None` inside, for
/// a base that does not parse). It is derived from the entry's other fields, so entries
/// compare equal whatever it holds.
#[derive(Clone, Debug, Default)]
pub struct BaseUrl(pub std::sync::OnceLock<Option<std::sync::Arc<crate::routing::Base>>>);

impl PartialEq for BaseUrl {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for BaseUrl {}

/// An entry's settings for its upstream calls; `None`: the gateway's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallParams {
    /// How long the upstream may take to begin its answer (LiteLLM's `timeout`, in
    /// seconds); between a stream's chunks `--gateway-read-timeout` still applies.
    pub timeout: Option<Duration>,
    /// How many times a call is tried again (LiteLLM's `num_retries`).
    pub num_retries: Option<u32>,
    /// `/v1/messages` goes to the upstream as it is, not translated to chat completions.
    pub native_messages: bool,
    /// The model takes `reasoning_effort` (`model_info.supports_reasoning`, LiteLLM's
    /// key): a translated call's thinking settings become one.
    pub takes_reasoning: bool,
    /// The upstream has no `/responses` (`responses_api: chat`): Responses API calls are
    /// bridged to chat completions.
    pub responses_via_chat: bool,
    /// Calls of the entry in flight at once on a replica, at most (LiteLLM's
    /// `max_parallel_requests`); then 429.
    pub max_parallel_requests: Option<u32>,
}

/// Whether `model_info` says the model takes `reasoning_effort`.
pub fn takes_reasoning(model_info: Option<&serde_json::Value>) -> bool {
    model_info
        .and_then(|info| info.get("supports_reasoning"))
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false)
}

/// The most retries an entry may ask for: one client call causes at most this many
/// upstream calls, plus one.
pub const MAX_RETRIES: u32 = 5;

impl std::fmt::Debug for ModelEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelEntry")
            .field("model_name", &self.model_name)
            .field("model", &self.model)
            .field("api_base", &self.api_base)
            .finish_non_exhaustive()
    }
}

/// The configuration in effect.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GatewayConfig {
    pub models: Vec<ModelEntry>,
    /// `general_settings.forward_client_headers_to_llm_api`.
    pub forward_client_headers: bool,
    /// Sent on every outbound request.
    pub extra_headers: Vec<(HeaderName, HeaderValue)>,
    /// A digest of the file's text: models added through the API belong to it.
    pub scope: String,
    /// What the file says that the gateway does not use: logged when it is loaded, and
    /// reported by `sandgate check-config`.
    pub warnings: Vec<String>,
}
