//! schemathesis (from PyPI, `scripts/install-real-clients`), unchanged, over the
//! `/openapi.json` of a running `sandgate serve`: every operation, every check, once with
//! valid credentials for every security scheme and once with wrong ones. The document
//! must tell the truth about every route, and no input may get a 5xx.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::{
    ADMIN_PASSWORD, Backend, REAL_CLIENTS, RUNTIME_KEY, Sandgate, SandgateProcess, WEBHOOK_KEY,
    admin_args, driver_output, fixtures, repository, serve_args, tool,
};
use crate::model_gateway::{FakeUpstream, MASTER_KEY};

/// How long each run may fuzz: bounded, so that CI stays within its budget. The four runs
/// share the machine (they run side by side), hence more than the 60 s each had alone.
const RUN_SECONDS: u64 = 90;

/// `sandgate serve` on the embedded store with admin login and a model gateway in front of
/// `upstream`; with what must outlive it.
async fn sandgate(upstream: &FakeUpstream) -> (SandgateProcess, Backend, tempfile::NamedTempFile) {
    let config = crate::common::file_with(&format!(
        "model_list:\n  - model_name: fuzzed\n    gateway_params: {{model: gateway_proxy/fuzzed, api_base: \"{}\"}}\n",
        upstream.base()
    ));
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
/// their bodies: it encodes the two kinds of the models' rules no JSON Schema can state
/// (pydantic's lax scalars, rules across fields), which the document says in prose; and on
/// the gateway's 502 and 504 for an upstream a fuzzed `POST /model/new` made up.
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

/// What `/model/new` refuses is what its document says it refuses: the document's
/// `api_base` pattern is the gateway's check (which writes `[\s\S]` as `(?s:.)`).
#[test]
fn the_api_base_pattern_is_the_documents() {
    let document = sandgate_edge::openapi_document(&serde_json::Map::new());
    let documented = document["components"]["schemas"]["NewModel"]["properties"]["gateway_params"]
        ["properties"]["api_base"]["pattern"]
        .as_str()
        .expect("a pattern");
    assert_eq!(
        documented.replace("[\\s\\S]", "(?s:.)"),
        sandgate_model_gw::config::API_BASE_PATTERN
    );
}

/// Sets `pointer` in `body` to `value`, adding the last key to its object if need be.
fn set(body: &mut serde_json::Value, pointer: &str, value: serde_json::Value) {
    let (parent, key) = pointer.rsplit_once('/').expect("a pointer");
    body.pointer_mut(parent)
        .and_then(serde_json::Value::as_object_mut)
        .unwrap_or_else(|| panic!("no object at {parent}"))
        .insert(key.to_owned(), value);
}

/// What the models' before-validators coerce, the service accepts and the document says it
/// takes: schemathesis draws negative cases from the document, so a value the document
/// refuses and the service rightly accepts would be a failure of every run that draws it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_takes_what_the_models_coerce() {
    use serde_json::json;

    let backend = Backend::embedded();
    let server = Sandgate::start(&backend).await;
    let document: serde_json::Value = reqwest::get(server.url("/openapi.json"))
        .await
        .expect("document")
        .json()
        .await
        .expect("JSON");
    let skill = "/agent/agent_context/skills/0";
    let cases = [
        (
            "agent_basic_idle",
            "/workspace/working_dir",
            json!({"a": [1]}),
        ),
        ("agent_basic_idle", "/workspace/working_dir", json!(7)),
        (
            "agent_basic_idle",
            "/agent/system_prompt_kwargs",
            json!("x"),
        ),
        ("agent_basic_idle", "/agent/tools/0/params", json!(null)),
        (
            "agent_basic_idle",
            "/agent/security_policy_filename",
            json!(null),
        ),
        ("acp_agent", "/agent/security_policy_filename", json!(null)),
        (
            "agent_context_skills",
            &format!("{skill}/allowed_tools"),
            json!("read  write"),
        ),
        (
            "agent_context_skills",
            &format!("{skill}/allowed_tools"),
            json!([1, {"b": null}]),
        ),
        (
            "agent_context_skills",
            &format!("{skill}/metadata"),
            json!({"n": 1, "l": [true]}),
        ),
        (
            "agent_basic_idle",
            "/agent/critic",
            json!({"kind": "APIBasedCritic", "api_key": 0}),
        ),
        (
            "agent_basic_idle",
            "/agent/critic",
            json!({"kind": "APIBasedCritic", "api_key": {}}),
        ),
        ("acp_agent", "/agent/acp_resume_session_id", json!(false)),
        ("acp_agent", "/agent/acp_resume_session_id", json!([])),
    ];
    let mut bodies = Vec::new();
    for (fixture, pointer, value) in cases {
        let mut body = fixtures::json(&format!("accept/{fixture}"));
        set(&mut body, pointer, value.clone());
        let response = server.deliver(WEBHOOK_KEY, body.to_string()).await;
        let status = response.status();
        let answer = response.text().await.expect("answer");
        assert_eq!(status, 200, "{fixture} with {pointer} = {value}: {answer}");
        bodies.push(json!({"case": format!("{fixture} with {pointer} = {value}"), "body": body}));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (document_path, bodies_path) = (
        dir.path().join("openapi.json"),
        dir.path().join("bodies.json"),
    );
    std::fs::write(&document_path, document.to_string()).expect("document written");
    std::fs::write(&bodies_path, serde_json::Value::from(bodies).to_string()).expect("bodies");
    // The document's own judgement, by the validator schemathesis uses.
    let mut check = tokio::process::Command::new(tool("schemathesis/bin/python", REAL_CLIENTS));
    check
        .env("PYTHONPATH", repository(HOOKS_DIR))
        .arg("-c")
        .arg(
            "import json, sys\n\
             from schemathesis_hooks import validator\n\
             root = json.load(open(sys.argv[1]))\n\
             post = root['paths']['/api/v1/webhooks/conversations']['post']\n\
             schema = post['requestBody']['content']['application/json']['schema']\n\
             refused = [case['case'] for case in json.load(open(sys.argv[2]))\n\
                        if not validator(schema, root).is_valid(case['body'])]\n\
             assert not refused, refused\n",
        )
        .arg(&document_path)
        .arg(&bodies_path);
    driver_output(check, String::new).await;
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
    // The four runs side by side: each is bounded by its time, not its cases.
    let results = futures::future::join_all(runs.iter().enumerate().map(
        |(index, (_, filter, headers))| {
            let report = reports.path().join(format!("{index}.xml"));
            async move { run(base, filter, headers, &report).await }
        },
    ))
    .await;
    let mut with_valid = BTreeSet::new();
    for ((label, _, _), (passed, text, tested)) in runs.iter().zip(results) {
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
