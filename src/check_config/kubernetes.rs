//! The Kubernetes driver's settings: a storage class, a namespace, and every name and host
//! the driver sends being one the API server accepts; and the installer's warm
//! configurations being ones the sandbox namespace's pod security level lets run.

use sandgate_runtime_api::admin::installer::Installer;
use sandgate_runtime_api::sandboxes::kubernetes::refusal;
use sandgate_store::SandboxSpec;

use super::{Finding, RuntimeApiSettings, Severity};
use crate::cli::SandboxDriverKind;

pub fn kubernetes(settings: &RuntimeApiSettings) -> bool {
    settings.sandbox_driver == SandboxDriverKind::Kubernetes
}

/// With the Kubernetes driver, `STORAGE_CLASS` is set: the chart's default exists on one
/// cloud only, and without a class that exists sandboxes never start (spec 2.9).
pub fn storage_class(settings: &RuntimeApiSettings) -> Vec<Finding> {
    if !kubernetes(settings) || settings.storage_class.is_some() {
        return Vec::new();
    }
    vec![Finding::new(
        Severity::Fatal,
        "STORAGE_CLASS",
        "not set: with SANDBOX_DRIVER=kubernetes sandbox volumes need a storage class that \
         exists in the cluster (kubectl get storageclass), or sandboxes never start",
    )]
}

/// Whether `name` is a DNS-1123 label, as a namespace name must be.
fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    (1..=63).contains(&bytes.len())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// With the Kubernetes driver, `SANDBOX_NAMESPACE` is a valid namespace name.
pub fn sandbox_namespace(settings: &RuntimeApiSettings) -> Vec<Finding> {
    if !kubernetes(settings) || is_dns_label(&settings.sandbox_namespace) {
        return Vec::new();
    }
    vec![Finding::new(
        Severity::Fatal,
        "SANDBOX_NAMESPACE",
        format!(
            "{:?} is not a DNS-1123 label (lowercase letters, digits and '-', at most 63, \
             starting and ending with a letter or digit)",
            settings.sandbox_namespace
        ),
    )]
}

/// Whether `name` is a DNS-1123 subdomain, as the API server requires of a storage class's,
/// an ingress class's and a secret's name, and of an Ingress host: labels of lowercase
/// letters, digits and '-' (each starting and ending with a letter or digit), joined by
/// dots, at most 253 in all.
fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns_label)
}

/// A runtime id as the Kubernetes driver draws them (20 hex digits), to build a sandbox
/// host as the API server will see it.
const EXAMPLE_RUNTIME_ID: &str = "0123456789abcdef0123";

/// With the Kubernetes driver, every name and host the driver puts in the objects it
/// sends is one the API server accepts: otherwise every sandbox is refused at its
/// creation (422), the warm pools stay empty and starts fail.
pub fn kubernetes_names(settings: &RuntimeApiSettings) -> Vec<Finding> {
    if !kubernetes(settings) {
        return Vec::new();
    }
    let mut findings = Vec::new();
    let names = [
        ("STORAGE_CLASS", &settings.storage_class),
        ("SANDBOX_INGRESS_CLASS", &settings.sandbox_ingress_class),
        ("SANDBOX_TLS_SECRET", &settings.sandbox_tls_secret),
    ];
    for (setting, name) in names {
        if let Some(name) = name
            && !is_dns_subdomain(name)
        {
            findings.push(Finding::new(
                Severity::Fatal,
                setting,
                format!(
                    "{name:?} is not a name Kubernetes accepts (a DNS-1123 subdomain: lowercase \
                     letters, digits, '-' and '.', each part starting and ending with a letter \
                     or digit)"
                ),
            ));
        }
    }
    let base = &settings.runtime_base_url;
    if base.contains("://") || base.contains(':') || base.contains('/') {
        findings.push(Finding::new(
            Severity::Fatal,
            "RUNTIME_BASE_URL",
            format!(
                "{base:?} is a host suffix, without scheme, port or path: sandbox Ingresses \
                 are served on the ingress controller's ports (e.g. runtime.sandgate.example.com)"
            ),
        ));
    } else if !base.split('.').all(is_dns_label) {
        findings.push(Finding::new(
            Severity::Fatal,
            "RUNTIME_BASE_URL",
            format!(
                "{base:?} is not a host an Ingress accepts (lowercase letters, digits, '-' and \
                 '.', each label starting and ending with a letter or digit)"
            ),
        ));
    } else {
        let separator = &settings.runtime_url_separator;
        let host = format!("{EXAMPLE_RUNTIME_ID}{separator}{base}");
        let first_label = host.split('.').next().unwrap_or_default();
        let separator_is_valid = separator
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if separator_is_valid && host.len() > 253 {
            findings.push(Finding::new(
                Severity::Fatal,
                "RUNTIME_BASE_URL",
                format!(
                    "is {} characters: sandbox hosts ({{runtime_id}}{separator}{base}, the id \
                     {} characters) would be {}, more than the 253 a host name may have; use a \
                     shorter base domain",
                    base.len(),
                    EXAMPLE_RUNTIME_ID.len(),
                    host.len()
                ),
            ));
        } else if separator_is_valid && first_label.len() > 63 {
            findings.push(Finding::new(
                Severity::Fatal,
                "RUNTIME_BASE_URL",
                format!(
                    "sandbox hosts begin with {first_label:?} ({} characters: the runtime id, \
                     {separator:?} and the base domain's first label), more than the 63 a DNS \
                     label may have; shorten that label, or use \".\" as RUNTIME_URL_SEPARATOR",
                    first_label.len()
                ),
            ));
        } else if !is_dns_subdomain(&host) {
            findings.push(Finding::new(
                Severity::Fatal,
                "RUNTIME_URL_SEPARATOR",
                format!(
                    "{:?} makes sandbox hosts like {host:?}, which an Ingress refuses: use '-' \
                     (or lowercase letters, digits, '-' and '.')",
                    settings.runtime_url_separator
                ),
            ));
        }
    }
    if settings.sandbox_port == 0 {
        findings.push(Finding::new(
            Severity::Fatal,
            "SANDBOX_PORT",
            "is 0: a sandbox's Service and container port must be 1 to 65535 (the agent \
             server's port, 8000 by default)",
        ));
    }
    findings
}

/// With the Kubernetes driver, every warm configuration of the installer's file is one
/// that `SANDBOX_POD_SECURITY` (the level the sandbox namespace enforces) lets run:
/// otherwise its pool stays empty. Configurations saved through the API are checked when
/// they are saved.
pub fn warm_pod_security(
    settings: &RuntimeApiSettings,
    installer: Option<&Installer>,
) -> Vec<Finding> {
    let Some(installer) = installer.filter(|_| kubernetes(settings)) else {
        return Vec::new();
    };
    installer
        .configs
        .iter()
        .filter_map(|(name, config)| {
            let spec = SandboxSpec {
                run_as_user: config.run_as_user,
                fuse_s3_mount: config.fuse_s3_mount,
                ..SandboxSpec::default()
            };
            let refusal = refusal(&spec, settings.sandbox_pod_security)?;
            // The service still runs (its other pools fill); this one would stay empty.
            Some(Finding::new(
                Severity::Error,
                "WARM_RUNTIMES_FILE",
                format!(
                    "configuration {name:?}: {} {}: {}",
                    refusal.field, refusal.input, refusal.message
                ),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> RuntimeApiSettings {
        RuntimeApiSettings::default()
    }

    fn settings_named(findings: &[Finding]) -> Vec<&str> {
        findings
            .iter()
            .map(|finding| finding.setting.as_str())
            .collect()
    }

    fn on_kubernetes() -> RuntimeApiSettings {
        RuntimeApiSettings {
            sandbox_driver: SandboxDriverKind::Kubernetes,
            storage_class: Some("standard-rwo".to_owned()),
            ..settings()
        }
    }

    #[test]
    fn names_and_hosts_the_api_server_would_refuse_are_fatal_each_named() {
        let valid = RuntimeApiSettings {
            sandbox_ingress_class: Some("nginx".to_owned()),
            sandbox_tls_secret: Some("sandgate-wildcard-tls".to_owned()),
            runtime_base_url: "runtime.sandgate.example.com".to_owned(),
            ..on_kubernetes()
        };
        assert_eq!(kubernetes_names(&valid), []);
        let cases: Vec<(RuntimeApiSettings, &str)> = vec![
            (
                RuntimeApiSettings {
                    storage_class: Some("Standard-RWO".to_owned()),
                    ..valid.clone()
                },
                "STORAGE_CLASS",
            ),
            (
                RuntimeApiSettings {
                    storage_class: Some("standard_rwo".to_owned()),
                    ..valid.clone()
                },
                "STORAGE_CLASS",
            ),
            (
                RuntimeApiSettings {
                    sandbox_ingress_class: Some("Nginx".to_owned()),
                    ..valid.clone()
                },
                "SANDBOX_INGRESS_CLASS",
            ),
            (
                RuntimeApiSettings {
                    sandbox_tls_secret: Some("wildcard_tls".to_owned()),
                    ..valid.clone()
                },
                "SANDBOX_TLS_SECRET",
            ),
            (
                RuntimeApiSettings {
                    runtime_base_url: "Runtime.Example.com".to_owned(),
                    ..valid.clone()
                },
                "RUNTIME_BASE_URL",
            ),
            (
                RuntimeApiSettings {
                    runtime_base_url: "runtime_sandboxes.example.com".to_owned(),
                    ..valid.clone()
                },
                "RUNTIME_BASE_URL",
            ),
            (
                RuntimeApiSettings {
                    runtime_base_url: "runtime.example.com:8443".to_owned(),
                    ..valid.clone()
                },
                "RUNTIME_BASE_URL",
            ),
            (
                RuntimeApiSettings {
                    runtime_url_separator: "_".to_owned(),
                    ..valid.clone()
                },
                "RUNTIME_URL_SEPARATOR",
            ),
            (
                RuntimeApiSettings {
                    sandbox_port: 0,
                    ..valid.clone()
                },
                "SANDBOX_PORT",
            ),
        ];
        for (settings, named) in cases {
            let findings = kubernetes_names(&settings);
            assert_eq!(settings_named(&findings), [named]);
            assert_eq!(findings[0].severity, Severity::Fatal);
        }
        // A base domain too long for the sandbox hosts is the base domain's fault, not
        // the separator's: in all, or in the host's first label.
        for base in [
            format!("{}.example.com", vec!["a".repeat(60); 4].join(".")),
            format!("{}.example.com", "b".repeat(50)),
        ] {
            let findings = kubernetes_names(&RuntimeApiSettings {
                runtime_base_url: base.clone(),
                ..valid.clone()
            });
            assert_eq!(settings_named(&findings), ["RUNTIME_BASE_URL"], "{base}");
        }
        // The local driver sends nothing to an API server.
        let local = RuntimeApiSettings {
            sandbox_driver: SandboxDriverKind::Local,
            runtime_url_separator: "_".to_owned(),
            ..valid
        };
        assert_eq!(kubernetes_names(&local), []);
    }

    #[test]
    fn kubernetes_needs_a_storage_class() {
        assert_eq!(storage_class(&on_kubernetes()), []);
        assert_eq!(
            storage_class(&settings()),
            [],
            "the local driver has no volumes"
        );
        let findings = storage_class(&RuntimeApiSettings {
            storage_class: None,
            ..on_kubernetes()
        });
        assert_eq!(settings_named(&findings), ["STORAGE_CLASS"]);
        assert_eq!(findings[0].severity, Severity::Fatal);
    }

    #[test]
    fn the_sandbox_namespace_is_a_dns_label() {
        assert_eq!(sandbox_namespace(&on_kubernetes()), []);
        for bad in [
            "Sandboxes",
            "-sandboxes",
            "sandboxes-",
            "sand_boxes",
            "",
            &"a".repeat(64),
        ] {
            let findings = sandbox_namespace(&RuntimeApiSettings {
                sandbox_namespace: bad.to_owned(),
                ..on_kubernetes()
            });
            assert_eq!(settings_named(&findings), ["SANDBOX_NAMESPACE"], "{bad:?}");
        }
    }

    fn warm(configs: &str) -> Installer {
        Installer::parse(&format!(r#"{{"configs": [{configs}]}}"#))
            .unwrap_or_else(|err| panic!("{err}"))
    }

    #[test]
    fn warm_configurations_the_pod_security_level_refuses_name_the_level_to_set() {
        let installer = warm(
            r#"{"name": "root", "image": "i", "working_dir": "/w", "command": ["c"], "environment": {}, "run_as_user": 0},
               {"name": "s3", "image": "j", "working_dir": "/w", "command": ["c"], "environment": {}, "fuse_s3_mount": true},
               {"name": "ok", "image": "k", "working_dir": "/w", "command": ["c"], "environment": {}}"#,
        );
        let findings = warm_pod_security(&on_kubernetes(), Some(&installer));
        let messages: Vec<&str> = findings.iter().map(|f| f.message.as_str()).collect();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(messages[0].starts_with("configuration \"root\": run_as_user 0"));
        assert!(messages[0].contains("SANDBOX_POD_SECURITY=baseline"));
        assert!(messages[1].starts_with("configuration \"s3\": fuse_s3_mount true"));
        assert!(messages[1].contains("SANDBOX_POD_SECURITY=privileged"));
        assert!(findings.iter().all(|f| f.severity == Severity::Error));
        let privileged = RuntimeApiSettings {
            sandbox_pod_security:
                sandgate_runtime_api::sandboxes::kubernetes::PodSecurity::Privileged,
            ..on_kubernetes()
        };
        assert_eq!(warm_pod_security(&privileged, Some(&installer)), []);
        assert_eq!(
            warm_pod_security(&settings(), Some(&installer)),
            [],
            "the local driver runs no pods"
        );
    }
}
