//! The gateway's configuration file (YAML, spec 2.4):
//!
//! ```yaml
//! model_list:
//!   - model_name: claude
//!     gateway_params:
//!       model: gateway_proxy/claude-sonnet
//!       api_base: https://gateway.example
//!       api_key: os.environ/GATEWAY_KEY
//! general_settings:
//!   forward_client_headers_to_llm_api: true
//! extra_headers:
//!   x-team: platform
//! ```
//!
//! A LiteLLM proxy's `config.yaml` of that shape loads unchanged: `litellm_params` is
//! another name for `gateway_params`; an entry's `model_info` is what `/model/info`
//! answers; `timeout`, `num_retries` and `max_parallel_requests` in its params apply to its
//! calls; `messages_api: native` sends `/v1/messages` to an `openai/` upstream
//! untranslated. `rpm` and `tpm` are
//! refused (this gateway does not enforce them: the external gateway does). Keys the
//! gateway does not use (`litellm_settings`, `router_settings`, a param such as
//! `temperature`) are warned about, never fatal.
//!
//! `os.environ/NAME` values are resolved when the file is read; a missing variable is an
//! error naming the entry. The file is re-read when it changes; a broken version keeps the
//! last good one.

mod checks;
mod file;
mod model;
mod reload;
#[cfg(test)]
mod tests;

pub use checks::{API_BASE_PATTERN, check_api_base, check_api_key, check_model};
pub use file::{EnvironmentReference, environment_references};
pub use model::{BaseUrl, CallParams, GatewayConfig, MAX_RETRIES, ModelEntry, takes_reasoning};
pub use reload::{ConfigFile, LOOK_EVERY};
