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
//! `os.environ/NAME` values are resolved when the file is read; a missing variable is an
//! error naming the entry. The file is re-read when it changes; a broken version keeps the
//! last good one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use http::{HeaderName, HeaderValue};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// One model a client may ask for.
#[derive(Clone, PartialEq, Eq)]
pub struct ModelEntry {
    pub model_name: String,
    /// The upstream model with its routing prefix (spec 2.5).
    pub model: String,
    pub api_base: String,
    pub api_key: String,
}

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
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileShape {
    #[serde(default)]
    model_list: Vec<FileEntry>,
    #[serde(default)]
    general_settings: GeneralSettings,
    #[serde(default)]
    extra_headers: BTreeMap<String, String>,
}

#[derive(Default, Deserialize)]
struct GeneralSettings {
    #[serde(default)]
    forward_client_headers_to_llm_api: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    model_name: String,
    gateway_params: FileParams,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileParams {
    model: String,
    api_base: String,
    #[serde(default)]
    api_key: String,
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
        return Ok(FileShape {
            model_list: Vec::new(),
            general_settings: GeneralSettings::default(),
            extra_headers: BTreeMap::new(),
        });
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

/// Why an `api_base` cannot be called, if it cannot.
pub fn check_api_base(api_base: &str) -> Result<(), String> {
    match reqwest::Url::parse(api_base) {
        Ok(url) if matches!(url.scheme(), "http" | "https") => Ok(()),
        _ => Err(format!("api_base {api_base:?} is not an http(s) URL")),
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

impl GatewayConfig {
    /// Parses the file's text, resolving environment references through `env`.
    pub fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Self, String> {
        let file = file_shape(text)?;
        let mut models = Vec::with_capacity(file.model_list.len());
        for (index, entry) in file.model_list.into_iter().enumerate() {
            let what = entry_label(index, &entry.model_name);
            let params = entry.gateway_params;
            let model = resolve(&params.model, &what, env)?;
            check_model(&model).map_err(|err| format!("{what}: {err}"))?;
            let api_base = resolve(&params.api_base, &what, env)?;
            check_api_base(&api_base).map_err(|err| format!("{what}: {err}"))?;
            models.push(ModelEntry {
                model_name: entry.model_name,
                model,
                api_base,
                api_key: resolve(&params.api_key, &what, env)?,
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
        })
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
        let Ok(mut state) = self.state.lock() else {
            return Arc::new(GatewayConfig::default());
        };
        if let Some(path) = &self.path {
            let now = stamp(path).ok();
            if now != state.stamp {
                state.stamp = now;
                match read(path) {
                    Ok(config) => {
                        if config != *state.config {
                            tracing::info!(file = %path.display(), models = config.models.len(), "gateway config reloaded");
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
        }
        state.config.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
