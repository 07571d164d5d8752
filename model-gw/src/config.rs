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
//! answers; `timeout` and `num_retries` in its params apply to its calls; `messages_api:
//! native` sends `/v1/messages` to an `openai/` upstream untranslated. `rpm` and `tpm` are
//! refused (this gateway does not enforce them: the external gateway does). Keys the
//! gateway does not use (`litellm_settings`, `router_settings`, a param such as
//! `temperature`) are warned about, never fatal.
//!
//! `os.environ/NAME` values are resolved when the file is read; a missing variable is an
//! error naming the entry. The file is re-read when it changes; a broken version keeps the
//! last good one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http::{HeaderName, HeaderValue};
use serde::Deserialize;
use sha2::{Digest, Sha256};

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
pub struct BaseUrl(pub std::sync::OnceLock<Option<reqwest::Url>>);

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
    messages_api: Option<MessagesApi>,
    #[serde(default)]
    responses_api: Option<ResponsesApi>,
    #[serde(default)]
    rpm: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    tpm: Option<serde::de::IgnoredAny>,
    #[serde(flatten)]
    unused: Unused,
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

/// Why an entry's upstream model cannot be routed, if it cannot.
pub fn check_model(model: &str) -> Result<(), String> {
    let routable = ["gateway_proxy/", "openai/"].iter().any(|prefix| {
        model
            .strip_prefix(prefix)
            .is_some_and(|rest| !rest.is_empty())
    });
    if routable {
        Ok(())
    } else {
        Err(format!(
            "model {model:?} has no routing prefix: use gateway_proxy/<model> or openai/<provider>/<model>"
        ))
    }
}

/// Why an `api_key` cannot be sent (as `Authorization: Bearer <key>`), if it cannot: it
/// must be a header value. Never echoes the key.
pub fn check_api_key(api_key: &str) -> Result<(), String> {
    if http::HeaderValue::from_str(api_key).is_ok() {
        Ok(())
    } else {
        Err("api_key cannot be sent in a header: it holds a control character".to_owned())
    }
}

/// The `api_base`s the gateway calls: http(s), a host that is a DNS name (its last label
/// starting with a letter) or a dotted IPv4 address, a port up to 65535, then any path,
/// query or fragment. The OpenAPI document states the same pattern (the e2e test
/// `the_api_base_pattern_is_the_documents` holds them equal; the document writes `(?s:.)`
/// as `[\s\S]`): what `/model/new` refuses is what its document says it refuses.
pub const API_BASE_PATTERN: &str = concat!(
    "^[Hh][Tt][Tt][Pp][Ss]?://",
    "(([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\\.)*[A-Za-z]([A-Za-z0-9-]*[A-Za-z0-9])?\\.?",
    "|(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3})",
    "(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4}))?",
    "([/?#](?s:.)*)?$",
);

static API_BASE: std::sync::LazyLock<Option<fancy_regex::Regex>> =
    std::sync::LazyLock::new(|| fancy_regex::Regex::new(API_BASE_PATTERN).ok());

/// Why an `api_base` cannot be called, if it cannot: not in the documented form (whose
/// scheme is http or https), or not a URL the client can parse.
pub fn check_api_base(api_base: &str) -> Result<(), String> {
    let in_form = API_BASE
        .as_ref()
        .is_some_and(|form| form.is_match(api_base).unwrap_or(false));
    match reqwest::Url::parse(api_base) {
        Ok(_) if in_form => Ok(()),
        _ => Err(format!(
            "api_base {api_base:?} is not an http(s) URL with a DNS name or an IPv4 address as its host"
        )),
    }
}

/// Headers a static `extra_headers` entry may not set, each with the reason: the gateway
/// sets them per call, or they are the client's own (a static value would replace it for
/// every client, since static headers win).
const RESERVED_HEADERS: &[(&str, &str)] = &[
    (
        "x-gateway-session-id",
        "each client's session id is forwarded untouched",
    ),
    (
        "x-gateway-spend-logs-metadata",
        "each client's spend log metadata is its own",
    ),
    (
        "x-litellm-session-id",
        "each client's session id is forwarded untouched",
    ),
    (
        "x-litellm-spend-logs-metadata",
        "each client's spend log metadata is its own",
    ),
    (
        "authorization",
        "the upstream key is the model entry's `api_key`",
    ),
    ("content-type", "set by the gateway"),
    ("content-length", "set by the gateway"),
    ("host", "set by the gateway"),
    ("traceparent", "the trace context is set per call"),
    ("tracestate", "the trace context is set per call"),
];

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
            let prices = Prices::from_model_info(entry.model_info.as_ref())
                .map_err(|err| format!("{what}: {err}"))?;
            let mut call = call_params(&params, &model, &what)?;
            call.takes_reasoning = takes_reasoning(entry.model_info.as_ref());
            models.push(ModelEntry {
                prices,
                added: false,
                params: call,
                model_name: entry.model_name,
                model,
                api_base,
                api_key,
                model_info: entry.model_info,
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

impl GatewayConfig {
    fn log_warnings(&self, path: &Path) {
        for warning in &self.warnings {
            tracing::warn!(file = %path.display(), "gateway config: {warning}");
        }
    }
}

fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The configuration file, re-read when it changes (stat on every read, as the warm
/// runtimes file is).
pub struct ConfigFile {
    path: Option<PathBuf>,
    state: Mutex<FileState>,
}

struct FileState {
    stamp: Option<Stamp>,
    config: Arc<GatewayConfig>,
}

/// What identifies one version of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> std::io::Result<Stamp> {
    #[cfg(unix)]
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::metadata(path)?;
    #[cfg(unix)]
    let inode = metadata.ino();
    #[cfg(not(unix))]
    let inode = 0;
    Ok(Stamp {
        modified: metadata.modified().ok(),
        len: metadata.len(),
        inode,
    })
}

fn read(path: &Path) -> Result<GatewayConfig, String> {
    let text = std::fs::read_to_string(path).map_err(|err| err.to_string())?;
    GatewayConfig::parse(&text, &process_env)
}

impl ConfigFile {
    /// Reads `path` now: a file that is given but unreadable or invalid is a start error.
    pub fn open(path: Option<PathBuf>) -> Result<Self, String> {
        let (stamp, config) = match &path {
            Some(path) => {
                let stamp = stamp(path).map_err(|err| format!("{}: {err}", path.display()))?;
                let config = read(path).map_err(|err| format!("{}: {err}", path.display()))?;
                config.log_warnings(path);
                (Some(stamp), config)
            }
            None => (None, GatewayConfig::default()),
        };
        Ok(Self {
            path,
            state: Mutex::new(FileState {
                stamp,
                config: Arc::new(config),
            }),
        })
    }

    /// A fixed configuration, never re-read.
    pub fn fixed(config: GatewayConfig) -> Self {
        Self {
            path: None,
            state: Mutex::new(FileState {
                stamp: None,
                config: Arc::new(config),
            }),
        }
    }

    /// The configuration in effect, re-reading a changed file.
    pub fn current(&self) -> Arc<GatewayConfig> {
        // The file is looked at before the lock is taken: concurrent calls do not wait on
        // one another's system call. Two that see stamps in the opposite order to their
        // locking only make the later one read the file again.
        let now = self.path.as_deref().map(|path| stamp(path).ok());
        let Ok(mut state) = self.state.lock() else {
            return Arc::new(GatewayConfig::default());
        };
        if let (Some(path), Some(now)) = (&self.path, now)
            && now != state.stamp
        {
            state.stamp = now;
            match read(path) {
                Ok(config) => {
                    if config != *state.config {
                        tracing::info!(file = %path.display(), models = config.models.len(), "gateway config reloaded");
                        config.log_warnings(path);
                        state.config = Arc::new(config);
                    }
                }
                Err(err) => tracing::warn!(
                    file = %path.display(),
                    error = %err,
                    "gateway config is unreadable or invalid; keeping the last good one"
                ),
            }
        }
        state.config.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_bases_are_refused_as_the_document_says() {
        for base in [
            "http://g",
            "HTtp://litellm.ns.svc.cluster.local:4000",
            "https://10-0-0-1.pods.local:65535/v1?api-version=2",
            "http://127.0.0.1:11434/v1",
            "https://o/openai/v1/",
        ] {
            assert_eq!(check_api_base(base), Ok(()), "{base}");
        }
        for base in [
            // Schemathesis's find: a host no DNS name nor address is.
            "HTtp://253.37.201.0*",
            "http://a_b.com",
            "http://a.1",
            "http://host:65536",
            "http://user:secret@host",
            "ftp://host",
            "http://",
        ] {
            let refused = check_api_base(base).expect_err(base);
            assert!(refused.contains("is not an http(s) URL"), "{refused}");
        }
    }

    #[test]
    fn an_api_key_must_be_a_header_value() {
        assert!(check_api_key("sk-abc 123\tok").is_ok());
        for bad in ["sk-abc\n", "sk\u{7f}", "sk\r\nx-injected: 1"] {
            let err = check_api_key(bad).expect_err(bad);
            assert!(!err.contains("sk"), "{err}");
        }
    }

    #[test]
    fn extra_headers_may_not_set_what_is_per_client_or_per_call() {
        for name in [
            "x-gateway-session-id",
            "Authorization",
            "traceparent",
            "content-type",
        ] {
            let text = format!("model_list: []\nextra_headers:\n  {name}: fixed\n");
            let err = GatewayConfig::parse(&text, &|_| None)
                .err()
                .unwrap_or_else(|| panic!("{name} accepted"));
            assert!(
                err.starts_with(&format!("extra_headers.{name}: reserved: ")),
                "{err}"
            );
        }
        let text = "model_list: []\nextra_headers:\n  x-team: platform\n";
        assert!(GatewayConfig::parse(text, &|_| None).is_ok());
    }

    fn env(name: &str) -> Option<String> {
        (name == "GATEWAY_KEY").then(|| "sk-from-env".to_owned())
    }

    #[test]
    fn environment_references_are_resolved() {
        let config = GatewayConfig::parse(
            r"
model_list:
  - model_name: claude
    gateway_params:
      model: gateway_proxy/claude-sonnet
      api_base: http://gateway
      api_key: os.environ/GATEWAY_KEY
general_settings:
  forward_client_headers_to_llm_api: true
extra_headers:
  x-team: platform
",
            &env,
        )
        .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(config.models[0].api_key, "sk-from-env");
        assert!(config.forward_client_headers);
        assert_eq!(config.extra_headers[0].0.as_str(), "x-team");
    }

    #[test]
    fn a_missing_variable_names_the_entry() {
        let err = GatewayConfig::parse(
            r"
model_list:
  - model_name: claude
    gateway_params: {model: openai/a/b, api_base: http://g/v1, api_key: os.environ/NOPE}
",
            &env,
        )
        .err()
        .unwrap_or_default();
        assert!(err.contains("model_list[0] (claude)"), "{err}");
        assert!(err.contains("NOPE"), "{err}");
    }

    #[test]
    fn every_environment_reference_is_listed_with_its_entry() {
        let references = environment_references(
            r"
model_list:
  - model_name: claude
    gateway_params: {model: gateway_proxy/c, api_base: os.environ/BASE, api_key: os.environ/KEY_A}
  - model_name: gpt
    gateway_params: {model: openai/a/b, api_base: 'http://g/v1', api_key: literal}
extra_headers:
  x-team: os.environ/TEAM
",
        )
        .unwrap_or_else(|err| panic!("{err}"));
        let listed: Vec<_> = references
            .iter()
            .map(|reference| {
                (
                    reference.holder.as_str(),
                    reference.field,
                    reference.name.as_str(),
                )
            })
            .collect();
        assert_eq!(
            listed,
            [
                ("model_list[0] (claude)", "api_base", "BASE"),
                ("model_list[0] (claude)", "api_key", "KEY_A"),
                ("extra_headers.x-team", "value", "TEAM"),
            ]
        );
        assert!(environment_references("model_list: [{nope: 1}]").is_err());
    }

    /// The YAML scanner's work grows with the flow depth: 20,000 nested `[` took tens of
    /// seconds (fuzz/regressions/gateway_config/). Refused before it is scanned.
    #[test]
    fn deep_flow_nesting_is_refused_before_it_is_scanned() {
        let deep = format!("model_list: {}{}", "[".repeat(20_000), "]".repeat(20_000));
        let err = GatewayConfig::parse(&deep, &env).err().unwrap_or_default();
        assert!(err.contains("more than 128 levels deep"), "{err}");
        assert_eq!(environment_references(&deep).err(), Some(err));
        // Brackets in quoted scalars and comments are not nesting.
        let quoted = format!(
            "extra_headers: {{x-a: \"{open}\", x-b: '{open}''{open}'}} # {open}\n",
            open = "[".repeat(200)
        );
        assert_eq!(
            GatewayConfig::parse(&quoted, &env).map(|config| config.extra_headers.len()),
            Ok(2)
        );
        let shallow = format!("model_list: {}{}", "[".repeat(100), "]".repeat(100));
        let err = GatewayConfig::parse(&shallow, &env)
            .err()
            .unwrap_or_default();
        assert!(!err.contains("levels deep"), "{err}");
    }

    /// A LiteLLM proxy's config.yaml of the spec's shape, as its users bring it.
    #[test]
    fn a_litellm_config_loads_with_warnings_for_what_is_not_used() {
        let config = GatewayConfig::parse(
            r"
model_list:
  - model_name: claude
    litellm_params:
      model: gateway_proxy/claude-sonnet
      api_base: http://gateway
      api_key: os.environ/GATEWAY_KEY
      timeout: 30
      num_retries: 2
      temperature: 0.2
    model_info:
      max_input_tokens: 200000
      supports_vision: true
  - model_name: gpt
    litellm_params: {model: openai/azure/gpt-4o, api_base: 'http://g/v1', messages_api: native}
litellm_settings:
  drop_params: true
general_settings:
  master_key: sk-ignored
  forward_client_headers_to_llm_api: true
",
            &env,
        )
        .unwrap_or_else(|err| panic!("{err}"));
        let claude = &config.models[0];
        assert_eq!(claude.api_key, "sk-from-env");
        assert_eq!(
            claude.params,
            CallParams {
                timeout: Some(Duration::from_secs(30)),
                num_retries: Some(2),
                native_messages: false,
                takes_reasoning: false,
                responses_via_chat: false,
            }
        );
        assert_eq!(
            claude.model_info,
            Some(serde_json::json!({"max_input_tokens": 200000, "supports_vision": true}))
        );
        assert!(config.models[1].params.native_messages);
        assert!(config.forward_client_headers);
        assert_eq!(
            config.warnings,
            [
                "litellm_settings: not used by this gateway; ignored",
                "general_settings.master_key: not used by this gateway; ignored",
                "model_list[0] (claude).gateway_params.temperature: not used by this gateway; ignored",
            ]
        );
    }

    #[test]
    fn limits_it_does_not_enforce_and_unbounded_retries_are_refused() {
        for (params, expected) in [
            ("rpm: 10", "rpm and tpm are not enforced"),
            ("tpm: 1000", "rpm and tpm are not enforced"),
            ("num_retries: 9", "num_retries 9 is more than 5"),
            ("timeout: -1", "timeout -1 is not a number of seconds"),
            ("messages_api: sometimes", "messages_api"),
        ] {
            let text = format!(
                "model_list: [{{model_name: a, litellm_params: {{model: openai/a/b, api_base: 'http://g/v1', {params}}}}}]"
            );
            let err = GatewayConfig::parse(&text, &env).err().unwrap_or_default();
            assert!(err.contains(expected), "{params}: {err}");
            assert!(
                err.contains("model_list[0] (a)") || params.starts_with("messages_api"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_model_without_a_routing_prefix_is_refused() {
        let err = GatewayConfig::parse(
            "model_list: [{model_name: a, gateway_params: {model: gpt-4o, api_base: 'http://g'}}]",
            &env,
        )
        .err()
        .unwrap_or_default();
        assert!(err.contains("routing prefix"), "{err}");
    }
}
