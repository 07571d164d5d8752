//! The ledger (issue 52, point 1): a conversation's calls, tokens and spend, in all and by
//! model, exactly what its spend log entries say, across replicas; its sandbox's time;
//! rollups by team, user, key and model, as JSON and CSV; read with the admin token only.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::admin::{login, start};
use crate::common::{Backend, RUNTIME_KEY, Sandgate, file_with};
use crate::gateway_keys::{chat, generate, post, send};
use crate::gateway_orgs::one_a_call;
use crate::model_gateway::{FakeUpstream, MASTER_KEY, UPSTREAM_KEY};

/// Two models whose calls cost exactly 1.0 each (`one_a_call`), and `denied`, whose
/// upstream answers 401: a failed call.
fn config(upstream: &FakeUpstream) -> tempfile::NamedTempFile {
    file_with(&format!(
        "model_list:\n{}{}  - model_name: denied\n    litellm_params: {{model: openai/deny, api_base: \"{}/openai/v1\", api_key: {UPSTREAM_KEY}}}\n",
        one_a_call(upstream, "gpt", "gpt-4o"),
        one_a_call(upstream, "small", "small"),
        upstream.base(),
    ))
}

async fn replica(backend: &Backend, config: &tempfile::NamedTempFile) -> Sandgate {
    let path = config.path().display().to_string();
    start(
        backend,
        None,
        &["--gateway-config", &path, "--proxy-master-key", MASTER_KEY],
    )
    .await
}

async fn read(sandgate: &Sandgate, token: &str, path: &str) -> (StatusCode, Value) {
    send(sandgate.client.get(sandgate.url(path)).bearer_auth(token)).await
}

/// The conversation's ledger once it counts `calls` calls (counted just after each ends).
async fn ledger_with(sandgate: &Sandgate, token: &str, id: &str, calls: u64) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, ledger) =
            read(sandgate, token, &format!("/api/ledger/conversations/{id}")).await;
        assert_eq!(status, 200, "{ledger}");
        if ledger["total"]["calls"] == calls || tokio::time::Instant::now() > deadline {
            return ledger;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_s_calls_are_counted_exactly_across_replicas() {
    let backend = Backend::redis().await;
    let upstream = FakeUpstream::start().await;
    let config = config(&upstream);
    let replicas = [
        replica(&backend, &config).await,
        replica(&backend, &config).await,
    ];
    let token = login(&replicas[0]).await;
    let (status, body) = send(post(
        &replicas[0],
        "/team/new",
        MASTER_KEY,
        &json!({"team_id": "red"}),
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    let (key, key_token) =
        generate(&replicas[0], &json!({"team_id": "red", "user_id": "alice"})).await;

    // Conversation A: 6 calls to gpt and 2 to small, alternating replicas; 1 failed call.
    // Conversation B: 3 calls to gpt.
    for index in 0..8 {
        let model = if index < 6 { "gpt" } else { "small" };
        let (status, body) = chat(&replicas[index % 2], &key, model, Some("conv-a")).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = chat(&replicas[1], &key, "denied", Some("conv-a")).await;
    assert!(!status.is_success(), "{body}");
    for index in 0..3 {
        let (status, body) = chat(&replicas[index % 2], &key, "gpt", Some("conv-b")).await;
        assert_eq!(status, 200, "{body}");
    }

    let ledger = ledger_with(&replicas[1], &token, "conv-a", 9).await;
    let total = &ledger["total"];
    assert_eq!(total["calls"], 9, "{ledger}");
    assert_eq!(total["failed_calls"], 1, "{ledger}");
    assert_eq!(total["prompt_tokens"], 8 * 11, "{ledger}");
    assert_eq!(total["completion_tokens"], 8 * 7, "{ledger}");
    assert_eq!(total["spend"], 8.0, "{ledger}");
    assert_eq!(ledger["by_model"]["gpt"]["calls"], 6, "{ledger}");
    assert_eq!(ledger["by_model"]["gpt"]["spend"], 6.0, "{ledger}");
    assert_eq!(ledger["by_model"]["small"]["calls"], 2, "{ledger}");
    assert_eq!(ledger["by_model"]["denied"]["failed_calls"], 1, "{ledger}");
    // What the spend log says of the conversation, entry by entry.
    let (status, logs) = send(
        replicas[0]
            .client
            .get(replicas[0].url("/spend/logs?session_id=conv-a&limit=100"))
            .bearer_auth(MASTER_KEY),
    )
    .await;
    assert_eq!(status, 200, "{logs}");
    let entries = logs.as_array().expect("entries");
    assert_eq!(entries.len(), 9, "{logs}");
    let logged: f64 = entries
        .iter()
        .filter_map(|entry| entry["spend"].as_f64())
        .sum();
    assert_eq!(total["spend"].as_f64(), Some(logged));

    let b = ledger_with(&replicas[0], &token, "conv-b", 3).await;
    assert_eq!(b["total"]["spend"], 3.0, "{b}");
    assert_eq!(
        b["by_model"].as_object().map(|models| models.len()),
        Some(1),
        "{b}"
    );

    // Rollups: by team, user, key and model; JSON, CSV and pages.
    let rollup = |by: &str| format!("/api/ledger/rollup?by={by}");
    let (status, teams) = read(&replicas[0], &token, &rollup("team")).await;
    assert_eq!(status, 200, "{teams}");
    assert_eq!(teams["rows"][0]["id"], "red", "{teams}");
    assert_eq!(teams["rows"][0]["calls"], 12, "{teams}");
    assert_eq!(teams["rows"][0]["spend"], 11.0, "{teams}");
    let (_, users) = read(&replicas[0], &token, &rollup("user")).await;
    assert_eq!(users["rows"][0]["id"], "alice", "{users}");
    let (_, keys) = read(&replicas[0], &token, &rollup("key")).await;
    assert_eq!(keys["rows"][0]["id"], key_token.as_str(), "{keys}");
    let (_, models) = read(&replicas[0], &token, &rollup("model")).await;
    let ids: Vec<_> = models["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| row["id"].clone())
        .collect();
    assert_eq!(ids, ["denied", "gpt", "small"], "{models}");
    assert_eq!(models["total_rows"], 3);
    let (_, first) = read(
        &replicas[0],
        &token,
        &format!("{}&limit=2", rollup("model")),
    )
    .await;
    assert_eq!(first["rows"].as_array().map(Vec::len), Some(2), "{first}");
    let next = first["next"].as_str().expect("next");
    let (_, second) = read(
        &replicas[0],
        &token,
        &format!("{}&limit=2&after={next}", rollup("model")),
    )
    .await;
    assert_eq!(second["rows"][0]["id"], "small", "{second}");
    assert!(
        second.get("next").is_none() || second["next"].is_null(),
        "{second}"
    );
    let csv = replicas[1]
        .client
        .get(replicas[1].url(&format!("{}&format=csv", rollup("conversation"))))
        .bearer_auth(&token)
        .send()
        .await
        .expect("csv");
    assert_eq!(csv.status(), 200);
    assert!(
        csv.headers()["content-type"]
            .to_str()
            .expect("type")
            .starts_with("text/csv")
    );
    let text = csv.text().await.expect("text");
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "id,spend,calls,failed_calls,prompt_tokens,completion_tokens,cache_read_tokens,cache_write_tokens,running_ms,paused_ms,sandbox_cost,events,webhooks,title,status,tags,user_id,team_id,key_alias",
            "\"conv-a\",8,9,1,88,56,0,0,0,0,0,0,0,\"\",\"\",\"\",\"alice\",\"red\",\"\"",
            "\"conv-b\",3,3,0,33,21,0,0,0,0,0,0,0,\"\",\"\",\"\",\"alice\",\"red\",\"\"",
        ],
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_s_sandbox_time_is_counted_running_and_paused() {
    let backend = Backend::embedded();
    let upstream = FakeUpstream::start().await;
    let config = config(&upstream);
    let sandgate = replica(&backend, &config).await;
    let token = login(&sandgate).await;
    let runtime = |path: &str, body: Value| {
        sandgate
            .client
            .post(sandgate.url(path))
            .header("x-api-key", RUNTIME_KEY)
            .json(&body)
    };
    let began = std::time::Instant::now();
    let (status, started) = send(runtime(
        "/start",
        json!({"image": "ghcr.io/acme/agent:1.0", "command": ["agent"], "working_dir": "/workspace",
               "environment": {}, "session_id": "conv-s"}),
    ))
    .await;
    assert_eq!(status, 200, "{started}");
    let runtime_id = started["runtime_id"].as_str().expect("id").to_owned();
    // Time passes in each state (not a wait for anything: the bounds below hold however
    // long the machine takes).
    tokio::time::sleep(Duration::from_millis(30)).await;
    let (status, paused) = send(runtime("/pause", json!({"runtime_id": runtime_id}))).await;
    assert_eq!(status, 200, "{paused}");
    tokio::time::sleep(Duration::from_millis(30)).await;
    let (_, ledger) = read(&sandgate, &token, "/api/ledger/conversations/conv-s").await;
    let paused_so_far = ledger["total"]["paused_ms"].as_u64().expect("paused");
    assert!(paused_so_far >= 1, "{ledger}");
    let (status, resumed) = send(runtime("/resume", json!({"runtime_id": runtime_id}))).await;
    assert_eq!(status, 200, "{resumed}");
    let elapsed = began.elapsed().as_millis() as u64;
    let (_, ledger) = read(&sandgate, &token, "/api/ledger/conversations/conv-s").await;
    let total = &ledger["total"];
    let paused_ms = total["paused_ms"].as_u64().expect("paused");
    assert!(
        paused_ms >= paused_so_far && paused_ms <= elapsed,
        "{ledger} within {elapsed} ms"
    );
    let running_ms = total["running_ms"].as_u64().expect("running");
    assert!(
        running_ms + paused_ms <= elapsed + 1,
        "{ledger} within {elapsed} ms"
    );
    // Its sandbox as it is now, and how it started: cold, as no pool runs its image.
    assert_eq!(ledger["sandbox"]["start"]["launch"], "cold", "{ledger}");
    assert_eq!(
        ledger["sandbox"]["start"]["cold_reason"], "no_pool",
        "{ledger}"
    );
    assert_eq!(ledger["sandbox"]["status"], resumed["status"], "{ledger}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_admin_reads_the_ledger() {
    let backend = Backend::embedded();
    let upstream = FakeUpstream::start().await;
    let config = config(&upstream);
    let sandgate = replica(&backend, &config).await;
    let token = login(&sandgate).await;
    let (key, _) = generate(&sandgate, &json!({"key_alias": "tenant"})).await;
    for path in [
        "/api/ledger/conversations/conv-a",
        "/api/ledger/rollup?by=team",
    ] {
        for (who, credential) in [
            ("master key", MASTER_KEY),
            ("virtual key", key.as_str()),
            ("runtime key", RUNTIME_KEY),
        ] {
            let (status, body) = read(&sandgate, credential, path).await;
            assert_eq!(status, 401, "{who} on {path}: {body}");
        }
    }
    // The caller before the query: 401 without the token, 422 with it.
    for query in [
        "?by=nobody",
        "?by=team&from=yesterday",
        "?by=team&limit=x",
        "?format=xml&by=team",
        "",
    ] {
        let path = format!("/api/ledger/rollup{query}");
        let anonymous = sandgate
            .client
            .get(sandgate.url(&path))
            .send()
            .await
            .expect("request");
        assert_eq!(anonymous.status(), 401, "{path}");
        let (status, body) = read(&sandgate, &token, &path).await;
        assert_eq!(status, 422, "{path}: {body}");
    }
    // A reversed range reads nothing; a long one, what is kept: neither is an error.
    for range in [
        "from=2026-11-20&to=2026-11-01",
        "from=0001-01-01&to=9999-12-31",
    ] {
        let path = format!("/api/ledger/rollup?by=team&{range}");
        let (status, body) = read(&sandgate, &token, &path).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(body["rows"], json!([]), "{path}: {body}");
    }
    // Nothing counted: zeros, not an error.
    let (status, body) = read(&sandgate, &token, "/api/ledger/conversations/never-seen").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["total"]["calls"], 0, "{body}");
}

/// Runs `sandgate ledger <args>` against `sandgate`.
pub(crate) async fn ledger_cli(sandgate: &Sandgate, args: &[&str]) -> (bool, String, String) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_sandgate"))
        .arg("ledger")
        .args(args)
        .env("RUNTIME_API_URL", sandgate.url(""))
        .env("ADMIN_PASSWORD", crate::admin::PASSWORD)
        .output()
        .await
        .expect("sandgate ledger");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_command_prints_a_conversation_and_every_page_of_a_rollup() {
    let backend = Backend::embedded();
    let upstream = FakeUpstream::start().await;
    let config = config(&upstream);
    let sandgate = replica(&backend, &config).await;
    let token = login(&sandgate).await;
    // More conversations than one page of the command's (1000 rows) would not be quick:
    // 3 conversations, and the pages are the server's, checked above; here, that every
    // row comes out once, with one header line.
    for conversation in ["c-1", "c-2", "c-3"] {
        let (status, body) = chat(&sandgate, MASTER_KEY, "gpt", Some(conversation)).await;
        assert_eq!(status, 200, "{body}");
    }
    ledger_with(&sandgate, &token, "c-3", 1).await;
    let (ok, out, err) = ledger_cli(&sandgate, &["rollup", "--by", "conversation"]).await;
    assert!(ok, "{err}");
    let lines: Vec<_> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[0].starts_with("id,spend,calls"), "{out}");
    assert!(lines[3].starts_with("\"c-3\",1,1,"), "{out}");
    let (ok, out, err) =
        ledger_cli(&sandgate, &["conversation", "c-2", "--from", "2026-01-01"]).await;
    assert!(ok, "{err}");
    let ledger: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(ledger["total"]["calls"], 1, "{ledger}");
    let (ok, _, err) = ledger_cli(&sandgate, &["rollup", "--by", "team", "--from", "soon"]).await;
    assert!(!ok && err.contains("a day is written"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_s_updates_and_events_are_counted_once() {
    let backend = Backend::embedded();
    let upstream = FakeUpstream::start().await;
    let config = config(&upstream);
    let sandgate = replica(&backend, &config).await;
    let token = login(&sandgate).await;
    let id = crate::common::new_id();
    let hex = id.replace('-', "");
    for updated_at in ["2026-11-29T10:00:00Z", "2026-11-29T10:00:01Z"] {
        sandgate
            .deliver_ok(&crate::common::conversation(&id, updated_at, "running"))
            .await;
    }
    let message = |event: &str| {
        json!({
            "kind": "MessageEvent", "id": event, "timestamp": "2026-11-29T10:00:02",
            "source": "user",
            "llm_message": {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            "activated_skills": [], "extended_content": [], "sender": null,
        })
    };
    // Three events, one of them sent twice: stored, and counted, once each.
    for batch in [
        json!([message("e1"), message("e2")]),
        json!([message("e2"), message("e3")]),
    ] {
        let response = sandgate
            .client
            .post(sandgate.url(&format!("/api/v1/webhooks/events/{hex}")))
            .header("content-type", "application/json")
            .header("x-session-api-key", crate::common::WEBHOOK_KEY)
            .body(batch.to_string())
            .send()
            .await
            .expect("events");
        assert_eq!(
            response.status(),
            200,
            "{}",
            response.text().await.unwrap_or_default()
        );
    }
    let (status, ledger) = read(
        &sandgate,
        &token,
        &format!("/api/ledger/conversations/{hex}"),
    )
    .await;
    assert_eq!(status, 200, "{ledger}");
    assert_eq!(ledger["total"]["webhooks"], 2, "{ledger}");
    assert_eq!(ledger["total"]["events"], 3, "{ledger}");
}
