//! `gen-secrets`: the install's Secret manifests, with fresh strong values each run.

use serde::Deserialize;

use super::{stderr, stdout};
use crate::common::run_sandgate;

#[derive(Deserialize)]
struct SecretManifest {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    metadata: Metadata,
    #[serde(rename = "stringData")]
    string_data: std::collections::BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct Metadata {
    name: String,
    namespace: String,
}

async fn gen_secrets(namespace: &str) -> Vec<SecretManifest> {
    let output = run_sandgate(&["gen-secrets", "--namespace", namespace], &[]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    serde_norway::Deserializer::from_str(&text)
        .map(|document| SecretManifest::deserialize(document).expect("a Secret manifest"))
        .collect()
}

#[tokio::test]
async fn gen_secrets_prints_the_installs_secrets_with_fresh_strong_values() {
    let first = gen_secrets("sandgate").await;
    let names: Vec<(&str, Vec<&str>)> = first
        .iter()
        .map(|secret| {
            (
                secret.metadata.name.as_str(),
                secret.string_data.keys().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("jwt-secret", vec!["jwt-secret"]),
            ("admin-password", vec!["admin-password"]),
            ("default-api-key", vec!["default-api-key"]),
            ("sandbox-api-key", vec!["sandbox-api-key"]),
            ("gateway-master-key", vec!["master-key"]),
            ("cache", vec!["redis-password"]),
        ]
    );
    for secret in &first {
        assert_eq!(
            (secret.api_version.as_str(), secret.kind.as_str()),
            ("v1", "Secret")
        );
        assert_eq!(secret.metadata.namespace, "sandgate");
        for value in secret.string_data.values() {
            assert_eq!(value.len(), 64, "{}", secret.metadata.name);
            assert!(value.bytes().all(|b| b.is_ascii_hexdigit()));
        }
    }
    let second = gen_secrets("elsewhere").await;
    assert!(
        second
            .iter()
            .all(|secret| secret.metadata.namespace == "elsewhere")
    );
    for (a, b) in first.iter().zip(&second) {
        assert_ne!(a.string_data, b.string_data, "{}", a.metadata.name);
    }
}
