//! The model gateway's configuration file (`GATEWAY_CONFIG`, spec 2.4, 2.5), read with the
//! gateway's own parser.

use std::collections::BTreeMap;

use sandgate_model_gw::{EnvironmentReference, GatewayConfig, ModelEntry, environment_references};

use super::{Finding, ModelGwSettings, Severity};

const SETTING: &str = "GATEWAY_CONFIG";

/// Every finding about the file `GATEWAY_CONFIG` names, if it names one.
pub fn gateway_config(settings: &ModelGwSettings) -> Vec<Finding> {
    let Some(path) = &settings.gateway_config else {
        return Vec::new();
    };
    match std::fs::read_to_string(path) {
        Ok(text) => gateway_text(&path.display().to_string(), &text, &settings.environment),
        Err(err) => vec![Finding::new(
            Severity::Fatal,
            SETTING,
            format!("{}: {err}", path.display()),
        )],
    }
}

/// The file's text: it parses, its environment references resolve, and each entry is in
/// the form its routing prefix needs.
fn gateway_text(file: &str, text: &str, environment: &BTreeMap<String, String>) -> Vec<Finding> {
    let references = match environment_references(text) {
        Ok(references) => references,
        Err(err) => {
            return vec![Finding::new(
                Severity::Fatal,
                SETTING,
                format!("{file}: {err}"),
            )];
        }
    };
    let mut findings = unresolved_references(&references, environment);
    // Unset names stand for themselves, so the rest of the file is still checked; an entry
    // whose model or api_base is unset fails to parse, already reported above.
    let resolve = |name: &str| {
        environment
            .get(name)
            .cloned()
            .or_else(|| Some(format!("os.environ/{name}")))
    };
    match GatewayConfig::parse(text, &resolve) {
        Ok(config) => {
            findings.extend(config.warnings.iter().map(|warning| {
                Finding::new(Severity::Warning, SETTING, format!("{file}: {warning}"))
            }));
            for (index, entry) in config.models.iter().enumerate() {
                findings.extend(api_base_form(index, entry));
                findings.extend(wildcard_entry(index, entry));
            }
        }
        Err(err) if findings.is_empty() => {
            findings.push(Finding::new(
                Severity::Fatal,
                SETTING,
                format!("{file}: {err}"),
            ));
        }
        Err(_) => {}
    }
    findings
}

/// Every `os.environ/NAME` resolves: the gateway refuses to start otherwise.
fn unresolved_references(
    references: &[EnvironmentReference],
    environment: &BTreeMap<String, String>,
) -> Vec<Finding> {
    references
        .iter()
        .filter(|reference| !environment.contains_key(&reference.name))
        .map(|reference| {
            // Where k8s/ gives model-gw its variables.
            let source = if reference.name == "GATEWAY_API_KEY" {
                "secret gateway-api-key"
            } else {
                "a key of secret gateway-env-secrets"
            };
            Finding::new(
                Severity::Fatal,
                SETTING,
                format!(
                    "{}: {} is os.environ/{name}, but {name} is not set: set it in the model \
                     gateway's environment (on Kubernetes, {source})",
                    reference.holder,
                    reference.field,
                    name = reference.name
                ),
            )
        })
        .collect()
}

fn label(index: usize, entry: &ModelEntry) -> String {
    format!("model_list[{index}] ({})", entry.model_name)
}

/// `api_base` is in the form the entry's prefix needs (spec 2.5): `gateway_proxy/…`
/// appends `/v1/chat/completions` itself, so its base has no `/v1`; `openai/…` appends
/// `/chat/completions`, so its base ends in `/v1`.
fn api_base_form(index: usize, entry: &ModelEntry) -> Vec<Finding> {
    // Its path as routing reads it (a query, Azure's `?api-version=`, stays after the API
    // paths the gateway appends); a base that is no URL was refused when the file loaded.
    let Ok(url) = reqwest::Url::parse(&entry.api_base) else {
        return Vec::new();
    };
    let base = url.path().trim_end_matches('/');
    let problem = if entry.model.starts_with("gateway_proxy/") && base.ends_with("/v1") {
        "ends in /v1, but gateway_proxy/ models are called at {api_base}/v1/chat/completions: drop the /v1"
    } else if entry.model.starts_with("openai/") && !base.ends_with("/v1") {
        "does not end in /v1, but openai/ models are called at {api_base}/chat/completions: add the /v1 the gateway serves its API under"
    } else {
        return Vec::new();
    };
    vec![Finding::new(
        Severity::Error,
        SETTING,
        format!(
            "{}: api_base {:?} {problem}",
            label(index, entry),
            entry.api_base
        ),
    )]
}

/// The wildcard entry is `model_name: "*"` with `model: openai/*`, and is not recommended
/// (spec 4.2: it floods the model dropdown).
fn wildcard_entry(index: usize, entry: &ModelEntry) -> Vec<Finding> {
    let named_wildcard = entry.model_name == "*";
    let routes_wildcard = entry.model.ends_with("/*");
    let (severity, problem) = match (named_wildcard, routes_wildcard) {
        (false, false) => return Vec::new(),
        (true, true) if entry.model == "openai/*" => (
            Severity::Warning,
            "a wildcard entry is not recommended: /v1/models lists 200 or more models; list the models you use instead",
        ),
        (true, _) => (
            Severity::Error,
            "a wildcard entry (model_name \"*\") needs model openai/*",
        ),
        (false, true) => (
            Severity::Error,
            "a model ending in /* routes only as the wildcard entry: set model_name \"*\" and model openai/*, or name one model",
        ),
    };
    vec![Finding::new(
        severity,
        SETTING,
        format!("{}: {problem}", label(index, entry)),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn environment(names: &[&str]) -> BTreeMap<String, String> {
        names
            .iter()
            .map(|name| ((*name).to_owned(), "a-value".to_owned()))
            .collect()
    }

    fn entry(model_name: &str, model: &str, api_base: &str) -> ModelEntry {
        ModelEntry {
            model_name: model_name.to_owned(),
            model: model.to_owned(),
            api_base: api_base.to_owned(),
            api_key: "k".to_owned(),
            ..ModelEntry::default()
        }
    }

    const TWO_KEYS: &str = r"
model_list:
  - model_name: claude
    gateway_params: {model: gateway_proxy/claude, api_base: 'https://g', api_key: os.environ/KEY_A}
  - model_name: gpt
    gateway_params: {model: openai/azure/gpt-4o, api_base: 'https://o/v1', api_key: os.environ/KEY_B}
";

    #[test]
    fn resolved_references_pass() {
        assert_eq!(
            gateway_text("g.yaml", TWO_KEYS, &environment(&["KEY_A", "KEY_B"])),
            []
        );
    }

    #[test]
    fn every_unresolved_reference_names_its_entry_and_variable() {
        let findings = gateway_text("g.yaml", TWO_KEYS, &environment(&[]));
        let messages: Vec<&str> = findings.iter().map(|f| f.message.as_str()).collect();
        assert_eq!(findings.len(), 2, "{messages:?}");
        assert!(
            messages[0].starts_with("model_list[0] (claude): api_key is os.environ/KEY_A"),
            "{messages:?}"
        );
        assert!(
            messages[1].starts_with("model_list[1] (gpt): api_key is os.environ/KEY_B"),
            "{messages:?}"
        );
        assert!(findings.iter().all(|f| f.severity == Severity::Fatal));
    }

    /// A LiteLLM config.yaml loads; what the gateway does not use is a warning.
    #[test]
    fn keys_the_gateway_does_not_use_are_warnings() {
        let text = "model_list:\n  - model_name: a\n    litellm_params: {model: openai/x/y, api_base: 'http://g/v1', temperature: 0.1}\nlitellm_settings: {drop_params: true}\n";
        let findings = gateway_text("g.yaml", text, &environment(&[]));
        let found: Vec<(&str, Severity)> = findings
            .iter()
            .map(|finding| (finding.message.as_str(), finding.severity))
            .collect();
        assert_eq!(
            found,
            [
                (
                    "g.yaml: litellm_settings: not used by this gateway; ignored",
                    Severity::Warning
                ),
                (
                    "g.yaml: model_list[0] (a).gateway_params.temperature: not used by this gateway; ignored",
                    Severity::Warning
                ),
            ]
        );
    }

    #[test]
    fn a_file_that_does_not_parse_is_fatal() {
        for text in [
            "model_list: [{nope: 1}]",
            "model_list:\n  - model_name: a\n    gateway_params: {model: gpt-4o, api_base: 'http://g'}\n",
        ] {
            let findings = gateway_text("g.yaml", text, &environment(&[]));
            assert_eq!(findings.len(), 1, "{text}");
            assert_eq!(findings[0].severity, Severity::Fatal);
            assert!(findings[0].message.starts_with("g.yaml: "));
        }
        let missing = gateway_config(&ModelGwSettings {
            gateway_config: Some("/nonexistent/gateway.yaml".into()),
            ..ModelGwSettings::default()
        });
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].severity, Severity::Fatal);
    }

    #[test]
    fn api_bases_in_the_form_of_their_prefix_pass() {
        assert_eq!(
            api_base_form(0, &entry("c", "gateway_proxy/c", "https://g")),
            []
        );
        assert_eq!(
            api_base_form(0, &entry("c", "gateway_proxy/c", "https://g/")),
            []
        );
        assert_eq!(
            api_base_form(0, &entry("g", "openai/azure/gpt", "https://o/v1")),
            []
        );
        assert_eq!(
            api_base_form(0, &entry("g", "openai/azure/gpt", "https://o/openai/v1/")),
            []
        );
        assert_eq!(
            api_base_form(
                0,
                &entry("g", "openai/azure/gpt", "https://o/v1?api-version=2")
            ),
            []
        );
        // Read as routing reads it: the calls go to https://o/v1/chat/completions.
        assert_eq!(
            api_base_form(0, &entry("g", "openai/azure/gpt", "https://o/v1/.")),
            []
        );
        let proxy = api_base_form(0, &entry("c", "gateway_proxy/c", "https://g/v1/?x=1"));
        assert_eq!(proxy.len(), 1, "{proxy:?}");
        let proxy = api_base_form(0, &entry("c", "gateway_proxy/c", "https://g/v1/."));
        assert_eq!(proxy.len(), 1, "{proxy:?}");
    }

    #[test]
    fn an_api_base_in_the_wrong_form_names_the_entry() {
        let proxy = api_base_form(2, &entry("c", "gateway_proxy/c", "https://g/v1"));
        assert_eq!(proxy.len(), 1);
        assert!(
            proxy[0]
                .message
                .starts_with("model_list[2] (c): api_base \"https://g/v1\" ends in /v1")
        );
        let openai = api_base_form(0, &entry("g", "openai/azure/gpt", "https://o"));
        assert_eq!(openai.len(), 1);
        assert!(openai[0].message.contains("does not end in /v1"));
        assert_eq!(openai[0].severity, Severity::Error);
    }

    #[test]
    fn the_wildcard_entry_is_a_warning_and_a_malformed_one_an_error() {
        assert_eq!(
            wildcard_entry(0, &entry("gpt", "openai/azure/gpt", "https://o/v1")),
            []
        );
        let wildcard = wildcard_entry(0, &entry("*", "openai/*", "https://o/v1"));
        assert_eq!(wildcard.len(), 1);
        assert_eq!(wildcard[0].severity, Severity::Warning);
        assert!(wildcard[0].message.contains("not recommended"));
        for (name, model) in [
            ("*", "openai/azure/gpt"),
            ("*", "gateway_proxy/*"),
            ("all", "openai/*"),
        ] {
            let findings = wildcard_entry(0, &entry(name, model, "https://o/v1"));
            assert_eq!(findings.len(), 1, "{name} {model}");
            assert_eq!(findings[0].severity, Severity::Error, "{name} {model}");
        }
    }
}
