//! The runtime API's sandbox settings: the sandbox URL, the Kubernetes driver's settings,
//! the warm runtimes file and whether its pools fit the nodes (spec 2.9, 8).

use sandgate_runtime_api::admin::configs::Installer;
use sandgate_runtime_api::sandboxes::kubernetes::refusal;
use sandgate_runtime_api::store::SandboxSpec;

use super::quantity::{format_bytes, parse_bytes};
use super::{Finding, RuntimeApiSettings, Severity};
use crate::cli::SandboxDriverKind;

const RUNTIME_ID: &str = "{runtime_id}";

/// `RUNTIME_URL_PATTERN`, when set, is the URL sandboxes really get:
/// `{scheme}://{runtime_id}{RUNTIME_URL_SEPARATOR}{RUNTIME_BASE_URL}`, https unless
/// `RUNTIME_DISABLE_SSL`. Otherwise the application links to hosts no sandbox answers on.
pub fn runtime_url_pattern(settings: &RuntimeApiSettings) -> Vec<Finding> {
    let Some(pattern) = &settings.runtime_url_pattern else {
        return Vec::new();
    };
    let scheme = if settings.runtime_disable_ssl {
        "http"
    } else {
        "https"
    };
    let expected = format!(
        "{scheme}://{RUNTIME_ID}{}{}",
        settings.runtime_url_separator, settings.runtime_base_url
    );
    if !pattern.contains(RUNTIME_ID) {
        return vec![Finding::new(
            Severity::Fatal,
            "RUNTIME_URL_PATTERN",
            format!("{pattern:?} has no {RUNTIME_ID}; with these settings it is {expected:?}"),
        )];
    }
    let (pattern_scheme, rest) = pattern.split_once("://").unwrap_or(("", pattern));
    let mut findings = Vec::new();
    if pattern_scheme == "https" && settings.runtime_disable_ssl {
        findings.push(Finding::new(
            Severity::Fatal,
            "RUNTIME_DISABLE_SSL",
            "is true (the default), but RUNTIME_URL_PATTERN is https: set RUNTIME_DISABLE_SSL=false",
        ));
    } else if pattern_scheme != scheme {
        findings.push(Finding::new(
            Severity::Fatal,
            "RUNTIME_URL_PATTERN",
            format!(
                "{pattern:?} is not {scheme}://…, the scheme of sandbox URLs (RUNTIME_DISABLE_SSL={}); it should be {expected:?}",
                settings.runtime_disable_ssl
            ),
        ));
    }
    let host = rest.trim_end_matches('/');
    let expected_host = format!(
        "{RUNTIME_ID}{}{}",
        settings.runtime_url_separator, settings.runtime_base_url
    );
    if host != expected_host {
        findings.push(Finding::new(
            Severity::Fatal,
            "RUNTIME_URL_PATTERN",
            format!(
                "{pattern:?} does not match the sandbox hosts {expected_host:?} \
                 ({RUNTIME_ID}, RUNTIME_URL_SEPARATOR {:?}, RUNTIME_BASE_URL {:?}): make them agree",
                settings.runtime_url_separator, settings.runtime_base_url
            ),
        ));
    }
    findings
}

fn kubernetes(settings: &RuntimeApiSettings) -> bool {
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

/// `EPHEMERAL_STORAGE_SIZE` is a quantity, where it is used: by the Kubernetes driver
/// (fatal: every sandbox would be refused), and by the node capacity check.
pub fn ephemeral_storage_size(settings: &RuntimeApiSettings) -> Vec<Finding> {
    let severity = if kubernetes(settings) {
        Severity::Fatal
    } else if settings.node_ephemeral_storage.is_some() {
        Severity::Error
    } else {
        return Vec::new();
    };
    match parse_bytes(&settings.ephemeral_storage_size) {
        Ok(0) => vec![Finding::new(
            severity,
            "EPHEMERAL_STORAGE_SIZE",
            format!(
                "{:?} is no space at all: a sandbox's scratch disk (image layers written to, \
                 /tmp) is capped at it, and the kubelet evicts the pod that writes a byte; \
                 give it room, e.g. 25Gi",
                settings.ephemeral_storage_size
            ),
        )],
        Ok(_) => Vec::new(),
        Err(err) => vec![Finding::new(severity, "EPHEMERAL_STORAGE_SIZE", err)],
    }
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

/// The installer's warm runtimes file, when named, read and parsed as the runtime API
/// parses it (an unreadable or invalid one stops its start).
pub fn warm_runtimes_file(settings: &RuntimeApiSettings) -> Result<Option<Installer>, Finding> {
    let Some(path) = &settings.warm_runtimes_file else {
        return Ok(None);
    };
    let fatal = |err: String| {
        Finding::new(
            Severity::Fatal,
            "WARM_RUNTIMES_FILE",
            format!("{}: {err}", path.display()),
        )
    };
    let text = std::fs::read_to_string(path).map_err(|err| fatal(err.to_string()))?;
    Installer::parse(&text).map(Some).map_err(fatal)
}

/// With `NODE_EPHEMERAL_STORAGE`, the warm pools fit the nodes (spec 8): the sum of the
/// installer's pool sizes × `EPHEMERAL_STORAGE_SIZE` ≤ `SANDBOX_NODES` × the node's
/// allocatable ephemeral storage; otherwise warm pods stay Pending. Configurations saved
/// through the API are not known here.
pub fn node_capacity(settings: &RuntimeApiSettings, installer: Option<&Installer>) -> Vec<Finding> {
    let Some(node) = &settings.node_ephemeral_storage else {
        return Vec::new();
    };
    let capacity = match parse_bytes(node) {
        Ok(capacity) => capacity,
        Err(err) => return vec![Finding::new(Severity::Error, "NODE_EPHEMERAL_STORAGE", err)],
    };
    // An unparsable size is its own finding (ephemeral_storage_size).
    let Ok(per_pod) = parse_bytes(&settings.ephemeral_storage_size) else {
        return Vec::new();
    };
    let pools: Vec<(&str, u128)> = installer
        .map(|installer| {
            installer
                .configs
                .iter()
                .map(|(name, config)| {
                    let count = u128::try_from(installer.count_of(config)).unwrap_or(0);
                    (name.as_str(), count)
                })
                .collect()
        })
        .unwrap_or_default();
    let pods: u128 = pools.iter().map(|(_, count)| count).sum();
    let mut findings = Vec::new();
    if pods > 0 && per_pod > capacity {
        findings.push(Finding::new(
            Severity::Error,
            "EPHEMERAL_STORAGE_SIZE",
            format!(
                "a warm pod reserves {}, more than a node has (NODE_EPHEMERAL_STORAGE {}): no node can run one",
                format_bytes(per_pod),
                format_bytes(capacity)
            ),
        ));
    }
    let nodes = u128::from(settings.sandbox_nodes);
    let needed = pods.saturating_mul(per_pod);
    let available = nodes.saturating_mul(capacity);
    if needed > available {
        let breakdown: Vec<String> = pools
            .iter()
            .map(|(name, count)| format!("{name} {count}"))
            .collect();
        findings.push(Finding::new(
            Severity::Error,
            "NODE_EPHEMERAL_STORAGE",
            format!(
                "the warm pools need {pods} pod(s) ({}) × {} = {}, but {nodes} node(s) × {} = {} is \
                 allocatable: lower the pool sizes in WARM_RUNTIMES_FILE or EPHEMERAL_STORAGE_SIZE, \
                 or add nodes (SANDBOX_NODES)",
                breakdown.join(", "),
                format_bytes(per_pod),
                format_bytes(needed),
                format_bytes(capacity),
                format_bytes(available),
            ),
        ));
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> RuntimeApiSettings {
        RuntimeApiSettings::default()
    }

    /// The production layout of INSTALL.md.
    fn https_layout() -> RuntimeApiSettings {
        RuntimeApiSettings {
            runtime_base_url: "runtime.sandgate.example.com".to_owned(),
            runtime_disable_ssl: false,
            runtime_url_pattern: Some(
                "https://{runtime_id}-runtime.sandgate.example.com".to_owned(),
            ),
            ..settings()
        }
    }

    fn settings_named(findings: &[Finding]) -> Vec<&str> {
        findings
            .iter()
            .map(|finding| finding.setting.as_str())
            .collect()
    }

    #[test]
    fn a_url_pattern_matching_the_sandbox_urls_passes() {
        assert_eq!(runtime_url_pattern(&https_layout()), []);
        let defaults = RuntimeApiSettings {
            runtime_url_pattern: Some("http://{runtime_id}-runtime.localhost".to_owned()),
            ..settings()
        };
        assert_eq!(runtime_url_pattern(&defaults), []);
        assert_eq!(
            runtime_url_pattern(&settings()),
            [],
            "unset: nothing to compare"
        );
    }

    #[test]
    fn a_url_pattern_without_the_runtime_id_is_fatal() {
        let findings = runtime_url_pattern(&RuntimeApiSettings {
            runtime_url_pattern: Some("https://sandbox.sandgate.example.com".to_owned()),
            ..https_layout()
        });
        assert_eq!(settings_named(&findings), ["RUNTIME_URL_PATTERN"]);
        assert_eq!(findings[0].severity, Severity::Fatal);
        assert!(findings[0].message.contains("has no {runtime_id}"));
    }

    #[test]
    fn an_https_pattern_with_ssl_disabled_names_runtime_disable_ssl() {
        let findings = runtime_url_pattern(&RuntimeApiSettings {
            runtime_disable_ssl: true,
            ..https_layout()
        });
        assert_eq!(settings_named(&findings), ["RUNTIME_DISABLE_SSL"]);
        assert!(
            findings[0]
                .message
                .contains("set RUNTIME_DISABLE_SSL=false")
        );
    }

    #[test]
    fn a_pattern_on_other_hosts_names_both_sides() {
        let findings = runtime_url_pattern(&RuntimeApiSettings {
            runtime_url_separator: ".".to_owned(),
            ..https_layout()
        });
        assert_eq!(settings_named(&findings), ["RUNTIME_URL_PATTERN"]);
        assert!(
            findings[0]
                .message
                .contains("\"{runtime_id}.runtime.sandgate.example.com\""),
            "{}",
            findings[0].message
        );
        let http = runtime_url_pattern(&RuntimeApiSettings {
            runtime_url_pattern: Some(
                "http://{runtime_id}-runtime.sandgate.example.com".to_owned(),
            ),
            ..https_layout()
        });
        assert_eq!(settings_named(&http), ["RUNTIME_URL_PATTERN"]);
        assert!(
            http[0].message.contains("not https://"),
            "{}",
            http[0].message
        );
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

    #[test]
    fn the_ephemeral_storage_size_is_a_quantity_where_it_is_used() {
        assert_eq!(ephemeral_storage_size(&on_kubernetes()), []);
        let bad = |settings: RuntimeApiSettings| {
            ephemeral_storage_size(&RuntimeApiSettings {
                ephemeral_storage_size: "25GB".to_owned(),
                ..settings
            })
        };
        assert_eq!(bad(settings()), [], "the local driver does not use it");
        let findings = bad(on_kubernetes());
        assert_eq!(settings_named(&findings), ["EPHEMERAL_STORAGE_SIZE"]);
        assert_eq!(findings[0].severity, Severity::Fatal);
        let for_capacity = bad(RuntimeApiSettings {
            node_ephemeral_storage: Some("100Gi".to_owned()),
            ..settings()
        });
        assert_eq!(for_capacity[0].severity, Severity::Error);
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap_or_else(|err| panic!("{err}"));
        std::fs::write(file.path(), text).unwrap_or_else(|err| panic!("{err}"));
        file
    }

    const ENTRY: &str = r#""working_dir": "/w", "command": ["s"], "environment": {}"#;

    fn warm_file(count: Option<i64>, entries: &[(&str, Option<i64>)]) -> tempfile::NamedTempFile {
        let configs: Vec<String> = entries
            .iter()
            .map(|(name, count)| {
                let count = count
                    .map(|count| format!(r#", "count": {count}"#))
                    .unwrap_or_default();
                format!(r#"{{"name": "{name}", "image": "img:{name}", {ENTRY}{count}}}"#)
            })
            .collect();
        let count = count
            .map(|count| format!(r#""count": {count}, "#))
            .unwrap_or_default();
        file(&format!(
            r#"{{{count}"configs": [{}]}}"#,
            configs.join(", ")
        ))
    }

    #[test]
    fn the_warm_runtimes_file_parses() {
        let good = warm_file(Some(1), &[("v1_current", None)]);
        let installer = warm_runtimes_file(&RuntimeApiSettings {
            warm_runtimes_file: Some(good.path().to_owned()),
            ..settings()
        });
        assert!(matches!(installer, Ok(Some(ref installer)) if installer.configs.len() == 1));
        assert!(matches!(warm_runtimes_file(&settings()), Ok(None)));
    }

    #[test]
    fn a_broken_or_missing_warm_runtimes_file_is_fatal() {
        let broken = file(r#"{"count": -1}"#);
        for path in [
            broken.path().to_owned(),
            broken.path().with_extension("gone"),
        ] {
            let finding = warm_runtimes_file(&RuntimeApiSettings {
                warm_runtimes_file: Some(path),
                ..settings()
            })
            .err();
            assert!(
                matches!(&finding, Some(f) if f.setting == "WARM_RUNTIMES_FILE" && f.severity == Severity::Fatal),
                "{finding:?}"
            );
        }
    }

    fn capacity(
        node: &str,
        nodes: u32,
        size: &str,
        file: &tempfile::NamedTempFile,
    ) -> Vec<Finding> {
        let settings = RuntimeApiSettings {
            node_ephemeral_storage: Some(node.to_owned()),
            sandbox_nodes: nodes,
            ephemeral_storage_size: size.to_owned(),
            warm_runtimes_file: Some(file.path().to_owned()),
            ..on_kubernetes()
        };
        let installer = warm_runtimes_file(&settings).unwrap_or_else(|err| panic!("{err}"));
        node_capacity(&settings, installer.as_ref())
    }

    #[test]
    fn pools_that_fit_the_nodes_pass() {
        // v1_current 2, custom the file's 1: 3 pods × 25Gi = 75Gi ≤ 2 × 40Gi.
        let pools = warm_file(Some(1), &[("v1_current", Some(2)), ("custom", None)]);
        assert_eq!(capacity("40Gi", 2, "25Gi", &pools), []);
        assert_eq!(capacity("75Gi", 1, "25Gi", &pools), [], "exactly full fits");
        assert_eq!(
            node_capacity(&settings(), None),
            [],
            "no node capacity given"
        );
    }

    #[test]
    fn pools_larger_than_the_nodes_give_both_numbers() {
        // No count anywhere: 3 per configuration, 2 configurations: 6 × 25Gi = 150Gi.
        let pools = warm_file(None, &[("v1_current", None), ("custom", None)]);
        let findings = capacity("100Gi", 1, "25Gi", &pools);
        assert_eq!(settings_named(&findings), ["NODE_EPHEMERAL_STORAGE"]);
        let message = &findings[0].message;
        assert!(
            message.contains("6 pod(s) (custom 3, v1_current 3) × 25Gi = 150Gi"),
            "{message}"
        );
        assert!(message.contains("1 node(s) × 100Gi = 100Gi"), "{message}");
    }

    #[test]
    fn a_pod_larger_than_a_node_is_named() {
        let pools = warm_file(Some(1), &[("v1_current", None)]);
        let findings = capacity("20Gi", 4, "25Gi", &pools);
        assert_eq!(settings_named(&findings), ["EPHEMERAL_STORAGE_SIZE"]);
    }

    #[test]
    fn an_unparsable_node_capacity_is_an_error() {
        let pools = warm_file(Some(1), &[("v1_current", None)]);
        let findings = capacity("lots", 1, "25Gi", &pools);
        assert_eq!(settings_named(&findings), ["NODE_EPHEMERAL_STORAGE"]);
        assert_eq!(findings[0].severity, Severity::Error);
    }
}
