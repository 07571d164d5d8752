//! The chart's support-bundle spec run as `kubectl support-bundle` runs it: its `exec`
//! collector's command, rendered by the real `helm` 4 (`.tools/helm/helm`, installed by
//! `scripts/check-k8s`), run with the environment of runtime-api's container against a
//! real `sandgate runtime-api` whose metrics listener serves the bundle (issue 44).

use serde_json::Value;

use crate::common::{SandgateProcess, repository, run_sandgate, tool};

const JWT_SECRET: &str = "planted-jwt-secret-of-the-runtime-api-pod-0123";
const ADMIN_PASSWORD: &str = "planted-admin-password-of-the-runtime-api-pod";
const DEFAULT_API_KEY: &str = "planted-default-api-key-of-the-runtime-api-pod";

/// The SupportBundle of Secret sandgate-support-bundle, `helm template` of the prod
/// example values.
fn support_bundle_spec() -> Value {
    let output = std::process::Command::new(tool("helm/helm", "scripts/check-k8s"))
        .args(["template", "sandgate"])
        .arg(repository("k8s/chart"))
        .args([
            "--namespace",
            "sandgate",
            "--show-only",
            "templates/troubleshoot-support-bundle.yaml",
            "--values",
        ])
        .arg(repository("k8s/values/prod.yaml"))
        .output()
        .expect("run helm");
    assert!(
        output.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let secret: Value = serde_norway::from_slice(&output.stdout).expect("a YAML Secret");
    assert_eq!(
        secret["metadata"]["labels"]["troubleshoot.sh/kind"],
        "support-bundle"
    );
    let spec = secret["stringData"]["support-bundle-spec"]
        .as_str()
        .expect("support-bundle-spec");
    serde_norway::from_str(spec).expect("a YAML SupportBundle")
}

#[tokio::test]
async fn the_support_bundle_specs_exec_collector_gets_sandgates_diagnostics_from_runtime_api() {
    let spec = support_bundle_spec();
    let exec = spec["spec"]["collectors"]
        .as_array()
        .expect("collectors")
        .iter()
        .find_map(|collector| collector.get("exec"))
        .expect("an exec collector");
    assert_eq!(exec["containerName"], "runtime-api");
    assert_eq!(exec["command"], serde_json::json!(["/sandgate"]));
    let args: Vec<String> = exec["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|arg| arg.as_str().expect("a string").to_owned())
        .collect();

    let data = tempfile::tempdir().expect("temp dir");
    let data_dir = data.path().display().to_string();
    let server = SandgateProcess::spawn(
        &[
            "runtime-api",
            "--grpc-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ]
        .map(str::to_owned),
        &[
            ("JWT_SECRET", JWT_SECRET),
            ("ADMIN_PASSWORD", ADMIN_PASSWORD),
            ("DEFAULT_API_KEY", DEFAULT_API_KEY),
            ("SANDGATE_DATA_DIR", &data_dir),
        ],
    )
    .await;
    let metrics = server
        .logged_address("metrics at http://")
        .expect("the metrics listener's address");
    // Without a token the bundle is refused, on this port as on the edge's.
    let refused = reqwest::get(format!("http://{metrics}/api/admin/support-bundle"))
        .await
        .expect("download");
    assert_eq!(refused.status(), 401);

    // The pod's port, 9090, is this test's metrics port; the rest as rendered.
    let args: Vec<String> = args
        .iter()
        .map(|arg| arg.replace("127.0.0.1:9090", &metrics))
        .collect();
    assert!(args.iter().any(|arg| arg.contains(&metrics)), "{args:?}");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // The container's environment: what the exec'd command sees.
    let run = run_sandgate(
        &args,
        &[
            ("JWT_SECRET", JWT_SECRET),
            ("ADMIN_PASSWORD", ADMIN_PASSWORD),
        ],
    )
    .await;
    assert!(
        run.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&run.stderr),
        server.log()
    );
    let files: serde_json::Map<String, Value> =
        serde_json::from_slice(&run.stdout).expect("the bundle's files as JSON text");
    let version: Value = serde_json::from_str(
        files["sandgate-support-bundle/version.json"]
            .as_str()
            .expect("text"),
    )
    .expect("JSON");
    assert_eq!(version["service"], "runtime-api");
    for name in [
        "settings.json",
        "check-config.json",
        "store.json",
        "pools.json",
        "sandboxes.json",
        "metrics.txt",
        "logs.txt",
    ] {
        assert!(
            files.contains_key(&format!("sandgate-support-bundle/{name}")),
            "{name} missing"
        );
    }
    let text = String::from_utf8_lossy(&run.stdout);
    for secret in [JWT_SECRET, ADMIN_PASSWORD, DEFAULT_API_KEY] {
        assert!(!text.contains(secret), "{secret} leaks:\n{text}");
    }
}
