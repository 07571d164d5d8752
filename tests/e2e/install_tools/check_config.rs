//! `check-config` on the chart's prod example values and on wrong ones: its exit status,
//! and a report that names every wrong setting, never a secret.

use super::{STRONG, stdout};
use crate::common::{repository, run_sandgate};

/// The prod example values file of the chart (k8s/values/prod.yaml), read as the chart
/// reads it: runtime-api's and model-gw's settings and the files it renders for them.
struct ProdValues {
    values: serde_norway::Value,
    /// warm-runtimes.json and gateway.yaml, as the chart's ConfigMaps hold them.
    files: tempfile::TempDir,
}

impl ProdValues {
    fn load() -> Self {
        let text = std::fs::read_to_string(repository("k8s/values/prod.yaml")).expect("prod.yaml");
        let values: serde_norway::Value = serde_norway::from_str(&text).expect("prod.yaml is YAML");
        let files = tempfile::tempdir().expect("temp dir");
        let warm = &values["runtime-api"]["warmRuntimes"];
        let warm = serde_json::json!({
            "count": serde_json::to_value(&warm["count"]).expect("count"),
            "configs": serde_json::to_value(&warm["configs"]).expect("configs"),
        });
        std::fs::write(files.path().join("warm-runtimes.json"), warm.to_string()).expect("write");
        let gateway =
            serde_norway::to_string(&values["gateway-helm"]["proxy_config"]).expect("yaml");
        std::fs::write(files.path().join("gateway.yaml"), gateway).expect("write");
        Self { values, files }
    }

    fn file(&self, name: &str) -> String {
        self.files.path().join(name).display().to_string()
    }

    fn text(value: &serde_norway::Value) -> String {
        match value {
            serde_norway::Value::String(text) => text.clone(),
            other => serde_norway::to_string(other)
                .expect("yaml")
                .trim()
                .to_owned(),
        }
    }

    /// runtime-api's environment in the prod example (the chart's sandgate.env.runtimeApi),
    /// with strong secrets and the nodes' capacity, warm runtimes from `warm_runtimes`.
    fn runtime_api_env(&self, warm_runtimes: &str) -> Vec<(&'static str, String)> {
        let values = &self.values;
        let sandgate = &values["sandgate"];
        let mut env: Vec<(&'static str, String)> = [
            (
                "REDIS_URL",
                Self::text(&sandgate["redis"]["url"]).replace("$(REDIS_PASSWORD)", "secret"),
            ),
            ("ADMIN_PASSWORD", STRONG.to_owned()),
            ("JWT_SECRET", STRONG.to_owned()),
            ("DEFAULT_API_KEY", STRONG.to_owned()),
            ("SANDGATE_WEBHOOK_API_KEYS", STRONG.to_owned()),
            ("WARM_RUNTIMES_FILE", warm_runtimes.to_owned()),
            ("SANDBOX_DRIVER", "kubernetes".to_owned()),
            (
                "SANDBOX_NAMESPACE",
                Self::text(&values["runtime-api"]["sandbox_namespace"]),
            ),
            (
                "EPHEMERAL_STORAGE_SIZE",
                Self::text(&sandgate["ephemeralStorageSize"]),
            ),
            (
                "RUNTIME_URL_PATTERN",
                Self::text(&values["env"]["RUNTIME_URL_PATTERN"]),
            ),
            (
                "SANDBOX_INGRESS_CLASS",
                Self::text(&values["ingress"]["class"]),
            ),
            ("SANDBOX_TLS_SECRET", "sandgate-wildcard-tls".to_owned()),
            (
                "RECONCILE_INTERVAL",
                Self::text(&sandgate["reconcileInterval"]),
            ),
            (
                "RUNTIME_DEAD_SECONDS",
                Self::text(&sandgate["runtimeDeadSeconds"]),
            ),
            ("NODE_EPHEMERAL_STORAGE", "100Gi".to_owned()),
            ("SANDBOX_NODES", "2".to_owned()),
        ]
        .into_iter()
        .collect();
        // runtime-api.env: the spec's keys, passed as they are.
        for name in [
            "RUNTIME_BASE_URL",
            "RUNTIME_URL_SEPARATOR",
            "RUNTIME_DISABLE_SSL",
            "STORAGE_CLASS",
            "WARM_RUNTIME_CONFIG_OVERLAY",
        ] {
            env.push((name, Self::text(&values["runtime-api"]["env"][name])));
        }
        env
    }
}

/// `env` with some variables replaced (or added), and some removed.
fn changed<'a>(
    env: &'a [(&'static str, String)],
    set: &'a [(&'static str, &'a str)],
    unset: &[&str],
) -> Vec<(&'a str, &'a str)> {
    let mut out: Vec<(&str, &str)> = env
        .iter()
        .filter(|(name, _)| !unset.contains(name) && !set.iter().any(|(other, _)| other == name))
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    out.extend(set.iter().copied());
    out
}

fn as_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'a str, &'a str)> {
    changed(env, &[], &[])
}

#[tokio::test]
async fn check_config_passes_the_charts_prod_example_values() {
    let prod = ProdValues::load();
    let runtime_env = prod.runtime_api_env(&prod.file("warm-runtimes.json"));
    let output = run_sandgate(
        &["check-config", "--service", "runtime-api"],
        &as_refs(&runtime_env),
    )
    .await;
    assert_eq!(
        stdout(&output),
        "check-config (runtime-api): 0 errors, 0 warnings: ok\n"
    );
    assert_eq!(output.status.code(), Some(0));

    let gateway = prod.file("gateway.yaml");
    let output = run_sandgate(
        &["check-config", "--service", "model-gw"],
        &[
            ("GATEWAY_CONFIG", &gateway),
            ("PROXY_MASTER_KEY", STRONG),
            ("GATEWAY_API_KEY", "sk-from-the-gateway-owner"),
        ],
    )
    .await;
    assert_eq!(
        stdout(&output),
        "check-config (model-gw): 0 errors, 0 warnings: ok\n"
    );
    assert_eq!(output.status.code(), Some(0));

    let output = run_sandgate(
        &["check-config", "--service", "edge"],
        &[
            ("SANDGATE_RUNTIME_API_URL", "http://runtime-api:50051"),
            ("SANDGATE_MODEL_GW_URL", "http://model-gw:50052"),
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
}

#[tokio::test]
async fn check_config_names_every_wrong_setting_never_a_secret_and_exits_1() {
    let broken = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(broken.path(), r#"{"count": -1, "configs": []}"#).expect("write");
    let runtime_env = ProdValues::load().runtime_api_env(&broken.path().display().to_string());
    let env = changed(
        &runtime_env,
        &[
            ("SANDBOX_NAMESPACE", "Sandboxes"),
            ("EPHEMERAL_STORAGE_SIZE", "25GB"),
            ("RUNTIME_DISABLE_SSL", "true"),
            ("ADMIN_PASSWORD", "hunter2"),
            ("JWT_SECRET", "short-jwt"),
            (
                "SANDGATE_WEBHOOK_API_KEYS",
                "webhook-key-one,webhook-key-two",
            ),
        ],
        &["STORAGE_CLASS"],
    );
    let output = run_sandgate(&["check-config", "--service", "runtime-api"], &env).await;
    let report = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    for line in [
        "error: STORAGE_CLASS: not set",
        "error: SANDBOX_NAMESPACE: \"Sandboxes\" is not a DNS-1123 label",
        "error: EPHEMERAL_STORAGE_SIZE: \"25GB\" is not a Kubernetes quantity",
        "error: RUNTIME_DISABLE_SSL: is true",
        "error: WARM_RUNTIMES_FILE: ",
        "error: JWT_SECRET: is 9 bytes",
        "error: ADMIN_PASSWORD: is 7 bytes",
        "error: SANDGATE_WEBHOOK_API_KEYS: key 1 of 2: is 15 bytes",
        "error: SANDGATE_WEBHOOK_API_KEYS: key 2 of 2: is 15 bytes",
    ] {
        assert!(
            report.lines().any(|reported| reported.starts_with(line)),
            "no line {line:?} in\n{report}"
        );
    }
    assert!(
        report
            .lines()
            .last()
            .is_some_and(|summary| summary.starts_with("check-config (runtime-api): 9 errors")),
        "{report}"
    );
    for secret in ["hunter2", "short-jwt", "webhook-key-one", "webhook-key-two"] {
        assert!(!report.contains(secret), "{secret} printed:\n{report}");
    }
}

/// Names the Kubernetes API server would refuse, caught before a deploy rather than as
/// every sandbox's 422.
#[tokio::test]
async fn check_config_refuses_names_the_api_server_would() {
    let prod = ProdValues::load();
    let runtime_env = prod.runtime_api_env(&prod.file("warm-runtimes.json"));
    let env = changed(
        &runtime_env,
        &[
            ("STORAGE_CLASS", "Standard_RWO"),
            ("SANDBOX_INGRESS_CLASS", "Nginx"),
            ("SANDBOX_TLS_SECRET", "wildcard_tls"),
            ("RUNTIME_URL_SEPARATOR", "_"),
            (
                "RUNTIME_URL_PATTERN",
                "https://{runtime_id}_runtime.sandgate.example.com",
            ),
            ("SANDBOX_PORT", "0"),
        ],
        &[],
    );
    let output = run_sandgate(&["check-config", "--service", "runtime-api"], &env).await;
    let report = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    for line in [
        "error: STORAGE_CLASS: \"Standard_RWO\" is not a name Kubernetes accepts",
        "error: SANDBOX_INGRESS_CLASS: \"Nginx\" is not a name Kubernetes accepts",
        "error: SANDBOX_TLS_SECRET: \"wildcard_tls\" is not a name Kubernetes accepts",
        "error: RUNTIME_URL_SEPARATOR: \"_\" makes sandbox hosts like",
        "error: SANDBOX_PORT: is 0",
    ] {
        assert!(
            report.lines().any(|reported| reported.starts_with(line)),
            "no line {line:?} in\n{report}"
        );
    }
    let base = changed(
        &runtime_env,
        &[
            ("RUNTIME_BASE_URL", "runtime.sandgate.example.com:8443"),
            (
                "RUNTIME_URL_PATTERN",
                "https://{runtime_id}-runtime.sandgate.example.com:8443",
            ),
        ],
        &[],
    );
    let output = run_sandgate(&["check-config", "--service", "runtime-api"], &base).await;
    let report = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    assert!(
        report.lines().any(|line| line.starts_with(
            "error: RUNTIME_BASE_URL: \"runtime.sandgate.example.com:8443\" is a host suffix"
        )),
        "{report}"
    );
}

#[tokio::test]
async fn check_config_reports_the_gateway_entries_by_name() {
    let config = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(
        config.path(),
        r#"model_list:
  - model_name: claude
    gateway_params: {model: gateway_proxy/claude-sonnet, api_base: "https://gw.example/v1", api_key: os.environ/CLAUDE_KEY}
  - model_name: gpt
    gateway_params: {model: openai/azure/gpt-4o, api_base: "https://other.example", api_key: os.environ/GATEWAY_API_KEY}
  - model_name: "*"
    gateway_params: {model: "openai/*", api_base: "https://other.example/v1", api_key: os.environ/GATEWAY_API_KEY}
"#,
    )
    .expect("write");
    let path = config.path().display().to_string();
    let output = run_sandgate(
        &["check-config", "--service", "model-gw"],
        &[
            ("GATEWAY_CONFIG", &path),
            ("PROXY_MASTER_KEY", STRONG),
            ("GATEWAY_API_KEY", "sk-present"),
        ],
    )
    .await;
    let report = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    let lines: Vec<&str> = report.lines().collect();
    assert!(
        lines[0].starts_with(
            "error: GATEWAY_CONFIG: model_list[0] (claude): api_key is os.environ/CLAUDE_KEY, but CLAUDE_KEY is not set"
        ),
        "{report}"
    );
    assert!(
        lines[1].starts_with("error: GATEWAY_CONFIG: model_list[0] (claude): api_base \"https://gw.example/v1\" ends in /v1"),
        "{report}"
    );
    assert!(
        lines[2].starts_with("error: GATEWAY_CONFIG: model_list[1] (gpt): api_base \"https://other.example\" does not end in /v1"),
        "{report}"
    );
    assert!(
        lines[3].starts_with(
            "warning: GATEWAY_CONFIG: model_list[2] (*): a wildcard entry is not recommended"
        ),
        "{report}"
    );
    assert_eq!(
        lines[4],
        "check-config (model-gw): 3 errors, 1 warning: fix the errors before deploying"
    );
    assert!(!report.contains("sk-present"));
}

#[tokio::test]
async fn check_config_refuses_warm_pools_larger_than_the_nodes() {
    let warm = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(
        warm.path(),
        r#"{"count": 1, "configs": [
            {"name": "v1_current", "image": "agent:1", "working_dir": "/w", "command": ["s"], "environment": {}, "count": 2},
            {"name": "custom", "image": "agent:custom", "working_dir": "/w", "command": ["s"], "environment": {}}
        ]}"#,
    )
    .expect("write");
    let runtime_env = ProdValues::load().runtime_api_env(&warm.path().display().to_string());
    let env = changed(
        &runtime_env,
        &[("NODE_EPHEMERAL_STORAGE", "40Gi"), ("SANDBOX_NODES", "1")],
        &[],
    );
    let output = run_sandgate(&["check-config", "--service", "runtime-api"], &env).await;
    let report = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    assert!(
        report.starts_with(
            "error: NODE_EPHEMERAL_STORAGE: the warm pools need 3 pod(s) (custom 1, v1_current 2) × 25Gi = 75Gi, \
             but 1 node(s) × 40Gi = 40Gi is allocatable"
        ),
        "{report}"
    );

    let two_nodes = changed(&runtime_env, &[("NODE_EPHEMERAL_STORAGE", "40Gi")], &[]);
    let output = run_sandgate(&["check-config", "--service", "runtime-api"], &two_nodes).await;
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
}

/// What cannot run is refused before a deploy, each naming the setting to change: a warm
/// configuration the sandbox namespace's pod security refuses, no scratch disk, and a
/// base domain too long for the sandbox hosts (not blamed on the separator).
#[tokio::test]
async fn check_config_refuses_what_cannot_run_naming_the_setting() {
    let warm = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(
        warm.path(),
        r#"{"count": 1, "configs": [
            {"name": "as_root", "image": "agent:1", "working_dir": "/w", "command": ["s"], "environment": {}, "run_as_user": 0},
            {"name": "s3", "image": "agent:s3", "working_dir": "/w", "command": ["s"], "environment": {}, "fuse_s3_mount": true},
            {"name": "fine", "image": "agent:2", "working_dir": "/w", "command": ["s"], "environment": {}, "run_as_user": 10001}
        ]}"#,
    )
    .expect("write");
    let runtime_env = ProdValues::load().runtime_api_env(&warm.path().display().to_string());
    let long_base = format!("{}.example.com", vec!["a".repeat(60); 4].join("."));
    let pattern = format!("https://{{runtime_id}}-{long_base}");
    let set = [
        ("EPHEMERAL_STORAGE_SIZE", "0"),
        ("RUNTIME_BASE_URL", long_base.as_str()),
        ("RUNTIME_URL_PATTERN", pattern.as_str()),
    ];
    let env = changed(&runtime_env, &set, &[]);
    let output = run_sandgate(&["check-config", "--service", "runtime-api"], &env).await;
    let report = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    for (start, names) in [
        (
            "error: WARM_RUNTIMES_FILE: configuration \"as_root\": run_as_user 0:",
            "SANDBOX_POD_SECURITY=baseline",
        ),
        (
            "error: WARM_RUNTIMES_FILE: configuration \"s3\": fuse_s3_mount true:",
            "SANDBOX_POD_SECURITY=privileged",
        ),
        (
            "error: EPHEMERAL_STORAGE_SIZE: \"0\" is no space at all",
            "25Gi",
        ),
        ("error: RUNTIME_BASE_URL: is 255 characters", "253"),
    ] {
        assert!(
            report
                .lines()
                .any(|line| line.starts_with(start) && line.contains(names)),
            "no line {start:?} naming {names:?} in\n{report}"
        );
    }
    assert!(!report.contains("\"fine\""), "{report}");
    assert!(!report.contains("RUNTIME_URL_SEPARATOR"), "{report}");

    // The level that allows root passes that configuration.
    let baseline = changed(&runtime_env, &[("SANDBOX_POD_SECURITY", "baseline")], &[]);
    let output = run_sandgate(&["check-config", "--service", "runtime-api"], &baseline).await;
    let report = stdout(&output);
    assert!(!report.contains("\"as_root\""), "{report}");
    assert!(report.contains("\"s3\""), "{report}");
}
