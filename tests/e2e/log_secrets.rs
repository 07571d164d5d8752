//! No secret in any log line: the real binary at `--log trace` (every crate, every level)
//! through a full flow — webhook deliveries carrying secrets, admin login, a warm
//! configuration save, a sandbox start and its session key, model gateway calls with
//! upstream keys — and then the whole log is searched for every secret it was given.

use serde_json::{Value, json};

use crate::common::{
    Backend, RUNTIME_KEY, SandgateProcess, WEBHOOK_KEY, new_id, serve_args, until_status,
};
use crate::model_gateway::FakeUpstream;

const ADMIN_PASSWORD: &str = "admin-password-secret-1001-long-enough";
const JWT_SECRET: &str = "jwt-secret-1002-at-least-thirty-two-bytes";
const SANDBOX_KEY_SECRET: &str = "sandbox-key-secret-1003-thirty-two-bytes";
const MASTER_KEY: &str = "sk-proxy-master-key-1004";
const GATEWAY_KEY: &str = "sk-gateway-upstream-key-1005";
const ADDED_MODEL_KEY: &str = "sk-added-model-key-1006";
const WARM_ENV_SECRET: &str = "ghp-warm-config-token-1007";
const AWS_ACCESS_KEY: &str = "AKIAAWSACCESSKEY1008";
const AWS_SECRET_KEY: &str = "aws-secret-access-key-1009";
const AWS_SESSION_TOKEN: &str = "aws-session-token-1010";

/// Runs the flow; every secret value it used, named.
async fn full_flow(
    server: &SandgateProcess,
    client: &reqwest::Client,
    upstream: &FakeUpstream,
) -> Vec<(String, String)> {
    let mut secrets: Vec<(String, String)> = [
        ("ADMIN_PASSWORD", ADMIN_PASSWORD),
        ("JWT_SECRET", JWT_SECRET),
        ("SANDBOX_KEY_SECRET", SANDBOX_KEY_SECRET),
        ("DEFAULT_API_KEY", RUNTIME_KEY),
        ("SANDGATE_WEBHOOK_API_KEYS", WEBHOOK_KEY),
        ("PROXY_MASTER_KEY", MASTER_KEY),
        ("the gateway's api_key", GATEWAY_KEY),
        ("an added model's api_key", ADDED_MODEL_KEY),
        ("a warm configuration's environment value", WARM_ENV_SECRET),
        ("aws_access_key_id", AWS_ACCESS_KEY),
        ("aws_secret_access_key", AWS_SECRET_KEY),
        ("aws_session_token", AWS_SESSION_TOKEN),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value.to_owned()))
    .collect();
    secrets.extend(crate::redaction::SECRETS.iter().map(|value| {
        (
            "a delivered payload's secret".to_owned(),
            (*value).to_owned(),
        )
    }));

    // Webhook deliveries carrying every kind of secret a sender puts in clear.
    let mut bodies = crate::redaction::bodies_with_secrets();
    bodies[0]["agent"]["llm"]["aws_access_key_id"] = AWS_ACCESS_KEY.into();
    bodies[0]["agent"]["llm"]["aws_secret_access_key"] = AWS_SECRET_KEY.into();
    bodies[0]["agent"]["llm"]["aws_session_token"] = AWS_SESSION_TOKEN.into();
    for body in &bodies {
        assert_eq!(server.deliver(client, body).await, 200, "{body}");
        let id = body["id"].as_str().expect("id");
        assert_eq!(server.conversation(client, id).await.status(), 200);
        // Refused (its id is missing): the error path logs too.
        let mut invalid = body.clone();
        invalid.as_object_mut().expect("object").remove("id");
        let refused = client
            .post(server.url("/api/v1/webhooks/conversations"))
            .header("x-session-api-key", WEBHOOK_KEY)
            .header("content-type", "application/json")
            .body(invalid.to_string())
            .send()
            .await
            .expect("deliver");
        assert_eq!(refused.status(), 422);
    }
    // A wrong key, and a wrong password: refusals log.
    let refused = client
        .get(server.url("/api/warm-runtime-configs"))
        .header("x-api-key", "wrong-api-key-value-2001")
        .send()
        .await
        .expect("list");
    assert_eq!(refused.status(), 401);
    let challenge: Value = client
        .get(server.url("/api/admin/challenge"))
        .send()
        .await
        .expect("challenge")
        .json()
        .await
        .expect("JSON");
    let wrong = sandgate_runtime_api::admin::login::login_hash(
        "wrong-password-2002",
        challenge["salt"].as_str().expect("salt"),
        challenge["challenge"].as_str().expect("challenge"),
        challenge["iterations"].as_u64().expect("iterations") as u32,
    );
    let refused = client
        .post(server.url("/api/admin/login"))
        .json(&json!({ "challenge": challenge["challenge"], "hash": wrong }))
        .send()
        .await
        .expect("login");
    assert_eq!(refused.status(), 401);

    // Admin login, and a warm configuration save.
    let challenge: Value = client
        .get(server.url("/api/admin/challenge"))
        .send()
        .await
        .expect("challenge")
        .json()
        .await
        .expect("JSON");
    let hash = sandgate_runtime_api::admin::login::login_hash(
        ADMIN_PASSWORD,
        challenge["salt"].as_str().expect("salt"),
        challenge["challenge"].as_str().expect("challenge"),
        challenge["iterations"].as_u64().expect("iterations") as u32,
    );
    secrets.push(("the login hash".into(), hash.clone()));
    let login: Value = client
        .post(server.url("/api/admin/login"))
        .json(&json!({ "challenge": challenge["challenge"], "hash": hash }))
        .send()
        .await
        .expect("login")
        .json()
        .await
        .expect("JSON");
    let token = login["token"].as_str().expect("token").to_owned();
    secrets.push(("the admin token".into(), token.clone()));
    let keys: Value = client
        .get(server.url("/api/admin/api-keys"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("api keys")
        .json()
        .await
        .expect("JSON");
    assert_eq!(keys[0]["key_value"], RUNTIME_KEY);
    let config = json!({
        "image": "ghcr.io/acme/agent:1", "working_dir": "/workspace",
        "command": ["/bin/agent"], "environment": {"GITHUB_TOKEN": WARM_ENV_SECRET},
        "count": 1,
    });
    let saved = client
        .put(server.url("/api/admin/warm-runtime-configs/secretive"))
        .bearer_auth(&token)
        .json(&config)
        .send()
        .await
        .expect("save");
    assert_eq!(saved.status(), 200);

    // A sandbox start (a claim of the warm one, or a cold start), its session key used.
    let mut start = config.clone();
    start.as_object_mut().expect("object").remove("count");
    start["session_id"] = "session-with-secrets".into();
    let started: Value = client
        .post(server.url("/start"))
        .header("x-api-key", RUNTIME_KEY)
        .json(&start)
        .send()
        .await
        .expect("start")
        .json()
        .await
        .expect("JSON");
    let session_key = started["session_api_key"]
        .as_str()
        .unwrap_or_else(|| panic!("a session key: {started}"))
        .to_owned();
    secrets.push(("the sandbox session key".into(), session_key.clone()));
    let mut own =
        crate::common::conversation(&crate::common::new_id(), "2026-03-01T12:00:00Z", "running");
    own["agent"]["llm"]["api_key"] = crate::redaction::SECRETS[0].into();
    let delivered = client
        .post(server.url("/api/v1/webhooks/conversations"))
        .header("x-session-api-key", &session_key)
        .header("content-type", "application/json")
        .body(own.to_string())
        .send()
        .await
        .expect("deliver");
    assert_eq!(delivered.status(), 200);
    let paused = client
        .post(server.url("/pause"))
        .header("x-api-key", RUNTIME_KEY)
        .json(&json!({ "runtime_id": started["runtime_id"] }))
        .send()
        .await
        .expect("pause");
    assert_eq!(paused.status(), 200);
    let resumed: Value = client
        .post(server.url("/resume"))
        .header("x-api-key", RUNTIME_KEY)
        .json(&json!({ "runtime_id": started["runtime_id"] }))
        .send()
        .await
        .expect("resume")
        .json()
        .await
        .expect("JSON");
    if let Some(rotated) = resumed["session_api_key"].as_str() {
        secrets.push(("the rotated session key".into(), rotated.to_owned()));
    }

    // The model gateway: an added model, calls through both, one streamed.
    let added = client
        .post(server.url("/model/new"))
        .bearer_auth(MASTER_KEY)
        .json(&json!({"model_name": "added", "gateway_params": {
            "model": "gateway_proxy/added", "api_base": upstream.base(), "api_key": ADDED_MODEL_KEY}}))
        .send()
        .await
        .expect("model/new");
    assert_eq!(added.status(), 200, "{:?}", added.text().await);
    for (model, stream) in [
        ("configured", false),
        ("configured", true),
        ("added", false),
    ] {
        let answer = client
            .post(server.url("/v1/chat/completions"))
            .bearer_auth(MASTER_KEY)
            .header("x-gateway-session-id", "conversation-1")
            .json(&json!({"model": model, "stream": stream, "user": "someone",
                "messages": [{"role": "user", "content": "hello"}]}))
            .send()
            .await
            .expect("chat");
        assert_eq!(answer.status(), 200, "{model}");
        drop(answer.bytes().await);
    }
    let spend = client
        .get(server.url("/spend/logs"))
        .bearer_auth(MASTER_KEY)
        .send()
        .await
        .expect("spend logs");
    assert_eq!(spend.status(), 200);
    secrets
}

const REDIS_PASSWORD: &str = "redis-password-secret-1011";

async fn no_secret_in_any_log_line_at_trace(backend: Backend) {
    logs_hold_no_secret(backend, "text").await;
}

/// The JSON log format, which renders span and event fields apart, on a Redis that needs a
/// password (in `REDIS_URL`), which then goes away: the store's failures log too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_in_json_logs_with_a_redis_password() {
    let backend =
        Backend::Redis(crate::common::RedisServer::start_with_password(REDIS_PASSWORD).await);
    logs_hold_no_secret(backend, "json").await;
}

async fn logs_hold_no_secret(mut backend: Backend, format: &str) {
    let upstream = FakeUpstream::start().await;
    let config = crate::common::file_with(&format!(
        "model_list:\n  - model_name: configured\n    gateway_params: {{model: gateway_proxy/configured, api_base: \"{}\", api_key: os.environ/GATEWAY_KEY}}\n",
        upstream.base()
    ));
    let path = config.path().display().to_string();
    // Secrets travel in the environment, as docs/configuration.md advises (the test keys of
    // `serve_args` are on the command line; they are searched for all the same).
    let redis_url = match &backend {
        Backend::Redis(redis) => Some(redis.url()),
        Backend::Embedded(_) => None,
    };
    let mut args: Vec<String> = serve_args(&backend)
        .into_iter()
        .filter(|arg| arg != "--redis" && Some(arg) != redis_url.as_ref())
        .collect();
    args.extend([
        "--gateway-config".to_owned(),
        path,
        "--log-format".to_owned(),
        format.to_owned(),
    ]);
    let mut envs = vec![
        ("SANDGATE_LOG", "trace"),
        ("ADMIN_PASSWORD", ADMIN_PASSWORD),
        ("JWT_SECRET", JWT_SECRET),
        ("SANDBOX_KEY_SECRET", SANDBOX_KEY_SECRET),
        ("PROXY_MASTER_KEY", MASTER_KEY),
        ("GATEWAY_KEY", GATEWAY_KEY),
        ("PBKDF2_ITERATIONS", "1000"),
        ("LOCAL_SANDBOX_START_SECONDS", "0.1"),
        // The test's upstream is on loopback, where added models may go only so.
        ("GATEWAY_ALLOWED_UPSTREAM_HOSTS", "127.0.0.1"),
    ];
    if let Some(url) = &redis_url {
        envs.push(("REDIS_URL", url));
    }
    let mut server = SandgateProcess::spawn(&args, &envs).await;
    let client = reqwest::Client::new();
    let mut secrets = full_flow(&server, &client, &upstream).await;
    if let Backend::Redis(redis) = &mut backend {
        secrets.push(("the Redis password".into(), REDIS_PASSWORD.into()));
        // The store goes away: what fails is logged, and must not name it either.
        let within = redis.failure_detection();
        redis.kill().await;
        let health = until_status(within, 503, || async {
            let response = client.get(server.url("/health")).send().await;
            response.expect("health").status().as_u16()
        })
        .await;
        assert_eq!(health.last(), Some(&503), "{health:?}");
        let refused = until_status(within, 503, || async {
            let mut body = crate::redaction::bodies_with_secrets().swap_remove(0);
            body["id"] = new_id().into();
            server.deliver(&client, &body).await
        })
        .await;
        assert_eq!(refused.last(), Some(&503), "{refused:?}");
    }
    assert_eq!(server.terminate().await, Some(0));
    let log = server.log();
    for expected in [
        "conversation recorded",
        "admin logged in",
        "warm runtime configuration saved",
        // The model gateway's access log line, one per call.
        "gateway call",
    ] {
        assert!(log.contains(expected), "the log lacks {expected:?}");
    }
    let leaked: Vec<&str> = secrets
        .iter()
        .filter(|(_, value)| log.contains(value.as_str()))
        .map(|(name, _)| name.as_str())
        .collect();
    let lines_with = |value: &str| -> Vec<String> {
        log.lines()
            .filter(|line| line.contains(value))
            .take(3)
            .map(|line| line.chars().take(400).collect())
            .collect()
    };
    assert!(
        leaked.is_empty(),
        "the log ({} lines) holds {leaked:?}:\n{}",
        log.lines().count(),
        secrets
            .iter()
            .filter(|(_, value)| log.contains(value.as_str()))
            .flat_map(|(_, value)| lines_with(value))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

crate::on_both_backends!(no_secret_in_any_log_line_at_trace);

/// A profile name is the client's to choose, and it is logged: a newline in it must not
/// start a line of its own.
#[tokio::test]
async fn a_name_a_client_chose_cannot_forge_a_log_line() {
    let backend = Backend::embedded();
    let server = SandgateProcess::spawn(&serve_args(&backend), &[]).await;
    let client = reqwest::Client::new();
    let response = client
        .post(server.url("/api/v1/settings/profiles/team%0AERROR%20forged%20line"))
        .header("x-session-api-key", WEBHOOK_KEY)
        .json(&json!({"llm": {"model": "gateway_proxy/claude"}}))
        .send()
        .await
        .expect("post");
    assert_eq!(response.status(), 200);
    server
        .wait_for_log("LLM profile saved", std::time::Duration::from_secs(20))
        .await;
    let log = server.log();
    assert!(
        log.lines().all(|line| !line.starts_with("ERROR forged")),
        "{log}"
    );
    assert!(log.contains("team\\nERROR forged line"), "{log}");
}
