//! Which upstream serves a requested model, and under which name (spec 2.5):
//! - `gateway_proxy/<m>`: POST `{api_base}/v1/<path>` with `model` = `<m>`: a gateway of
//!   the same kind, which serves every API at its own path;
//! - `openai/<provider>/<m>`: POST `{api_base}/<path>` (the base includes `/v1`) with
//!   `model` = `<provider>/<m>`: an OpenAI-compatible API, which has no `/messages`
//!   unless the entry says it has.
//!
//! A wildcard entry (`model_name: "*"`, `model: "openai/*"`) forwards any `provider/model`
//! name verbatim and refuses a bare name.

use std::sync::Arc;

use http::Uri;
use url::Url;

use crate::budget::Prices;
use crate::config::{CallParams, ModelEntry};

/// What kind of API an upstream is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `gateway_proxy/`: a gateway like this one.
    GatewayProxy,
    /// `openai/`: an OpenAI-compatible API.
    OpenAi,
}

/// Where one call goes.
#[derive(Clone, PartialEq, Eq)]
pub struct Upstream {
    /// The `model_name` of the entry that routed it (`*` for the wildcard): a bounded
    /// name for metrics, where the requested one is whatever a client sent.
    pub entry: String,
    pub kind: Kind,
    /// The URL paths are appended to: `{api_base}/v1` for a gateway, `{api_base}` for an
    /// OpenAI-compatible API; `None` when it does not parse.
    pub(crate) base: Option<Arc<Base>>,
    /// The `model` sent upstream.
    pub model: String,
    pub api_key: String,
    pub params: CallParams,
    /// What its calls cost.
    pub prices: Prices,
    /// Its entry was added at runtime: it is called through the guarded client.
    pub guarded: bool,
}

impl Upstream {
    /// The URI of `path` (`/chat/completions`, `/responses`, …) on this upstream: the base
    /// with `path` appended to its path (its query, if it has one, stays last).
    pub fn uri(&self, path: &str) -> Option<Uri> {
        self.base.as_ref()?.uri(path)
    }
}

/// An upstream's base URL, parsed once (at its entry's first call): the URL, whose host is
/// judged for added models, and the text each call's URI is made of.
#[derive(PartialEq, Eq)]
pub struct Base {
    url: Url,
    /// `scheme://host[:port]/path`, without the path's final `/`.
    prefix: String,
    /// `?query`, or nothing.
    query: String,
}

impl Base {
    /// The base of `api_base`, `suffix` appended to its path (`/v1` for a gateway).
    fn new(api_base: &str, suffix: &str) -> Option<Self> {
        let url = Url::parse(api_base).ok()?;
        let host = url.host_str()?;
        let port = url
            .port()
            .map(|port| format!(":{port}"))
            .unwrap_or_default();
        let path = url.path().trim_end_matches('/');
        Some(Self {
            prefix: format!("{}://{host}{port}{path}{suffix}", url.scheme()),
            query: url
                .query()
                .map(|query| format!("?{query}"))
                .unwrap_or_default(),
            url,
        })
    }

    /// The host, as the URL names it.
    pub(crate) fn host(&self) -> Option<&str> {
        self.url.host_str()
    }

    fn uri(&self, path: &str) -> Option<Uri> {
        let Self { prefix, query, .. } = self;
        format!("{prefix}{path}{query}").parse().ok()
    }
}

/// Its scheme and host only: a base URL's query may carry a credential.
impl std::fmt::Debug for Base {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Base")
            .field("scheme", &self.url.scheme())
            .field("host", &self.url.host_str())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("entry", &self.entry)
            .field("kind", &self.kind)
            .field("base", &self.base)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("model {0:?} is not in the model list")]
    UnknownModel(String),
    #[error(
        "model {0:?} needs a provider prefix (provider/model): this gateway routes it by wildcard"
    )]
    BareNameOnWildcard(String),
}

pub const WILDCARD: &str = "*";

/// The upstream of `entry` for the upstream model reference `model` (with its prefix).
fn upstream(entry: &ModelEntry, model: &str) -> Option<Upstream> {
    let (kind, name) = if let Some(name) = model.strip_prefix("gateway_proxy/") {
        (Kind::GatewayProxy, name)
    } else if let Some(name) = model.strip_prefix("openai/") {
        (Kind::OpenAi, name)
    } else {
        return None;
    };
    // An entry's kind is its own (a wildcard's model names it): its base is parsed once.
    let base = entry.base_url.0.get_or_init(|| {
        let suffix = match kind {
            Kind::GatewayProxy => "/v1",
            Kind::OpenAi => "",
        };
        Base::new(&entry.api_base, suffix).map(Arc::new)
    });
    Some(Upstream {
        entry: entry.model_name.clone(),
        kind,
        base: base.clone(),
        model: name.to_owned(),
        api_key: entry.api_key.clone(),
        params: entry.params,
        prices: entry.prices,
        guarded: entry.added,
    })
}

/// Routes `requested` over `entries` (configured first, then added): an exact name wins,
/// then a wildcard.
pub fn route<'a>(
    entries: impl IntoIterator<Item = &'a ModelEntry> + Clone,
    requested: &str,
) -> Result<Upstream, RouteError> {
    if requested != WILDCARD
        && let Some(entry) = entries
            .clone()
            .into_iter()
            .find(|entry| entry.model_name == requested)
    {
        return upstream(entry, &entry.model)
            .ok_or_else(|| RouteError::UnknownModel(requested.to_owned()));
    }
    let wildcard = entries
        .into_iter()
        .find(|entry| entry.model_name == WILDCARD && entry.model.ends_with("/*"));
    match wildcard {
        Some(entry) if requested.contains('/') => {
            let prefix = entry.model.trim_end_matches('*');
            upstream(entry, &format!("{prefix}{requested}"))
                .ok_or_else(|| RouteError::UnknownModel(requested.to_owned()))
        }
        Some(_) => Err(RouteError::BareNameOnWildcard(requested.to_owned())),
        None => Err(RouteError::UnknownModel(requested.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, model: &str, api_base: &str) -> ModelEntry {
        ModelEntry {
            model_name: name.into(),
            model: model.into(),
            api_base: api_base.into(),
            api_key: "sk".into(),
            ..ModelEntry::default()
        }
    }

    #[test]
    fn gateway_proxy_appends_v1_and_strips_the_prefix() {
        let entries = [entry("claude", "gateway_proxy/claude-sonnet", "http://gw/")];
        let upstream = route(&entries, "claude").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(
            upstream.uri("/chat/completions").map(|uri| uri.to_string()),
            Some("http://gw/v1/chat/completions".to_owned())
        );
        assert_eq!(upstream.model, "claude-sonnet");
    }

    #[test]
    fn openai_keeps_provider_and_model() {
        let entries = [entry("gpt", "openai/azure/gpt-4o", "http://gw/v1")];
        let upstream = route(&entries, "gpt").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(
            upstream.uri("/chat/completions").map(|uri| uri.to_string()),
            Some("http://gw/v1/chat/completions".to_owned())
        );
        assert_eq!(upstream.model, "azure/gpt-4o");
    }

    #[test]
    fn a_path_goes_before_the_query_of_a_base() {
        let entries = [entry("gpt", "openai/gpt-4o", "http://gw/v1/?api-version=2")];
        let upstream = route(&entries, "gpt").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(
            upstream.uri("/responses").map(|uri| uri.to_string()),
            Some("http://gw/v1/responses?api-version=2".to_owned())
        );
        // A gateway's `/v1` is part of the path too.
        let entries = [entry("c", "gateway_proxy/c", "http://gw/?api-version=2")];
        let upstream = route(&entries, "c").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(
            upstream.uri("/chat/completions").map(|uri| uri.to_string()),
            Some("http://gw/v1/chat/completions?api-version=2".to_owned())
        );
        let entries = [entry("gpt", "openai/gpt-4o", "not a url")];
        let upstream = route(&entries, "gpt").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(upstream.uri("/responses"), None);
    }

    #[test]
    fn unknown_names_are_refused_without_a_wildcard() {
        let entries = [entry("gpt", "openai/azure/gpt-4o", "http://gw/v1")];
        assert_eq!(
            route(&entries, "other"),
            Err(RouteError::UnknownModel("other".into()))
        );
        assert!(route(&entries, "*").is_err());
    }

    #[test]
    fn a_wildcard_forwards_provider_model_verbatim_and_refuses_bare_names() {
        let entries = [
            entry("gpt", "openai/azure/gpt-4o", "http://one/v1"),
            entry("*", "openai/*", "http://any/v1"),
        ];
        let upstream = route(&entries, "anthropic/claude").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(
            upstream.uri("/chat/completions").map(|uri| uri.to_string()),
            Some("http://any/v1/chat/completions".to_owned())
        );
        assert_eq!(upstream.model, "anthropic/claude");
        assert_eq!(upstream.entry, "*");
        assert_eq!(
            route(&entries, "claude"),
            Err(RouteError::BareNameOnWildcard("claude".into()))
        );
        assert_eq!(
            route(&entries, "gpt")
                .map(|upstream| upstream.uri("/chat/completions").map(|uri| uri.to_string())),
            Ok(Some("http://one/v1/chat/completions".to_owned()))
        );
    }
}
