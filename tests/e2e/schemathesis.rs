//! schemathesis (from PyPI, `scripts/install-real-clients`), unchanged, over the
//! `/openapi.json` of a running `sandgate serve`: every operation, every check, once with
//! valid credentials for every security scheme and once with wrong ones. The document
//! must tell the truth about every route, and no input may get a 5xx.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::{
    ADMIN_PASSWORD, Backend, REAL_CLIENTS, RUNTIME_KEY, SandgateProcess, WEBHOOK_KEY, admin_args,
    driver_output, repository, serve_args, tool,
};
use crate::model_gateway::{FakeUpstream, MASTER_KEY};

/// How long each run may fuzz: bounded, so that CI stays within its budget.
const RUN_SECONDS: u64 = 60;

/// `sandgate serve` on the embedded store with admin login and a model gateway in front of
/// `upstream`; with what must outlive it.
async fn sandgate(upstream: &FakeUpstream) -> (SandgateProcess, Backend, tempfile::NamedTempFile) {
    let config = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(
        config.path(),
        format!(
            "model_list:\n  - model_name: fuzzed\n    gateway_params: {{model: gateway_proxy/fuzzed, api_base: \"{}\"}}\n",
            upstream.base()
        ),
    )
    .expect("gateway config");
    let backend = Backend::embedded();
    let mut args = serve_args(&backend);
    args.extend(admin_args());
    args.extend([
        "--gateway-config".to_owned(),
        config.path().display().to_string(),
        "--proxy-master-key".to_owned(),
        MASTER_KEY.to_owned(),
    ]);
    let server = SandgateProcess::spawn(&args, &[("LOCAL_SANDBOX_START_SECONDS", "0.1")]).await;
    (server, backend, config)
}

/// The model gateway's operations: their key is the master key, in the same header as the
/// admin token of the others, so they run apart.
const GATEWAY: &str =
    "^/(v1/)?(models|model/|model_group/|spend/|chat/|responses|messages|embeddings|completions)";

/// The operations that take or return a ConversationInfo: a minute of their own (their
/// bodies are the largest to draw). Every run loads `schemathesis_hooks.py`, which acts on
/// their bodies only: it encodes the two kinds of the models' rules no JSON Schema can
/// state (pydantic's lax scalars, rules across fields), which the document says in prose.
const CONVERSATIONS: &str = "^/api/v1/(webhooks/conversations|conversations(/[{]id[}])?)$";

/// The hooks module, and where Python finds it.
const HOOKS: &str = "schemathesis_hooks";
const HOOKS_DIR: &str = "tests/e2e";

/// Runs schemathesis over the operations `filter` selects, with `headers`; whether it found
/// nothing, its output, and the operations it tested (`GET /path`).
async fn run(
    base: &str,
    filter: &[&str],
    headers: &[String],
    report: &std::path::Path,
) -> (bool, String, BTreeSet<String>) {
    let mut command =
        tokio::process::Command::new(tool("schemathesis/bin/schemathesis", REAL_CLIENTS));
    command
        .env("SCHEMATHESIS_HOOKS", HOOKS)
        .env("PYTHONPATH", repository(HOOKS_DIR))
        .arg("run")
        .arg(format!("{base}/openapi.json"))
        .args(["--checks", "all", "--seed", "20261125", "--workers", "2"])
        // The same cases in the same order on every run: a slower machine runs fewer of
        // them, never others.
        .arg("--generation-deterministic")
        .args(["--max-time", &RUN_SECONDS.to_string()])
        .args(["--request-timeout", "20", "--no-color"])
        .args(filter)
        .args(["--report", "junit", "--report-junit-path"])
        .arg(report);
    for header in headers {
        command.args(["--header", header]);
    }
    // What it keeps between runs (`.schemathesis/`) goes beside the report, not into the
    // repository.
    if let Some(dir) = report.parent() {
        command.current_dir(dir);
    }
    let output = tokio::time::timeout(
        Duration::from_secs(RUN_SECONDS * 3),
        command.kill_on_drop(true).output(),
    )
    .await
    .expect("schemathesis ends")
    .expect("schemathesis runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let junit = std::fs::read_to_string(report).unwrap_or_default();
    let tested = junit
        .split("<testcase name=\"")
        .skip(1)
        .filter_map(|rest| rest.split_once('"').map(|(name, _)| name.to_owned()))
        // The operations, not the stateful phase's entry.
        .filter(|name| {
            name.split_once(' ')
                .is_some_and(|(method, _)| method.bytes().all(|b| b.is_ascii_uppercase()))
        })
        .collect();
    (output.status.success(), text, tested)
}

/// The hooks' own checks: their coercions, and that a body still invalid once coerced
/// stays a negative case (a hook that dropped too much would let a run pass untested).
#[tokio::test]
async fn the_hooks_coerce_scalars_as_pydantic_does() {
    let mut checks = tokio::process::Command::new(tool("schemathesis/bin/python", REAL_CLIENTS));
    checks.arg(repository(HOOKS_DIR).join(format!("{HOOKS}.py")));
    driver_output(checks, String::new).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_failure_with_valid_or_wrong_credentials() {
    let upstream = FakeUpstream::start().await;
    let (server, _backend, _config) = sandgate(&upstream).await;
    let base = server.url("");
    let base = base.trim_end_matches('/');
    let client = reqwest::Client::new();
    let token = server.admin_token(&client, ADMIN_PASSWORD).await;
    let document: serde_json::Value = client
        .get(format!("{base}/openapi.json"))
        .send()
        .await
        .expect("document")
        .json()
        .await
        .expect("JSON");
    let operations: BTreeSet<String> = document["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .flat_map(|(path, item)| {
            let methods = item.as_object().expect("operations").keys();
            methods.map(move |method| format!("{} {path}", method.to_uppercase()))
        })
        // schemathesis does not call the route it reads the document from (catalog.rs
        // reads it).
        .filter(|operation| operation != "GET /openapi.json")
        .collect();
    let reports = tempfile::tempdir().expect("temp dir");
    let runtime_filter = format!("(?:{GATEWAY})|(?:{CONVERSATIONS})");
    let valid_runtime = vec![
        format!("X-Session-API-Key: {WEBHOOK_KEY}"),
        format!("X-API-Key: {RUNTIME_KEY}"),
    ];
    let runs: [(&str, Vec<&str>, Vec<String>); 4] = [
        (
            "valid credentials, runtime API and admin",
            // One filter of a kind is taken: the last.
            vec!["--exclude-path-regex", &runtime_filter],
            valid_runtime
                .iter()
                .cloned()
                .chain([format!("Authorization: Bearer {token}")])
                .collect(),
        ),
        (
            "valid credentials, conversations",
            vec!["--include-path-regex", CONVERSATIONS],
            valid_runtime,
        ),
        (
            "valid credentials, model gateway",
            vec!["--include-path-regex", GATEWAY],
            vec![format!("Authorization: Bearer {MASTER_KEY}")],
        ),
        (
            "wrong credentials",
            vec![],
            vec![
                "X-Session-API-Key: not-a-key".to_owned(),
                "X-API-Key: not-a-key".to_owned(),
                "Authorization: Bearer not.a.token".to_owned(),
            ],
        ),
    ];
    let mut with_valid = BTreeSet::new();
    for (index, (label, filter, headers)) in runs.iter().enumerate() {
        let report = reports.path().join(format!("{index}.xml"));
        let (passed, text, tested) = run(base, filter, headers, &report).await;
        assert!(passed, "{label}:\n{text}");
        if label.starts_with("valid") {
            with_valid.extend(tested);
        } else {
            assert_eq!(tested, operations, "{label}: every operation\n{text}");
        }
    }
    let untested: Vec<&str> = operations
        .difference(&with_valid)
        .map(String::as_str)
        .collect();
    assert!(
        untested.is_empty(),
        "operations not run with valid credentials: {untested:?}"
    );
}
