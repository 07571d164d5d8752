//! Redis over TLS as an install runs it: the real binary with `REDIS_URL=rediss://…` and a
//! private CA (`REDIS_CA_CERT`), a client certificate for a server that asks for one, a
//! clear refusal when the server cannot be trusted, and `check-config` saying so first.
//! (Every test of `on_both_backends!` also runs on Redis over TLS.)

use crate::common::{
    RUNTIME_KEY, RedisServer, SandgateProcess, WEBHOOK_KEY, conversation, new_id, run_sandgate,
};

/// `sandgate serve` on port 0 against `redis` with `tls_args`, configured by environment
/// as the manifests do.
fn serve_env(redis: &RedisServer, tls_args: &[String]) -> Vec<(String, String)> {
    let mut env = vec![
        ("REDIS_URL".to_owned(), redis.url()),
        (
            "SANDGATE_WEBHOOK_API_KEYS".to_owned(),
            WEBHOOK_KEY.to_owned(),
        ),
        ("DEFAULT_API_KEY".to_owned(), RUNTIME_KEY.to_owned()),
    ];
    for pair in tls_args.chunks(2) {
        let name = pair[0].trim_start_matches("--").replace('-', "_");
        env.push((name.to_uppercase(), pair[1].clone()));
    }
    env
}

fn as_refs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect()
}

const SERVE: [&str; 3] = ["serve", "--listen", "127.0.0.1:0"];

/// Delivers one record through `sandgate` and reads it back.
async fn round_trip(sandgate: &SandgateProcess) {
    let client = reqwest::Client::new();
    let id = new_id();
    let status = sandgate
        .deliver(
            &client,
            &conversation(&id, "2026-03-01T12:00:00Z", "running"),
        )
        .await;
    assert_eq!(status, 200, "{}", sandgate.log());
    let record = sandgate.conversation(&client, &id).await;
    assert_eq!(record.status(), 200);
    let health = client
        .get(sandgate.url("/health"))
        .send()
        .await
        .expect("health");
    assert_eq!(health.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_on_rediss_with_a_private_ca() {
    let redis = RedisServer::start_tls(false).await;
    let env = serve_env(&redis, &redis.tls_args());
    let args: Vec<String> = SERVE.iter().map(|arg| (*arg).to_owned()).collect();
    let sandgate = SandgateProcess::spawn(&args, &as_refs(&env)).await;
    round_trip(&sandgate).await;
    // What was acknowledged is in the TLS server.
    let mut connection = redis.connection().await;
    let keys: Vec<String> = ::redis::cmd("KEYS")
        .arg("sandgate:conv:*")
        .query_async(&mut connection)
        .await
        .expect("KEYS");
    assert_eq!(keys.len(), 1, "{keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_asks_for_a_client_certificate_gets_one() {
    let redis = RedisServer::start_tls(true).await;
    let env = serve_env(&redis, &redis.tls_args());
    let args: Vec<String> = SERVE.iter().map(|arg| (*arg).to_owned()).collect();
    let sandgate = SandgateProcess::spawn(&args, &as_refs(&env)).await;
    round_trip(&sandgate).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_it_cannot_trust_or_that_refuses_it_stops_the_start_with_the_reason() {
    // The system's roots do not know the private CA.
    let redis = RedisServer::start_tls(false).await;
    let env = serve_env(&redis, &[]);
    let output = run_sandgate(&SERVE, &as_refs(&env)).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot reach Redis at rediss://"),
        "{stderr}"
    );
    assert!(stderr.to_lowercase().contains("certificate"), "{stderr}");

    // A server that asks for a client certificate, given only the CA.
    let strict = RedisServer::start_tls(true).await;
    let ca_only = &strict.tls_args()[..2];
    let env = serve_env(&strict, ca_only);
    let output = run_sandgate(&SERVE, &as_refs(&env)).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot reach Redis at rediss://"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_config_connects_when_asked_and_names_what_is_wrong() {
    let redis = RedisServer::start_tls(false).await;
    let check = ["check-config", "--service", "runtime-api", "--connect"];
    let report =
        |output: &std::process::Output| String::from_utf8_lossy(&output.stdout).into_owned();

    let env = serve_env(&redis, &redis.tls_args());
    let output = run_sandgate(&check, &as_refs(&env)).await;
    assert!(
        !report(&output)
            .lines()
            .any(|line| line.starts_with("error: REDIS") || line.starts_with("warning: REDIS")),
        "a usable Redis reported: {}",
        report(&output)
    );

    let env = serve_env(&redis, &[]);
    let output = run_sandgate(&check, &as_refs(&env)).await;
    assert_eq!(output.status.code(), Some(1), "{}", report(&output));
    let line = report(&output)
        .lines()
        .find(|line| line.starts_with("error: REDIS_URL: cannot connect:"))
        .map(str::to_owned);
    assert!(
        line.as_ref()
            .is_some_and(|line| line.contains("cannot reach Redis at rediss://")
                && line.contains("UnknownIssuer")),
        "{}",
        report(&output)
    );

    // A URL form Sandgate does not connect with, or one that does not parse, fails before
    // any connection, naming it.
    for (url, problem) in [
        (
            "redis+cluster://:hunter2@127.0.0.1:1/3",
            "error: REDIS_URL: redis+cluster://***@127.0.0.1:1/3 does not parse: a cluster has one database",
        ),
        (
            "http://:hunter2@127.0.0.1:1",
            "error: REDIS_URL: http://***@127.0.0.1:1 is not a URL form",
        ),
    ] {
        let env = [
            ("REDIS_URL", url),
            ("SANDGATE_WEBHOOK_API_KEYS", WEBHOOK_KEY),
        ];
        let output = run_sandgate(&check, &env).await;
        assert_eq!(output.status.code(), Some(1));
        let text = report(&output);
        assert!(text.contains(problem), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }
}
