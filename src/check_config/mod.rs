//! The install's settings checked before they are used: by `sandgate check-config` before a
//! deploy, and by every service when it starts (the rules that apply to it).
//!
//! A finding has one of three severities, and the two callers treat them differently:
//!
//! | severity | `check-config` | a service at start |
//! |---|---|---|
//! | [`Severity::Fatal`]: the service cannot work as configured | error | refuses to start |
//! | [`Severity::Error`]: unsafe or broken for an install, the service still runs | error | warning |
//! | [`Severity::Warning`] | warning | warning |
//!
//! So a weak `ADMIN_PASSWORD` fails `check-config` but does not stop a development
//! `sandgate serve` run with short test keys, while an `os.environ/NAME` that nothing sets
//! stops both.

mod edge;
mod gateway;
mod kubernetes;
pub mod quantity;
mod sandboxes;
mod secrets;
mod settings;
mod start_request;
mod store;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use sandgate_runtime_api::sandboxes::kubernetes::PodSecurity;
use sandgate_runtime_api::sandboxes::process_isolation::Requirement;

use crate::cli::SandboxDriverKind;

pub use settings::from_check_config_args;

/// How much a finding matters (see the module's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The service cannot work as configured: it refuses to start.
    Fatal,
    /// Wrong for an install (a weak secret, pools that cannot fit the nodes), though the
    /// service runs: `check-config` fails, a service starts and logs it.
    Error,
    /// Worth a look; nothing fails.
    Warning,
}

/// One thing wrong with one setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub severity: Severity,
    /// The environment variable it is about, e.g. `STORAGE_CLASS`.
    pub setting: String,
    /// What is wrong and what to change. Never a secret's value.
    pub message: String,
}

impl Finding {
    fn new(severity: Severity, setting: &str, message: impl Into<String>) -> Self {
        Self {
            severity,
            setting: setting.to_owned(),
            message: message.into(),
        }
    }

    /// Whether `check-config` fails on it.
    pub fn is_error(&self) -> bool {
        self.severity <= Severity::Error
    }
}

/// `error: SETTING: message` or `warning: SETTING: message`.
impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = if self.is_error() { "error" } else { "warning" };
        write!(f, "{level}: {}: {}", self.setting, self.message)
    }
}

/// What is checked: the settings of each part the checked service runs (`serve` runs the
/// runtime API and the model gateway; the edge runs alone). Built from the command line
/// and the environment (see `settings.rs`), or by hand in tests.
#[derive(Clone, Default)]
pub struct Settings {
    pub runtime_api: Option<RuntimeApiSettings>,
    pub model_gw: Option<ModelGwSettings>,
    pub edge: Option<EdgeSettings>,
}

/// The runtime API's settings. No `Debug`: it holds secrets.
#[derive(Clone)]
pub struct RuntimeApiSettings {
    /// `REDIS_URL` is set: the store is shared, so the install may run replicas (and is
    /// restarted by its orchestrator), and keys that sign something must be set, the same
    /// everywhere, rather than random per process.
    pub shared_store: bool,
    /// `REDIS_URL`, unless unset or empty (the embedded store).
    pub redis_url: Option<String>,
    /// The TLS files given for Redis, by setting (`REDIS_CA_CERT`, …).
    pub redis_tls_files: Vec<(&'static str, PathBuf)>,
    pub webhook_api_keys: Vec<String>,
    pub default_api_key: Option<String>,
    pub admin_password: Option<String>,
    pub jwt_secret: Option<String>,
    pub sandbox_key_secret: Option<String>,
    pub warm_runtimes_file: Option<PathBuf>,
    pub sandbox_driver: SandboxDriverKind,
    pub sandbox_namespace: String,
    pub storage_class: Option<String>,
    pub sandbox_ingress_class: Option<String>,
    pub sandbox_tls_secret: Option<String>,
    pub sandbox_port: u16,
    pub ephemeral_storage_size: String,
    pub runtime_base_url: String,
    pub runtime_url_separator: String,
    pub runtime_disable_ssl: bool,
    pub runtime_url_pattern: Option<String>,
    /// Allocatable ephemeral storage per node, a quantity: when given, the warm pools are
    /// checked against it (spec 8).
    pub node_ephemeral_storage: Option<String>,
    pub sandbox_nodes: u32,
    /// `SANDBOX_POD_SECURITY`: what the warm configurations are checked against.
    pub sandbox_pod_security: PodSecurity,
    /// `--start-request`: a `/start` body to hold against the warm configurations.
    pub start_request: Option<PathBuf>,
    /// `SANDBOX_READ_ONLY_PATHS`: what every process sandbox sees besides its own.
    pub sandbox_read_only_paths: Vec<PathBuf>,
    /// `SANDBOX_ISOLATION`: whether a process sandbox must get a view and a network.
    pub sandbox_isolation: Requirement,
}

/// The binary's defaults, so tests state only what they change.
impl Default for RuntimeApiSettings {
    fn default() -> Self {
        Self {
            shared_store: false,
            redis_url: None,
            redis_tls_files: Vec::new(),
            webhook_api_keys: Vec::new(),
            default_api_key: None,
            admin_password: None,
            jwt_secret: None,
            sandbox_key_secret: None,
            warm_runtimes_file: None,
            sandbox_driver: SandboxDriverKind::Local,
            sandbox_namespace: "sandgate-sandboxes".to_owned(),
            storage_class: None,
            sandbox_ingress_class: None,
            sandbox_tls_secret: None,
            sandbox_port: 8000,
            ephemeral_storage_size: "25Gi".to_owned(),
            runtime_base_url: "runtime.localhost".to_owned(),
            runtime_url_separator: "-".to_owned(),
            runtime_disable_ssl: true,
            runtime_url_pattern: None,
            node_ephemeral_storage: None,
            sandbox_nodes: 1,
            sandbox_pod_security: PodSecurity::Restricted,
            start_request: None,
            sandbox_read_only_paths: Vec::new(),
            sandbox_isolation: Requirement::Required,
        }
    }
}

/// The model gateway's settings. No `Debug`: it holds secrets.
#[derive(Clone, Default)]
pub struct ModelGwSettings {
    pub gateway_config: Option<PathBuf>,
    pub proxy_master_key: Option<String>,
    /// The environment `os.environ/NAME` values resolve in (the process's, at start).
    pub environment: BTreeMap<String, String>,
}

/// The edge's settings: where it calls the services.
#[derive(Clone, Debug, Default)]
pub struct EdgeSettings {
    pub runtime_api_url: Option<String>,
    pub model_gw_url: Option<String>,
}

/// Every finding about `settings`, reading the files they name.
pub fn check(settings: &Settings) -> Vec<Finding> {
    let mut findings = Vec::new();
    if let Some(runtime) = &settings.runtime_api {
        findings.extend(store::redis(runtime));
        findings.extend(sandboxes::runtime_url_pattern(runtime));
        findings.extend(kubernetes::storage_class(runtime));
        findings.extend(kubernetes::sandbox_namespace(runtime));
        findings.extend(kubernetes::kubernetes_names(runtime));
        findings.extend(sandboxes::ephemeral_storage_size(runtime));
        findings.extend(sandboxes::process_isolation(runtime));
        findings.extend(sandboxes::process_beside_open_redis(runtime));
        let installer = match sandboxes::warm_runtimes_file(runtime) {
            Ok(installer) => installer,
            Err(finding) => {
                findings.push(finding);
                None
            }
        };
        findings.extend(sandboxes::node_capacity(runtime, installer.as_ref()));
        findings.extend(sandboxes::process_programs(runtime, installer.as_ref()));
        findings.extend(kubernetes::warm_pod_security(runtime, installer.as_ref()));
        findings.extend(start_request::start_request(runtime, installer.as_ref()));
        findings.extend(secrets::runtime_api_secrets(runtime));
        findings.extend(secrets::signing_keys_shared(runtime));
    }
    if let Some(gateway) = &settings.model_gw {
        findings.extend(gateway::gateway_config(gateway));
        findings.extend(secrets::proxy_master_key(gateway));
    }
    if let Some(edge) = &settings.edge {
        findings.extend(edge::service_urls(edge));
    }
    findings
}

/// `sandgate check-config`: one line per finding, then a summary; whether none is an
/// error.
pub fn report(
    findings: &[Finding],
    checked: &str,
    out: &mut dyn std::io::Write,
) -> std::io::Result<bool> {
    for finding in findings {
        writeln!(out, "{finding}")?;
    }
    let errors = findings.iter().filter(|finding| finding.is_error()).count();
    let warnings = findings.len() - errors;
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let verdict = if errors == 0 {
        "ok"
    } else {
        "fix the errors before deploying"
    };
    writeln!(
        out,
        "check-config ({checked}): {}, {}: {verdict}",
        plural(errors, "error"),
        plural(warnings, "warning"),
    )?;
    Ok(errors == 0)
}

/// `sandgate check-config`: checks the settings of `args.service` (and with `--connect`,
/// that its store can be reached) and prints the report; whether it passed.
pub async fn run(
    args: &crate::cli::CheckConfigArgs,
    out: &mut dyn std::io::Write,
) -> std::io::Result<bool> {
    use clap::ValueEnum;
    let settings = from_check_config_args(args);
    let service = args
        .service
        .to_possible_value()
        .map(|value| value.get_name().to_owned())
        .unwrap_or_default();
    let mut findings = check(&settings);
    let fatal = findings
        .iter()
        .any(|finding| finding.severity == Severity::Fatal);
    if args.connect && settings.runtime_api.is_some() && !fatal {
        findings.extend(store::connect(&args.store).await);
    }
    let passed = report(&findings, &service, out)?;
    out.flush()?;
    Ok(passed)
}

/// A service's start: logs every finding that does not stop it, and refuses to start on a
/// fatal one, naming each.
pub fn refuse_on_fatal(settings: &Settings) -> anyhow::Result<()> {
    let findings = check(settings);
    for finding in findings.iter().filter(|f| f.severity != Severity::Fatal) {
        // `check_config = "error"`: an install should not run like this, though it can.
        let check_config = if finding.is_error() {
            "error"
        } else {
            "warning"
        };
        tracing::warn!(setting = %finding.setting, check_config, "{}", finding.message);
    }
    let fatal: Vec<String> = findings
        .iter()
        .filter(|finding| finding.severity == Severity::Fatal)
        .map(|finding| format!("{}: {}", finding.setting, finding.message))
        .collect();
    if fatal.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "refusing to start, the configuration is wrong (sandgate check-config lists every problem): {}",
            fatal.join("; ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(severity: Severity) -> Finding {
        Finding::new(severity, "STORAGE_CLASS", "not set")
    }

    #[test]
    fn findings_print_as_one_line_each_and_errors_fail_the_report() {
        let mut out = Vec::new();
        let ok = report(
            &[
                finding(Severity::Fatal),
                finding(Severity::Error),
                finding(Severity::Warning),
            ],
            "runtime-api",
            &mut out,
        )
        .unwrap_or_default();
        assert!(!ok);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "error: STORAGE_CLASS: not set\nerror: STORAGE_CLASS: not set\nwarning: STORAGE_CLASS: not set\n\
             check-config (runtime-api): 2 errors, 1 warning: fix the errors before deploying\n"
        );
    }

    #[test]
    fn warnings_alone_pass_the_report() {
        let mut out = Vec::new();
        assert!(report(&[finding(Severity::Warning)], "edge", &mut out).unwrap_or_default());
        assert!(
            String::from_utf8_lossy(&out)
                .ends_with("check-config (edge): 0 errors, 1 warning: ok\n")
        );
    }

    #[test]
    fn a_start_is_refused_only_on_a_fatal_finding() {
        let weak = Settings {
            runtime_api: Some(RuntimeApiSettings {
                admin_password: Some("short".to_owned()),
                ..RuntimeApiSettings::default()
            }),
            ..Settings::default()
        };
        assert!(check(&weak).iter().any(Finding::is_error));
        assert!(refuse_on_fatal(&weak).is_ok());

        let unusable = Settings {
            runtime_api: Some(RuntimeApiSettings {
                sandbox_driver: SandboxDriverKind::Kubernetes,
                ..RuntimeApiSettings::default()
            }),
            ..Settings::default()
        };
        let err = refuse_on_fatal(&unusable)
            .err()
            .map(|err| err.to_string())
            .unwrap_or_default();
        assert!(err.contains("STORAGE_CLASS: not set"), "{err}");
    }
}
