//! The runtime API's sandbox settings: the sandbox URL, the scratch disk, the warm
//! runtimes file and whether its pools fit the nodes (spec 2.9, 8).

use sandgate_runtime_api::admin::installer::Installer;
use sandgate_runtime_api::sandboxes::process::check_program;
use sandgate_runtime_api::sandboxes::process_isolation::{Isolation, Requirement};

use super::kubernetes::kubernetes;
use super::quantity::{format_bytes, parse_bytes};
use super::{Finding, RuntimeApiSettings, Severity};

const RUNTIME_ID: &str = "{runtime_id}";

/// With the process driver, what this machine does not let it do to keep sandboxes from
/// Sandgate and from each other (as `serve` says at start), one warning each; where they
/// would get no view or no network of their own, the refusal `serve` would make, unless
/// `SANDBOX_ISOLATION` is best effort.
pub fn process_isolation(settings: &RuntimeApiSettings) -> Vec<Finding> {
    if settings.sandbox_driver != crate::cli::SandboxDriverKind::Process {
        return Vec::new();
    }
    isolation_findings(settings.sandbox_isolation, &Isolation::detect())
}

fn isolation_findings(requirement: Requirement, isolation: &Isolation) -> Vec<Finding> {
    if requirement == Requirement::Required
        && let Some(shortfall) = isolation.shortfall()
    {
        return vec![Finding::new(
            Severity::Fatal,
            "SANDBOX_ISOLATION",
            format!("process: {shortfall}"),
        )];
    }
    isolation
        .gaps()
        .into_iter()
        .map(|gap| {
            Finding::new(
                Severity::Warning,
                "SANDBOX_DRIVER",
                format!("process: {gap}"),
            )
        })
        .collect()
}

/// With the process driver, a Redis store without a password on the URL: sandboxes run
/// code on this machine, and a Redis that asks no password gives whoever reaches it every
/// record, gateway keys included. A sandbox with a network of its own does not reach this
/// machine's loopback; any other process here does.
pub fn process_beside_open_redis(settings: &RuntimeApiSettings) -> Vec<Finding> {
    if settings.sandbox_driver != crate::cli::SandboxDriverKind::Process {
        return Vec::new();
    }
    let Some(url) = &settings.redis_url else {
        return Vec::new();
    };
    let authority = url
        .split_once("://")
        .map_or("", |(_, rest)| rest.split(['/', '?']).next().unwrap_or(""));
    let password = authority
        .rsplit_once('@')
        .and_then(|(credentials, _)| credentials.split_once(':').map(|(_, password)| password))
        .is_some_and(|password| !password.is_empty());
    if password || url.starts_with("redis+unix://") || url.starts_with("unix://") {
        return Vec::new();
    }
    vec![Finding::new(
        Severity::Warning,
        "REDIS_URL",
        "the process driver runs sandboxes on this machine beside a Redis store without a \
         password: anything that reaches it reads every record and can mint gateway keys; \
         give Redis a password (requirepass, or an ACL user) and put it in REDIS_URL",
    )]
}

/// With the process driver, whether a sandbox's uid can reach the program of each warm
/// configuration: a start would fail, naming the same path, mode and uid.
pub fn process_programs(
    settings: &RuntimeApiSettings,
    installer: Option<&Installer>,
) -> Vec<Finding> {
    if settings.sandbox_driver != crate::cli::SandboxDriverKind::Process {
        return Vec::new();
    }
    let Some(installer) = installer else {
        return Vec::new();
    };
    let isolation = Isolation::detect();
    installer
        .configs
        .iter()
        .filter_map(|(name, config)| {
            let program = config.command.first().unwrap_or(&config.image);
            let path = config.environment.get("PATH").map(String::as_str);
            check_program(program, path, &settings.sandbox_read_only_paths, &isolation)
                .err()
                .map(|err| {
                    Finding::new(
                        Severity::Error,
                        "WARM_RUNTIMES_FILE",
                        format!("warm configuration {name:?}: no sandbox can start: {err}"),
                    )
                })
        })
        .collect()
}

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

    #[test]
    fn a_redis_without_a_password_beside_process_sandboxes_is_a_warning() {
        let with = |driver, url: Option<&str>| {
            let mut settings = settings();
            settings.sandbox_driver = driver;
            settings.redis_url = url.map(str::to_owned);
            process_beside_open_redis(&settings)
        };
        use crate::cli::SandboxDriverKind::{Local, Process};
        let open = with(Process, Some("redis://127.0.0.1:6379/0"));
        assert_eq!(open.len(), 1);
        assert_eq!(open[0].setting, "REDIS_URL");
        assert_eq!(open[0].severity, Severity::Warning);
        assert!(with(Process, Some("redis://user@127.0.0.1:6379")).len() == 1);
        assert!(with(Process, Some("redis://:s3cret@127.0.0.1:6379")).is_empty());
        assert!(with(Process, Some("rediss://default:s3cret@redis:6380")).is_empty());
        assert!(with(Process, None).is_empty(), "embedded store");
        assert!(with(Local, Some("redis://127.0.0.1:6379")).is_empty());
    }

    #[test]
    fn the_process_driver_says_what_isolation_this_machine_lacks() {
        assert!(process_isolation(&settings()).is_empty(), "local driver");
        let bare = Isolation::none();
        // Where sandboxes would get neither a view nor a network of their own, `serve`
        // refuses to start, and says what to install and how to go on regardless.
        let refused = isolation_findings(Requirement::Required, &bare);
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(refused[0].severity, Severity::Fatal);
        let said = refused[0].to_string();
        for part in ["bubblewrap", "passt", "SANDBOX_ISOLATION=best-effort"] {
            assert!(said.contains(part), "{part}: {said}");
        }
        // Best effort: it starts, and every gap is a warning, cgroups included (no
        // machine Sandgate runs on gets per-sandbox cgroups from it).
        let warned = isolation_findings(Requirement::BestEffort, &bare);
        assert!(warned.iter().all(|finding| !finding.is_error()));
        for part in ["cgroup", "no view of its own", "no network of its own"] {
            assert!(
                warned
                    .iter()
                    .any(|finding| finding.to_string().contains(part)),
                "{part}: {warned:?}"
            );
        }
    }

    /// The production layout of docs/install.md.
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

    fn on_kubernetes() -> RuntimeApiSettings {
        RuntimeApiSettings {
            sandbox_driver: crate::cli::SandboxDriverKind::Kubernetes,
            storage_class: Some("standard-rwo".to_owned()),
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
        let nothing = ephemeral_storage_size(&RuntimeApiSettings {
            ephemeral_storage_size: "0".to_owned(),
            ..on_kubernetes()
        });
        assert_eq!(settings_named(&nothing), ["EPHEMERAL_STORAGE_SIZE"]);
        assert!(
            nothing[0].message.contains("no space at all"),
            "{nothing:?}"
        );
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
