//! The configuration file's text read into a [`GatewayConfig`]: its YAML shape (LiteLLM's
//! names accepted), `os.environ/NAME` values resolved, every entry checked, the keys the
//! gateway does not use warned about.

use std::collections::BTreeMap;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::checks::{RESERVED_HEADERS, check_api_base, check_api_key, check_model};
use super::model::{BaseUrl, CallParams, GatewayConfig, MAX_RETRIES, ModelEntry, takes_reasoning};
use crate::budget::Prices;

/// Keys the file may hold that the gateway reads no value from, by where they are.
type Unused = BTreeMap<String, serde::de::IgnoredAny>;

#[derive(Default, Deserialize)]
struct FileShape {
    #[serde(default)]
    model_list: Vec<FileEntry>,
    #[serde(default)]
    general_settings: GeneralSettings,
    #[serde(default)]
    extra_headers: BTreeMap<String, String>,
    #[serde(flatten)]
    unused: Unused,
}

#[derive(Default, Deserialize)]
struct GeneralSettings {
    #[serde(default)]
    forward_client_headers_to_llm_api: bool,
    #[serde(flatten)]
    unused: Unused,
}

#[derive(Deserialize)]
struct FileEntry {
    model_name: String,
    #[serde(alias = "litellm_params")]
    gateway_params: FileParams,
    #[serde(default)]
    model_info: Option<serde_json::Value>,
    #[serde(flatten)]
    unused: Unused,
}

#[derive(Deserialize)]
struct FileParams {
    model: String,
    api_base: String,
    #[serde(default)]
    api_key: String,
    /// Seconds.
    #[serde(default)]
    timeout: Option<f64>,
    #[serde(default)]
    num_retries: Option<u32>,
    #[serde(default)]
    max_parallel_requests: Option<u32>,
    #[serde(default)]
    messages_api: Option<MessagesApi>,
    #[serde(default)]
    responses_api: Option<ResponsesApi>,
    #[serde(default)]
    rpm: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    tpm: Option<serde::de::IgnoredAny>,
    /// LiteLLM's per-deployment prices (`budget::PRICE_KEYS`), before `model_info`'s.
    #[serde(default)]
    input_cost_per_token: Option<serde_json::Value>,
    #[serde(default)]
    output_cost_per_token: Option<serde_json::Value>,
    #[serde(default)]
    cache_read_input_token_cost: Option<serde_json::Value>,
    #[serde(default)]
    cache_creation_input_token_cost: Option<serde_json::Value>,
    #[serde(flatten)]
    unused: Unused,
}

impl FileParams {
    /// The prices these params name, by their keys.
    fn prices(&self) -> serde_json::Map<String, serde_json::Value> {
        let [input, output, cache_read, cache_creation] = crate::budget::PRICE_KEYS;
        [
            (input, &self.input_cost_per_token),
            (output, &self.output_cost_per_token),
            (cache_read, &self.cache_read_input_token_cost),
            (cache_creation, &self.cache_creation_input_token_cost),
        ]
        .into_iter()
        .filter_map(|(key, value)| Some((key.to_owned(), value.clone()?)))
        .collect()
    }
}

/// How `/v1/messages` reaches an `openai/` upstream.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum MessagesApi {
    /// Translated to chat completions and back (the default).
    Translate,
    /// As the client sent it: the upstream speaks Anthropic's API.
    Native,
}

/// How `/v1/responses` reaches an `openai/` upstream.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum ResponsesApi {
    /// As the client sent it (the default).
    Native,
    /// Bridged to chat completions and back: the upstream serves chat completions only.
    Chat,
}

/// How errors and findings name a model entry: `model_list[0] (claude)`.
fn entry_label(index: usize, model_name: &str) -> String {
    format!("model_list[{index}] ({model_name})")
}

/// One `os.environ/NAME` value of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvironmentReference {
    /// The entry or header that holds it, as errors name it: `model_list[0] (claude)`,
    /// `extra_headers.x-team`.
    pub holder: String,
    /// The field: `model`, `api_base`, `api_key`, or `value` for a header.
    pub field: &'static str,
    /// The environment variable.
    pub name: String,
}

/// How deep the file may nest flow collections (`[…]`, `{…}`). The YAML scanner's work per
/// token grows with the flow depth, so a file of 20,000 nested `[` (40 KB) held a core for
/// tens of seconds, with the gateway's configuration lock taken on a reload; serde_norway's
/// own depth limit (128) applies only after the whole file was scanned.
const MAX_FLOW_NESTING: usize = 128;

/// The flow depth of `text` exceeds `max`, by a scan of its brackets that skips quoted
/// scalars and comments: an approximation of the YAML scanner's view (a quote starts a
/// quoted scalar only where a token may start, a `#` a comment only after a space), which
/// errs towards counting a bracket. Text in a block scalar (`|`, `>`) is scanned as if it
/// were YAML: a file could be written to hide deep brackets from this scan there, but it
/// is the operator's own file; what the limit is for is a file nested by mistake, or
/// generated.
fn flow_nesting_exceeds(text: &str, max: usize) -> bool {
    enum State {
        Plain,
        Double {
            escaped: bool,
        },
        Single,
        /// A `'` in a single-quoted scalar: its end, unless another `'` follows.
        SingleQuote,
        Comment,
    }
    let mut state = State::Plain;
    let (mut depth, mut previous) = (0usize, b'\n');
    for &byte in text.as_bytes() {
        state = match state {
            State::Double { escaped: true } => State::Double { escaped: false },
            State::Double { escaped: false } => match byte {
                b'\\' => State::Double { escaped: true },
                b'"' => State::Plain,
                _ => State::Double { escaped: false },
            },
            State::Single => match byte {
                b'\'' => State::SingleQuote,
                _ => State::Single,
            },
            State::SingleQuote if byte == b'\'' => State::Single,
            State::Comment if byte != b'\n' => State::Comment,
            State::Plain | State::SingleQuote | State::Comment => {
                // In doubt a quote is taken as text: brackets are then over-counted,
                // never hidden.
                let token_start =
                    matches!(previous, b' ' | b'\t' | b'\n' | b'\r' | b'[' | b'{' | b',');
                match byte {
                    b'"' if token_start => State::Double { escaped: false },
                    b'\'' if token_start => State::Single,
                    b'#' if matches!(previous, b' ' | b'\t' | b'\n' | b'\r') => State::Comment,
                    b'[' | b'{' => {
                        depth += 1;
                        if depth > max {
                            return true;
                        }
                        State::Plain
                    }
                    b']' | b'}' => {
                        depth = depth.saturating_sub(1);
                        State::Plain
                    }
                    _ => State::Plain,
                }
            }
        };
        previous = byte;
    }
    false
}

/// The file's text as its shape; an empty file is an empty configuration.
fn file_shape(text: &str) -> Result<FileShape, String> {
    if text.trim().is_empty() {
        return Ok(FileShape::default());
    }
    if flow_nesting_exceeds(text, MAX_FLOW_NESTING) {
        return Err(format!(
            "the file nests [ ] or {{ }} more than {MAX_FLOW_NESTING} levels deep"
        ));
    }
    serde_norway::from_str(text).map_err(|err| err.to_string())
}

/// Every `os.environ/NAME` value of the file's text, in file order, without resolving
/// any: what `sandgate check-config` reports on all at once, where [`GatewayConfig::parse`]
/// stops at the first one unset.
pub fn environment_references(text: &str) -> Result<Vec<EnvironmentReference>, String> {
    let file = file_shape(text)?;
    let mut references = Vec::new();
    let mut push = |holder: &str, field: &'static str, value: &str| {
        if let Some(name) = value.strip_prefix("os.environ/") {
            references.push(EnvironmentReference {
                holder: holder.to_owned(),
                field,
                name: name.to_owned(),
            });
        }
    };
    for (index, entry) in file.model_list.iter().enumerate() {
        let holder = entry_label(index, &entry.model_name);
        let params = &entry.gateway_params;
        push(&holder, "model", &params.model);
        push(&holder, "api_base", &params.api_base);
        push(&holder, "api_key", &params.api_key);
    }
    for (name, value) in &file.extra_headers {
        push(&format!("extra_headers.{name}"), "value", value);
    }
    Ok(references)
}

/// Resolves `os.environ/NAME` through `env`; any other value is itself.
fn resolve(
    value: &str,
    what: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    match value.strip_prefix("os.environ/") {
        Some(name) => {
            env(name).ok_or_else(|| format!("{what}: environment variable {name} is not set"))
        }
        None => Ok(value.to_owned()),
    }
}

/// A warning for each key of `unused`, found at `at`.
fn unused_keys(unused: &Unused, at: &str, warnings: &mut Vec<String>) {
    for key in unused.keys() {
        warnings.push(format!("{at}{key}: not used by this gateway; ignored"));
    }
}

/// An entry's call settings, checked.
fn call_params(params: &FileParams, model: &str, what: &str) -> Result<CallParams, String> {
    if params.rpm.is_some() || params.tpm.is_some() {
        return Err(format!(
            "{what}: rpm and tpm are not enforced by this gateway: remove them, and set the limits on the external gateway (or the provider), which sees every replica's calls"
        ));
    }
    let timeout = match params.timeout {
        None => None,
        Some(seconds) if seconds.is_finite() && seconds > 0.0 && seconds <= 86_400.0 => {
            Some(Duration::from_secs_f64(seconds))
        }
        Some(seconds) => {
            return Err(format!(
                "{what}: timeout {seconds} is not a number of seconds between 0 and 86400"
            ));
        }
    };
    if let Some(retries) = params.num_retries.filter(|retries| *retries > MAX_RETRIES) {
        return Err(format!(
            "{what}: num_retries {retries} is more than {MAX_RETRIES}: a chain of gateways that each retry multiplies the calls"
        ));
    }
    let native_messages = params.messages_api == Some(MessagesApi::Native);
    if native_messages && !model.starts_with("openai/") {
        return Err(format!(
            "{what}: messages_api applies to openai/ entries (a gateway_proxy/ upstream gets /v1/messages as it is)"
        ));
    }
    let responses_via_chat = params.responses_api == Some(ResponsesApi::Chat);
    if responses_via_chat && !model.starts_with("openai/") {
        return Err(format!(
            "{what}: responses_api applies to openai/ entries (a gateway_proxy/ upstream gets /v1/responses as it is)"
        ));
    }
    Ok(CallParams {
        timeout,
        num_retries: params.num_retries,
        max_parallel_requests: match params.max_parallel_requests {
            Some(0) => return Err(format!("{what}: max_parallel_requests must be at least 1")),
            limit => limit,
        },
        native_messages,
        takes_reasoning: false,
        responses_via_chat,
    })
}

impl GatewayConfig {
    /// Parses the file's text, resolving environment references through `env`.
    pub fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Self, String> {
        let file = file_shape(text)?;
        let mut warnings = Vec::new();
        unused_keys(&file.unused, "", &mut warnings);
        unused_keys(
            &file.general_settings.unused,
            "general_settings.",
            &mut warnings,
        );
        let mut models = Vec::with_capacity(file.model_list.len());
        for (index, entry) in file.model_list.into_iter().enumerate() {
            let what = entry_label(index, &entry.model_name);
            unused_keys(&entry.unused, &format!("{what}."), &mut warnings);
            let params = entry.gateway_params;
            unused_keys(
                &params.unused,
                &format!("{what}.gateway_params."),
                &mut warnings,
            );
            let model = resolve(&params.model, &what, env)?;
            check_model(&model).map_err(|err| format!("{what}: {err}"))?;
            let api_base = resolve(&params.api_base, &what, env)?;
            check_api_base(&api_base).map_err(|err| format!("{what}: {err}"))?;
            if let Some(info) = &entry.model_info
                && !info.is_object()
            {
                return Err(format!("{what}: model_info must be a mapping"));
            }
            let api_key = resolve(&params.api_key, &what, env)?;
            check_api_key(&api_key).map_err(|err| format!("{what}: {err}"))?;
            let model_info = Prices::merged_model_info(&params.prices(), entry.model_info)
                .map_err(|err| format!("{what}: {err}"))?;
            let prices = Prices::from_model_info(model_info.as_ref())
                .map_err(|err| format!("{what}: {err}"))?;
            let mut call = call_params(&params, &model, &what)?;
            call.takes_reasoning = takes_reasoning(model_info.as_ref());
            models.push(ModelEntry {
                prices,
                added: false,
                params: call,
                model_name: entry.model_name,
                model,
                api_base,
                api_key,
                model_info,
                base_url: BaseUrl::default(),
            });
        }
        let mut extra_headers = Vec::with_capacity(file.extra_headers.len());
        for (name, value) in file.extra_headers {
            let what = format!("extra_headers.{name}");
            let value = resolve(&value, &what, env)?;
            let name = HeaderName::try_from(name.as_str())
                .map_err(|_| format!("{what}: not a valid header name"))?;
            if let Some((_, why)) = RESERVED_HEADERS
                .iter()
                .find(|(reserved, _)| *reserved == name.as_str())
            {
                return Err(format!("{what}: reserved: {why}"));
            }
            let value = HeaderValue::try_from(value)
                .map_err(|_| format!("{what}: not a valid header value"))?;
            extra_headers.push((name, value));
        }
        Ok(Self {
            models,
            forward_client_headers: file.general_settings.forward_client_headers_to_llm_api,
            extra_headers,
            scope: hex::encode(&Sha256::digest(text.as_bytes())[..12]),
            warnings,
        })
    }
}
