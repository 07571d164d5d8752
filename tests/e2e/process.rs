//! The real binary: restarts lose nothing acknowledged, SIGTERM exits 0, and the parts
//! run apart.

use serde_json::Value;

use crate::common::{Backend, SandgateProcess, base_args, conversation, new_id, serve_args};

async fn fetch(client: &reqwest::Client, server: &SandgateProcess, id: &str) -> Value {
    let response = server.conversation(client, id).await;
    assert_eq!(
        response.status(),
        200,
        "conversation {id} was acknowledged but is gone"
    );
    response.json().await.expect("JSON")
}

/// Acknowledged deliveries survive a SIGKILL (no chance to flush) and a restart.
async fn a_killed_server_loses_nothing_it_acknowledged(backend: Backend) {
    let client = reqwest::Client::new();
    let mut server = SandgateProcess::spawn(&serve_args(&backend), &[]).await;
    let ids: Vec<String> = (0..30).map(|_| new_id()).collect();
    let deliveries = ids
        .iter()
        .map(|id| conversation(id, "2026-03-01T12:00:00Z", "running"))
        .collect::<Vec<_>>();
    let statuses =
        futures::future::join_all(deliveries.iter().map(|body| server.deliver(&client, body)))
            .await;
    assert!(statuses.iter().all(|status| *status == 200), "{statuses:?}");
    server.kill().await;

    let server = SandgateProcess::spawn(&serve_args(&backend), &[]).await;
    for id in &ids {
        assert_eq!(
            fetch(&client, &server, id).await["execution_status"],
            "running"
        );
    }
}

crate::on_both_backends!(a_killed_server_loses_nothing_it_acknowledged);

#[tokio::test]
async fn sigterm_drains_and_exits_zero() {
    let backend = Backend::embedded();
    let client = reqwest::Client::new();
    let mut server = SandgateProcess::spawn(&serve_args(&backend), &[]).await;
    assert_eq!(
        server
            .deliver(
                &client,
                &conversation(&new_id(), "2026-03-01T12:00:00Z", "idle")
            )
            .await,
        200
    );
    assert_eq!(server.terminate().await, Some(0));
    assert!(server.log().contains("SIGTERM received"));
}

#[tokio::test]
async fn runtime_api_and_edge_run_apart() {
    let backend = Backend::embedded();
    let mut runtime_args = vec![
        "runtime-api".to_owned(),
        "--grpc-listen".to_owned(),
        "127.0.0.1:0".to_owned(),
    ];
    runtime_args.extend(base_args(&backend));
    let mut runtime_api = SandgateProcess::spawn(&runtime_args, &[]).await;
    let edge_args = [
        "edge".to_owned(),
        "--listen".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--runtime-api".to_owned(),
        format!("http://{}", runtime_api.address),
    ];
    let edge = SandgateProcess::spawn(&edge_args, &[]).await;
    let client = reqwest::Client::new();
    let id = new_id();
    assert_eq!(
        edge.deliver(
            &client,
            &conversation(&id, "2026-03-01T12:00:00Z", "paused")
        )
        .await,
        200
    );
    assert_eq!(
        fetch(&client, &edge, &id).await["execution_status"],
        "paused"
    );
    let health = client
        .get(edge.url("/health"))
        .send()
        .await
        .expect("health");
    assert_eq!(health.status(), 200);
    runtime_api.kill().await;
    let health = client
        .get(edge.url("/health"))
        .send()
        .await
        .expect("health");
    assert_eq!(
        health.status(),
        503,
        "the edge reports a runtime API that is gone"
    );
}

/// A completion's spend log entry waits a few milliseconds to share its write with those
/// of other calls; a SIGTERM right after the answer still writes it before the exit.
#[tokio::test]
async fn sigterm_right_after_an_answer_keeps_its_spend_log_entry() {
    use crate::model_gateway::{FakeUpstream, MASTER_KEY, config_text};
    let backend = Backend::embedded();
    let upstream = FakeUpstream::start().await;
    let config = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(config.path(), config_text(&upstream, false, false).await)
        .expect("write config");
    let mut args = serve_args(&backend);
    args.extend([
        "--gateway-config".to_owned(),
        config.path().display().to_string(),
    ]);
    let envs = [("PROXY_MASTER_KEY", MASTER_KEY)];
    let client = reqwest::Client::new();

    let mut server = SandgateProcess::spawn(&args, &envs).await;
    let answer = client
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(MASTER_KEY)
        .body(r#"{"model": "claude", "messages": [{"role": "user", "content": "hi"}]}"#)
        .send()
        .await
        .expect("request");
    assert_eq!(answer.status(), 200);
    assert_eq!(server.terminate().await, Some(0));

    let server = SandgateProcess::spawn(&args, &envs).await;
    let logs: Value = client
        .get(server.url("/spend/logs"))
        .bearer_auth(MASTER_KEY)
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("JSON");
    let logs = logs.as_array().expect("an array");
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs[0]["model"], "claude");
    assert_eq!(logs[0]["status"], 200);
}
