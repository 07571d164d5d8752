//! `sandgate support-bundle` against a running `sandgate serve` (embedded store and Redis)
//! with a secret planted in every setting, key and record: the archive has each section
//! someone helping needs, and none of the secrets, in any file (issue 44).

use std::collections::BTreeMap;
use std::io::Read;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::scripted_upstream::{Reply, ScriptedUpstream};
use crate::common::{RedisServer, SandgateProcess, run_sandgate};

const ADMIN_PASSWORD: &str = "planted-admin-password-4b1d";
const JWT_SECRET: &str = "planted-jwt-secret-0123456789abcdef0123456789";
const DEFAULT_API_KEY: &str = "planted-default-api-key-77aa";
const WEBHOOK_KEYS: [&str; 2] = ["planted-webhook-key-one-91", "planted-webhook-key-two-92"];
const SANDBOX_KEY_SECRET: &str = "planted-sandbox-key-secret-0123456789abcdef";
const MASTER_KEY: &str = "planted-proxy-master-key-5e";
const UPSTREAM_KEY: &str = "planted-upstream-key-literal-3c";
/// Reached through `os.environ/`, as the chart gives providers' keys.
const ENV_UPSTREAM_KEY: &str = "planted-upstream-key-from-env-8d";
const ADDED_MODEL_KEY: &str = "planted-added-model-key-2f";
const WARM_ENV_KEY: &str = "planted-warm-config-env-key-6a";
const START_ENV_KEY: &str = "planted-start-env-secret-1e";
const REDIS_PASSWORD: &str = "planted-redis-password-c4";

const SECTIONS: [&str; 10] = [
    "version.json",
    "settings.json",
    "check-config.json",
    "store.json",
    "pools.json",
    "sandboxes.json",
    "gateway.json",
    "upstream-errors.json",
    "metrics.txt",
    "logs.txt",
];

/// The files of a `tar.gz`, by name under its root directory.
fn unpack(archive: &[u8]) -> BTreeMap<String, String> {
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(archive));
    let mut files = BTreeMap::new();
    for entry in tar.entries().expect("a tar") {
        let mut entry = entry.expect("an entry");
        let path = entry.path().expect("a path").display().to_string();
        let name = path
            .strip_prefix("sandgate-support-bundle/")
            .unwrap_or_else(|| panic!("{path} is outside the bundle's directory"))
            .to_owned();
        let mut text = String::new();
        entry.read_to_string(&mut text).expect("UTF-8 text");
        files.insert(name, text);
    }
    files
}

fn json_of(files: &BTreeMap<String, String>, name: &str) -> Value {
    serde_json::from_str(&files[name]).unwrap_or_else(|err| panic!("{name}: {err}"))
}

async fn the_bundle_has_every_section_and_no_secret(redis: Option<RedisServer>) {
    let upstream = ScriptedUpstream::start(vec![Reply::status(400, "bad request")]).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let gateway = dir.path().join("gateway.yaml");
    std::fs::write(
        &gateway,
        format!(
            "model_list:\n  - model_name: claude\n    gateway_params: {{model: gateway_proxy/claude-up, api_base: \"{base}\", api_key: {UPSTREAM_KEY}}}\n  - model_name: envkey\n    gateway_params: {{model: gateway_proxy/env-up, api_base: \"{base}\", api_key: os.environ/PLANTED_PROVIDER_KEY}}\n",
            base = upstream.base()
        ),
    )
    .expect("gateway config");
    let warm = dir.path().join("warm-runtimes.json");
    std::fs::write(
        &warm,
        json!({"count": 1, "configs": [{
            "name": "v1_current", "image": "ghcr.io/acme/agent:1.0", "working_dir": "/workspace",
            // A key passed on the command line, which the bundle shows: the redaction's
            // net (every credential-named environment variable's value) must catch it.
            "command": ["/usr/local/bin/agent-server", "--llm-key", ENV_UPSTREAM_KEY],
            "environment": {"LLM_API_KEY": WARM_ENV_KEY, "OH_WEBHOOKS_0_BASE_URL": "http://edge"},
        }]})
        .to_string(),
    )
    .expect("warm runtimes");
    let webhook_keys = WEBHOOK_KEYS.join(",");
    let data_dir = dir.path().join("data").display().to_string();
    let redis_url = redis.as_ref().map(RedisServer::url);
    let store = match &redis_url {
        Some(url) => ("REDIS_URL", url.as_str()),
        None => ("SANDGATE_DATA_DIR", data_dir.as_str()),
    };
    let envs = [
        ("ADMIN_PASSWORD", ADMIN_PASSWORD),
        ("JWT_SECRET", JWT_SECRET),
        ("DEFAULT_API_KEY", DEFAULT_API_KEY),
        ("SANDGATE_WEBHOOK_API_KEYS", webhook_keys.as_str()),
        ("SANDBOX_KEY_SECRET", SANDBOX_KEY_SECRET),
        ("PROXY_MASTER_KEY", MASTER_KEY),
        ("PLANTED_PROVIDER_KEY", ENV_UPSTREAM_KEY),
        ("PBKDF2_ITERATIONS", "1000"),
        // The planted model's upstream is on loopback, where added models go only so.
        ("GATEWAY_ALLOWED_UPSTREAM_HOSTS", "127.0.0.1"),
        ("GATEWAY_CONFIG", &gateway.display().to_string()),
        ("WARM_RUNTIMES_FILE", &warm.display().to_string()),
        ("RECONCILE_INTERVAL", "0.2"),
        store,
    ]
    .map(|(name, value)| (name, value.to_owned()));
    let env_refs: Vec<(&str, &str)> = envs.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let server = SandgateProcess::spawn(
        &[
            "serve".to_owned(),
            "--listen".to_owned(),
            "127.0.0.1:0".to_owned(),
        ],
        &env_refs,
    )
    .await;
    let client = reqwest::Client::new();

    // A model added through the API, its key planted too.
    let added = client
        .post(server.url("/model/new"))
        .bearer_auth(MASTER_KEY)
        .json(&json!({"model_name": "added", "gateway_params": {
            "model": "gateway_proxy/added-up",
            "api_base": "http://127.0.0.1:9",
            "api_key": ADDED_MODEL_KEY,
        }}))
        .send()
        .await
        .expect("add a model");
    assert_eq!(
        added.status(),
        200,
        "{}",
        added.text().await.unwrap_or_default()
    );
    // A call the upstream refuses: an upstream error in the spend log.
    let refused = client
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(MASTER_KEY)
        .json(&json!({"model": "claude", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .expect("chat");
    assert_eq!(refused.status(), 400);
    // A cold start, with a secret in its environment; its session key is planted too.
    let started: Value = client
        .post(server.url("/start"))
        .header("x-api-key", DEFAULT_API_KEY)
        .json(&json!({
            "image": "ghcr.io/acme/agent:1.0", "command": ["/bin/agent"], "working_dir": "/w",
            "environment": {"OPENAI_API_KEY": START_ENV_KEY}, "session_id": "conv-bundle",
        }))
        .send()
        .await
        .expect("start")
        .json()
        .await
        .expect("JSON");
    let runtime_id = started["runtime_id"]
        .as_str()
        .expect("runtime_id")
        .to_owned();
    let session_key = started["session_api_key"].as_str().expect("key").to_owned();
    // The spend log entry is written once the answer has ended: wait for it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let logs: Value = client
            .get(server.url("/spend/logs"))
            .bearer_auth(MASTER_KEY)
            .send()
            .await
            .expect("spend logs")
            .json()
            .await
            .expect("JSON");
        if logs.as_array().is_some_and(|logs| !logs.is_empty()) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no spend log entry");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Without the admin token, nothing.
    let anonymous = client
        .get(server.url("/api/admin/support-bundle"))
        .send()
        .await
        .expect("download");
    assert_eq!(anonymous.status(), 401);

    let output = dir.path().join("bundle.tar.gz");
    let run = run_sandgate(
        &[
            "support-bundle",
            "--url",
            &server.url(""),
            "--output",
            &output.display().to_string(),
        ],
        &[("ADMIN_PASSWORD", ADMIN_PASSWORD)],
    )
    .await;
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let archive = std::fs::read(&output).expect("the archive");
    assert!(
        archive.len() < 8 * 1024 * 1024,
        "bounded: {}",
        archive.len()
    );
    let files = unpack(&archive);
    for section in SECTIONS {
        assert!(
            files.contains_key(section),
            "{section} missing: {:?}",
            files.keys()
        );
    }

    let version = json_of(&files, "version.json");
    assert_eq!(version["sandgate"], env!("CARGO_PKG_VERSION"));
    assert_eq!(version["service"], "serve");
    let settings = json_of(&files, "settings.json");
    // Whether each secret is set, never its value.
    assert_eq!(settings["runtime-api"]["ADMIN_PASSWORD"], true);
    assert_eq!(settings["runtime-api"]["SANDGATE_WEBHOOK_API_KEYS"], 2);
    assert_eq!(settings["model-gw"]["PROXY_MASTER_KEY"], true);
    assert!(json_of(&files, "check-config.json")["findings"].is_array());
    let store = json_of(&files, "store.json");
    assert_eq!(store["healthy"], true, "{store}");
    let topology = if redis.is_some() { "redis" } else { "embedded" };
    assert!(
        store["topology"]
            .as_str()
            .is_some_and(|t| t.starts_with(topology)),
        "{store}"
    );
    let pools = json_of(&files, "pools.json");
    assert_eq!(pools["pools"][0]["name"], "v1_current", "{pools}");
    assert_eq!(
        pools["pools"][0]["config"]["command"],
        json!(["/usr/local/bin/agent-server", "--llm-key", "[redacted]"]),
        "{pools}"
    );
    assert_eq!(pools["pools"][0]["count"], 1, "{pools}");
    let sandboxes = json_of(&files, "sandboxes.json");
    let cold = sandboxes["sandboxes"]
        .as_array()
        .expect("sandboxes")
        .iter()
        .find(|sandbox| sandbox["runtime_id"] == runtime_id.as_str())
        .unwrap_or_else(|| panic!("the started sandbox is listed: {sandboxes}"));
    assert_eq!(cold["start"], "cold");
    assert_eq!(cold["environment_names"], json!(["OPENAI_API_KEY"]));
    let gateway = json_of(&files, "gateway.json");
    let names: Vec<&str> = gateway["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|entry| entry["model_name"].as_str())
        .collect();
    assert_eq!(names, ["claude", "envkey", "added"], "{gateway}");
    let errors = json_of(&files, "upstream-errors.json");
    assert_eq!(errors["errors"][0]["status"], 400, "{errors}");
    assert_eq!(errors["errors"][0]["model"], "claude", "{errors}");
    assert!(
        files["metrics.txt"].contains("sandgate_"),
        "a metrics snapshot"
    );
    // The planted keys are short: the start logged a warning naming each setting.
    assert!(
        files["logs.txt"].contains("WARN") && files["logs.txt"].contains("setting=ADMIN_PASSWORD"),
        "{}",
        files["logs.txt"]
    );

    let mut planted = vec![
        ADMIN_PASSWORD,
        JWT_SECRET,
        DEFAULT_API_KEY,
        SANDBOX_KEY_SECRET,
        MASTER_KEY,
        UPSTREAM_KEY,
        ENV_UPSTREAM_KEY,
        ADDED_MODEL_KEY,
        WARM_ENV_KEY,
        START_ENV_KEY,
        session_key.as_str(),
    ];
    planted.extend(WEBHOOK_KEYS);
    if redis.is_some() {
        planted.push(REDIS_PASSWORD);
    }
    for (name, text) in &files {
        for secret in &planted {
            assert!(!text.contains(secret), "{secret} leaks in {name}:\n{text}");
        }
    }

    // As `kubectl support-bundle` runs it in runtime-api's pod: a token signed with the
    // pod's JWT_SECRET (no login there), the files as JSON text on stdout.
    let run = run_sandgate(
        &[
            "support-bundle",
            "--url",
            &server.url(""),
            "--sign-with-jwt-secret",
            "--json",
            "--output",
            "-",
        ],
        &[("JWT_SECRET", JWT_SECRET)],
    )
    .await;
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let as_json: BTreeMap<String, String> =
        serde_json::from_slice(&run.stdout).expect("the files as one JSON object");
    for section in SECTIONS {
        let name = format!("sandgate-support-bundle/{section}");
        let text = as_json
            .get(&name)
            .unwrap_or_else(|| panic!("{name} missing"));
        for secret in &planted {
            assert!(!text.contains(secret), "{secret} leaks in {name}:\n{text}");
        }
    }
}

#[tokio::test]
async fn a_bundle_of_serve_on_the_embedded_store_has_every_section_and_no_secret() {
    the_bundle_has_every_section_and_no_secret(None).await;
}

#[tokio::test]
async fn a_bundle_of_serve_on_redis_has_every_section_and_no_secret() {
    let redis = RedisServer::start_with_password(REDIS_PASSWORD).await;
    the_bundle_has_every_section_and_no_secret(Some(redis)).await;
}
