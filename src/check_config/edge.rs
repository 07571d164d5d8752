//! The edge's settings: the gRPC addresses of the services it calls.

use super::{EdgeSettings, Finding, Severity};

/// Why `url` cannot be a service's gRPC address, if it cannot.
fn grpc_url_problem(url: &str) -> Option<String> {
    match reqwest::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some() => {
            None
        }
        _ => Some(format!(
            "{url:?} is not an http(s) URL with a host, e.g. http://runtime-api:50051"
        )),
    }
}

/// `SANDGATE_RUNTIME_API_URL` is set and, like `SANDGATE_MODEL_GW_URL`, an http(s) URL;
/// without the model gateway's the gateway routes answer 503.
pub fn service_urls(settings: &EdgeSettings) -> Vec<Finding> {
    let mut findings = Vec::new();
    match &settings.runtime_api_url {
        Some(url) => findings.extend(
            grpc_url_problem(url)
                .map(|problem| Finding::new(Severity::Fatal, "SANDGATE_RUNTIME_API_URL", problem)),
        ),
        None => findings.push(Finding::new(
            Severity::Fatal,
            "SANDGATE_RUNTIME_API_URL",
            "not set: the edge calls the runtime API there, e.g. http://runtime-api:50051",
        )),
    }
    match &settings.model_gw_url {
        Some(url) => findings.extend(
            grpc_url_problem(url)
                .map(|problem| Finding::new(Severity::Fatal, "SANDGATE_MODEL_GW_URL", problem)),
        ),
        None => findings.push(Finding::new(
            Severity::Warning,
            "SANDGATE_MODEL_GW_URL",
            "not set: the model gateway's routes (/v1/...) answer 503",
        )),
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(runtime_api: Option<&str>, model_gw: Option<&str>) -> Vec<(String, Severity)> {
        service_urls(&EdgeSettings {
            runtime_api_url: runtime_api.map(str::to_owned),
            model_gw_url: model_gw.map(str::to_owned),
        })
        .into_iter()
        .map(|finding| (finding.setting, finding.severity))
        .collect()
    }

    #[test]
    fn http_service_urls_pass() {
        assert_eq!(
            urls(
                Some("http://runtime-api:50051"),
                Some("https://model-gw:50052")
            ),
            []
        );
    }

    #[test]
    fn a_missing_or_malformed_service_url_is_named() {
        assert_eq!(
            urls(None, None),
            [
                ("SANDGATE_RUNTIME_API_URL".to_owned(), Severity::Fatal),
                ("SANDGATE_MODEL_GW_URL".to_owned(), Severity::Warning),
            ]
        );
        assert_eq!(
            urls(Some("runtime-api:50051"), Some("ftp://model-gw")),
            [
                ("SANDGATE_RUNTIME_API_URL".to_owned(), Severity::Fatal),
                ("SANDGATE_MODEL_GW_URL".to_owned(), Severity::Fatal),
            ]
        );
    }
}
