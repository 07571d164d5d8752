//! The audit log (issue 52, point 2): every change made with the admin token or the master
//! key is there, newest first, with who, what, on what and from where; no secret of any
//! change reaches it; only the admin reads it; replicas share it.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::admin::{login, put, start};
use crate::common::{Backend, RUNTIME_KEY, Sandgate};
use crate::gateway_keys::{post, send};
use crate::model_gateway::MASTER_KEY;

/// Values planted in every change's secret places: none may reach the log.
const SECRETS: &[&str] = &[
    "planted-env-secret-a1",
    "sk-planted0000000000000000000000chosen-b2",
    "planted-metadata-secret-c3",
    "planted-query-secret-d4",
    "planted-model-api-key-e5",
];

async fn replica(backend: &Backend) -> Sandgate {
    start(
        backend,
        None,
        &[
            "--proxy-master-key",
            MASTER_KEY,
            "--gateway-allowed-upstream-hosts",
            "127.0.0.1",
        ],
    )
    .await
}

async fn audit(sandgate: &Sandgate, token: &str, query: &str) -> (StatusCode, Value) {
    send(
        sandgate
            .client
            .get(sandgate.url(&format!("/api/admin/audit{query}")))
            .bearer_auth(token),
    )
    .await
}

async fn master(sandgate: &Sandgate, path: &str, body: Value) -> Value {
    let (status, answer) = send(post(sandgate, path, MASTER_KEY, &body)).await;
    assert!(status.is_success(), "{path}: {status} {answer}");
    answer
}

/// Every kind of change, made on `sandgate` by the admin and the master key; the actions
/// in the order made, and the virtual key made.
async fn changes(sandgate: &Sandgate, token: &str) -> (Vec<&'static str>, String) {
    let config = json!({
        "image": "ghcr.io/example/agent:1",
        "working_dir": "/workspace",
        "command": ["run"],
        "environment": {"GITHUB_TOKEN": "planted-env-secret-a1"},
        "count": 2,
    });
    let (status, body) = put(sandgate, token, "pool-a", &config).await;
    assert_eq!(status, 200, "{body}");
    let generated = master(
        sandgate,
        "/key/generate",
        json!({
            "key": "sk-planted0000000000000000000000chosen-b2",
            "key_alias": "ci-bot",
            "max_budget": 5.0,
            "metadata": {"token": "planted-metadata-secret-c3"},
        }),
    )
    .await;
    let key = generated["key"].as_str().expect("key").to_owned();
    master(
        sandgate,
        "/key/update",
        json!({"key": key, "max_budget": 7.5}),
    )
    .await;
    master(
        sandgate,
        "/team/new",
        json!({"team_id": "team-red", "max_budget": 100.0}),
    )
    .await;
    master(
        sandgate,
        "/user/new",
        json!({"user_id": "alice", "max_budget": 10.0}),
    )
    .await;
    master(
        sandgate,
        "/team/member_add",
        json!({"team_id": "team-red", "member": {"user_id": "alice", "role": "user"}}),
    )
    .await;
    master(
        sandgate,
        "/model/new",
        json!({"model_name": "audited", "gateway_params": {
            "model": "openai/some-model",
            "api_base": "http://127.0.0.1:9/v1?key=planted-query-secret-d4",
            "api_key": "planted-model-api-key-e5",
        }}),
    )
    .await;
    master(sandgate, "/key/delete", json!({"keys": [key]})).await;
    let deleted = sandgate
        .client
        .delete(sandgate.url("/api/admin/warm-runtime-configs/pool-a"))
        .bearer_auth(token)
        .send()
        .await
        .expect("delete");
    assert_eq!(deleted.status(), 200);
    (
        vec![
            "warm_config.put",
            "key.generate",
            "key.update",
            "team.new",
            "user.new",
            "team.member_add",
            "model.add",
            "key.delete",
            "warm_config.delete",
        ],
        key,
    )
}

fn actions(page: &Value) -> Vec<&str> {
    page["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|entry| entry["action"].as_str().expect("action"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_change_is_in_the_audit_log_without_its_secrets() {
    let backend = Backend::embedded();
    let sandgate = replica(&backend).await;
    let token = login(&sandgate).await;
    let (made, key) = changes(&sandgate, &token).await;

    let (status, page) = audit(&sandgate, &token, "").await;
    assert_eq!(status, 200, "{page}");
    let newest_first: Vec<_> = made.iter().rev().copied().collect();
    assert_eq!(actions(&page), newest_first, "{page}");
    let entries = page["entries"].as_array().expect("entries");
    for entry in entries {
        let actor = if entry["action"]
            .as_str()
            .is_some_and(|a| a.starts_with("warm_config"))
        {
            "admin"
        } else {
            "master key"
        };
        assert_eq!(entry["actor"], actor, "{entry}");
        assert_eq!(entry["source"], "127.0.0.1", "{entry}");
        assert!(entry["at_ms"].as_i64().expect("at") > 0, "{entry}");
    }
    let target = |action: &str| {
        entries
            .iter()
            .find(|entry| entry["action"] == action)
            .map(|entry| entry["target"].clone())
            .expect(action)
    };
    let short = format!("sk-...{}", &key[key.len() - 4..]);
    assert_eq!(target("warm_config.put"), "pool-a");
    assert_eq!(target("key.generate"), format!("ci-bot ({short})"));
    assert_eq!(target("key.update"), short);
    assert_eq!(target("team.new"), "team-red");
    assert_eq!(target("team.member_add"), "team-red");
    assert_eq!(target("user.new"), "alice");
    assert_eq!(target("model.add"), "audited");
    let detail = |action: &str| {
        entries
            .iter()
            .find(|entry| entry["action"] == action)
            .map(|entry| entry["detail"].clone())
            .expect(action)
    };
    assert_eq!(detail("warm_config.put")["count"], 2);
    assert_eq!(
        detail("warm_config.put")["environment"],
        json!(["GITHUB_TOKEN"])
    );
    assert_eq!(detail("key.update")["max_budget"], 7.5);
    assert_eq!(
        detail("team.member_add")["member"],
        json!({"user_id": "alice", "role": "user"})
    );
    assert_eq!(detail("model.add")["api_base"], "http://127.0.0.1");

    // No secret of any change, in any page.
    let text = page.to_string();
    for secret in SECRETS.iter().copied().chain([key.as_str()]) {
        assert!(!text.contains(secret), "{secret} in the audit log: {text}");
    }

    // Pages of three, to the end, are the same entries.
    let mut paged = Vec::new();
    let mut query = "?limit=3".to_owned();
    loop {
        let (status, page) = audit(&sandgate, &token, &query).await;
        assert_eq!(status, 200, "{page}");
        paged.extend(actions(&page).into_iter().map(str::to_owned));
        match page["next"].as_str() {
            Some(next) => query = format!("?limit=3&before={next}"),
            None => break,
        }
    }
    assert_eq!(paged, newest_first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_admin_reads_the_audit_log() {
    let backend = Backend::embedded();
    let sandgate = replica(&backend).await;
    let token = login(&sandgate).await;
    let generated = master(&sandgate, "/key/generate", json!({"key_alias": "tenant"})).await;
    let virtual_key = generated["key"].as_str().expect("key").to_owned();
    for (who, credential) in [
        ("the master key", MASTER_KEY),
        ("a virtual key", virtual_key.as_str()),
        ("the runtime API key", RUNTIME_KEY),
        ("a forged token", "eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl"),
    ] {
        let (status, body) = audit(&sandgate, credential, "").await;
        assert_eq!(status, 401, "{who}: {body}");
        assert!(body.get("entries").is_none(), "{who}: {body}");
    }
    let answer = sandgate
        .client
        .get(sandgate.url("/api/admin/audit"))
        .header("x-api-key", RUNTIME_KEY)
        .send()
        .await
        .expect("request");
    assert_eq!(answer.status(), 401);
    // The caller before the query: a bad limit is 401 without the token, 422 with it.
    let anonymous = sandgate
        .client
        .get(sandgate.url("/api/admin/audit?limit=abc"))
        .send()
        .await
        .expect("request");
    assert_eq!(anonymous.status(), 401);
    let (status, body) = audit(&sandgate, &token, "?limit=abc").await;
    assert_eq!(status, 422, "{body}");
    // A cursor no entry has: an empty page, not an error.
    let (status, body) = audit(&sandgate, &token, "?before=%28not-an-id").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["entries"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_one_audit_log() {
    let backend = Backend::redis().await;
    let first = replica(&backend).await;
    let second = replica(&backend).await;
    let token = login(&first).await;
    master(&first, "/team/new", json!({"team_id": "team-blue"})).await;
    master(
        &second,
        "/team/update",
        json!({"team_id": "team-blue", "max_budget": 3.0}),
    )
    .await;
    // The admin token of one replica is good on the other (one JWT secret).
    let (status, page) = audit(&second, &token, "").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(actions(&page), ["team.update", "team.new"], "{page}");
}
