//! Sandgate SIGKILLed: what it acknowledged (saved configurations, started sandboxes
//! and their session keys) survives, and the reconciler's lease passes to a surviving
//! replica once it expires.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::report;
use crate::common::{
    ADMIN_PASSWORD, Backend, RUNTIME_KEY, SandgateProcess, admin_args, conversation, new_id,
    serve_args,
};

const IMAGE: &str = "ghcr.io/acme/agent:1.0";

/// The flags of a `serve` with admin login, a fixed key secret (session keys survive a
/// restart) and `extra`.
fn admin_serve_args(backend: &Backend, extra: &[&str]) -> Vec<String> {
    let mut args = serve_args(backend);
    args.extend(admin_args());
    args.extend(extra.iter().map(|arg| (*arg).to_owned()));
    args
}

/// A warm runtime configuration's body.
fn warm_config(image: &str, count: i64) -> Value {
    json!({
        "image": image, "working_dir": "/workspace",
        "command": ["/usr/local/bin/agent-server", "--port", "8000"],
        "environment": {"LOG_LEVEL": "info"}, "count": count,
    })
}

/// A start for a spec no pool has: a cold start.
fn cold_start(session_id: &str) -> Value {
    json!({
        "image": "ghcr.io/acme/cold:1", "working_dir": "/workspace",
        "command": ["/bin/agent"], "environment": {}, "session_id": session_id,
    })
}

async fn post_json(
    client: &reqwest::Client,
    server: &SandgateProcess,
    path: &str,
    body: &Value,
) -> (u16, Value) {
    let response = client
        .post(server.url(path))
        .header("x-api-key", RUNTIME_KEY)
        .json(body)
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Saved configurations and started sandboxes (with their session keys) survive a
/// SIGKILL right after they were acknowledged.
async fn a_killed_server_keeps_saved_configurations_and_started_sandboxes(backend: Backend) {
    let client = reqwest::Client::new();
    let args = admin_serve_args(&backend, &[]);
    let mut server = SandgateProcess::spawn(&args, &[]).await;
    let token = server.admin_token(&client, ADMIN_PASSWORD).await;
    let names: Vec<String> = (0..5).map(|index| format!("pool-{index}")).collect();
    for (index, name) in names.iter().enumerate() {
        let response = client
            .put(server.url(&format!("/api/admin/warm-runtime-configs/{name}")))
            .bearer_auth(&token)
            .json(&warm_config(&format!("{IMAGE}-{index}"), 0))
            .send()
            .await
            .expect("put");
        assert_eq!(response.status(), 200, "{:?}", response.text().await);
    }
    let mut started = Vec::new();
    for _ in 0..10 {
        let session_id = new_id();
        let (status, sandbox) =
            post_json(&client, &server, "/start", &cold_start(&session_id)).await;
        assert_eq!(status, 200, "{sandbox}");
        started.push((session_id, sandbox));
    }
    server.kill().await;

    let server = SandgateProcess::spawn(&args, &[]).await;
    let listed: Value = client
        .get(server.url("/api/warm-runtime-configs"))
        .header("x-api-key", RUNTIME_KEY)
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("JSON");
    let listed: Vec<&str> = listed["configs"]
        .as_array()
        .expect("configs")
        .iter()
        .filter_map(|entry| entry["name"].as_str())
        .collect();
    assert_eq!(listed, names, "saved configurations after the kill");
    for (session_id, sandbox) in &started {
        let response = client
            .get(server.url(&format!("/sessions/{session_id}")))
            .header("x-api-key", RUNTIME_KEY)
            .send()
            .await
            .expect("session");
        assert_eq!(response.status(), 200, "session {session_id} is gone");
        let found: Value = response.json().await.expect("JSON");
        assert_eq!(found["runtime_id"], sandbox["runtime_id"]);
        // Its session key still opens the webhook, for this sandbox.
        let key = sandbox["session_api_key"].as_str().expect("session key");
        let delivered = client
            .post(server.url("/api/v1/webhooks/conversations"))
            .header("x-session-api-key", key)
            .header("content-type", "application/json")
            .body(conversation(&new_id(), "2026-03-01T12:00:00Z", "running").to_string())
            .send()
            .await
            .expect("deliver");
        assert_eq!(delivered.status(), 200, "the session key of {session_id}");
    }
}

crate::on_both_backends!(a_killed_server_keeps_saved_configurations_and_started_sandboxes);

/// Two replicas on one Redis: only the lease holder reconciles; when it is killed
/// (SIGKILL, the lease is never released) the other takes over once the lease expires,
/// and refills the pool a claim emptied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconciler_lease_passes_to_a_surviving_replica() {
    let backend = Backend::redis().await;
    let installer = tempfile::NamedTempFile::new().expect("temp file");
    let config = warm_config(IMAGE, 2);
    let mut entry = config.clone();
    entry["name"] = "v1_current".into();
    std::fs::write(
        installer.path(),
        json!({ "count": 2, "configs": [entry] }).to_string(),
    )
    .expect("installer file");
    let path = installer.path().display().to_string();
    let args = admin_serve_args(
        &backend,
        &[
            "--warm-runtimes-file",
            &path,
            "--reconcile-interval",
            "1",
            "--local-sandbox-start-seconds",
            "0.2",
        ],
    );
    let mut first = SandgateProcess::spawn(&args, &[]).await;
    // The first replica takes the lease and fills the pool…
    first
        .wait_for_log("warm pools reconciled", Duration::from_secs(20))
        .await;
    let second = SandgateProcess::spawn(&args, &[]).await;
    let client = reqwest::Client::new();
    // …and the second, though its reconciler runs every second, has nothing to do.
    let pools = |server: &SandgateProcess| {
        let request = client
            .get(server.url("/api/warm-runtime-pools"))
            .header("x-api-key", RUNTIME_KEY);
        async move {
            let pools: Value = request
                .send()
                .await
                .expect("pools")
                .json()
                .await
                .expect("JSON");
            pools["pools"][0].clone()
        }
    };
    assert_eq!(pools(&second).await["target"], 2);
    assert!(
        !second.log().contains("warm pools reconciled"),
        "the second replica reconciled while the first held the lease:\n{}",
        second.log()
    );

    first.kill().await;
    let killed_at = Instant::now();
    // A claim through the survivor empties a slot of the pool.
    let mut claim = config.clone();
    claim["session_id"] = new_id().into();
    claim.as_object_mut().expect("object").remove("count");
    let (status, claimed) = post_json(&client, &second, "/start", &claim).await;
    assert_eq!(status, 200, "{claimed}");
    assert_eq!(
        claimed["warm"], true,
        "a warm sandbox was claimed: {claimed}"
    );
    // The lease lives 3 s (2 × the 1 s interval, raised to the floor); the survivor's
    // first pass after it expires refills.
    second
        .wait_for_log("warm pools reconciled", Duration::from_secs(10))
        .await;
    let takeover = killed_at.elapsed();
    let refilled = pools(&second).await;
    assert_eq!(
        refilled["ready"].as_i64().unwrap_or(0) + refilled["starting"].as_i64().unwrap_or(0),
        2,
        "the pool after the takeover: {refilled}"
    );
    assert!(
        takeover < Duration::from_secs(3 + 1 + 2),
        "took over after {takeover:?}: more than the lease TTL, an interval and slack"
    );
    report(&format!(
        "lease takeover: the survivor reconciled {takeover:?} after the holder's SIGKILL (lease TTL 3 s, interval 1 s)"
    ));
}
