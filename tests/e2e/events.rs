//! The agent-server's event batches over REST (`POST /api/v1/webhooks/events/{id}`) and
//! their reads (`GET /api/v1/conversations/{id}/events`), on both stores.

use serde_json::{Value, json};

use crate::common::{
    Backend, OTHER_WEBHOOK_KEY, RUNTIME_KEY, Sandgate, WEBHOOK_KEY, conversation, new_id,
};
use crate::on_both_backends;

/// A naive ISO timestamp `seconds` after a minute ago, as the agent-server writes them
/// (events older than the retention age are never listed, so tests use recent ones).
fn at(seconds: i64) -> String {
    static BASE: std::sync::LazyLock<i64> = std::sync::LazyLock::new(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs() as i64;
        now - now % 60 - 60
    });
    speedate::DateTime::from_timestamp(*BASE + seconds, 0)
        .expect("a date")
        .to_string()
}

fn message(id: &str, timestamp: &str, text: &str) -> Value {
    json!({
        "kind": "MessageEvent", "id": id, "timestamp": timestamp, "source": "user",
        "llm_message": {"role": "user", "content": [{"type": "text", "text": text}]},
        "activated_skills": [], "extended_content": [], "sender": null,
    })
}

fn state_update(id: &str, timestamp: &str, key: &str, value: Value) -> Value {
    json!({
        "kind": "ConversationStateUpdateEvent", "id": id, "timestamp": timestamp,
        "source": "environment", "key": key, "value": value,
    })
}

/// The conversation id as the agent-server puts it in the path: 32 hex digits.
fn hex(id: &str) -> String {
    id.replace('-', "")
}

async fn post_events(server: &Sandgate, key: &str, id: &str, body: &Value) -> (u16, Value) {
    let response = server
        .client
        .post(server.url(&format!("/api/v1/webhooks/events/{}", hex(id))))
        .header("content-type", "application/json")
        .header("x-session-api-key", key)
        .body(body.to_string())
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON"))
}

async fn read_events(
    server: &Sandgate,
    header: (&str, &str),
    id: &str,
    query: &str,
) -> (u16, Value) {
    let response = server
        .client
        .get(server.url(&format!("/api/v1/conversations/{id}/events{query}")))
        .header(header.0, header.1)
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON"))
}

fn event_ids(page: &Value) -> Vec<&str> {
    page["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|event| event["id"].as_str().expect("id"))
        .collect()
}

async fn batches_are_stored_once_in_order_and_read_back(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let id = new_id();
    server
        .deliver_ok(&conversation(&id, "2026-03-01T12:00:00Z", "running"))
        .await;
    let batch = json!([
        message("e2", &at(2), "second"),
        message("e1", &at(1), "first"),
        state_update("e3", &at(2), "stats", json!({})),
    ]);
    let (status, answer) = post_events(&server, WEBHOOK_KEY, &id, &batch).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer,
        json!({"success": true, "stored": 3, "duplicates": 0, "rejected": 0})
    );
    // The sender re-sends a batch whose answer it lost: stored once.
    let (_, answer) = post_events(&server, WEBHOOK_KEY, &id, &batch).await;
    assert_eq!(answer["duplicates"], 3);

    let runtime = ("x-api-key", RUNTIME_KEY);
    let (status, page) = read_events(&server, runtime, &id, "").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(event_ids(&page), ["e1", "e2", "e3"]);
    assert_eq!(page["items"][0], message("e1", &at(1), "first"));
    assert_eq!(page["next_page_id"], Value::Null);

    let (_, newest) = read_events(&server, runtime, &id, "?order=desc&limit=2").await;
    assert_eq!(event_ids(&newest), ["e3", "e2"]);
    let next = newest["next_page_id"].as_str().expect("a next page");
    let (_, rest) = read_events(
        &server,
        runtime,
        &id,
        &format!("?order=desc&limit=2&page_id={next}"),
    )
    .await;
    assert_eq!(event_ids(&rest), ["e1"]);
    assert_eq!(rest["next_page_id"], Value::Null);

    let (_, messages) = read_events(&server, runtime, &id, "?kind=MessageEvent").await;
    assert_eq!(event_ids(&messages), ["e1", "e2"]);
    // The sender's own key reads them too.
    let (status, own) = read_events(&server, ("x-session-api-key", WEBHOOK_KEY), &id, "").await;
    assert_eq!((status, event_ids(&own).len()), (200, 3));

    let record: Value = server.conversation(&id).await.json().await.expect("JSON");
    assert_eq!(record["sandgate"]["event_count"], 3);
    assert_eq!(record["sandgate"]["last_event_at"], format!("{}Z", at(2)));
}

async fn bad_events_are_dead_letters_and_never_stall_the_batch(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let id = new_id();
    let batch = json!([
        message("ok", &at(1), "fine"),
        {"kind": "NoSuchEvent", "id": "x"},
        "not an event",
        {"kind": "MessageEvent", "id": "no-message", "source": "user"},
    ]);
    let (status, answer) = post_events(&server, WEBHOOK_KEY, &id, &batch).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer,
        json!({"success": true, "stored": 1, "duplicates": 0, "rejected": 3})
    );
    let (_, page) = read_events(&server, ("x-api-key", RUNTIME_KEY), &id, "").await;
    assert_eq!(event_ids(&page), ["ok"]);

    // Only a body that is not a list, or a bad key, is refused.
    let (status, answer) =
        post_events(&server, WEBHOOK_KEY, &id, &json!({"kind": "MessageEvent"})).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["detail"][0]["type"], "list_type");
    let (status, _) = post_events(&server, "not-a-key", &id, &json!([])).await;
    assert_eq!(status, 401);
    let (status, answer) = post_events(&server, WEBHOOK_KEY, "not-a-uuid", &json!([])).await;
    assert_eq!(status, 422, "{answer}");
    let malformed = server
        .client
        .post(server.url(&format!("/api/v1/webhooks/events/{}", hex(&id))))
        .header("content-type", "application/json")
        .header("x-session-api-key", WEBHOOK_KEY)
        .body("[{\"kind\": ")
        .send()
        .await
        .expect("request");
    assert_eq!(malformed.status(), 422);
}

async fn another_sender_neither_posts_nor_reads_them(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let id = new_id();
    server
        .deliver_ok(&conversation(&id, "2026-03-01T12:00:00Z", "running"))
        .await;
    let batch = json!([message("mine", &at(1), "hello")]);
    let (status, _) = post_events(&server, OTHER_WEBHOOK_KEY, &id, &batch).await;
    assert_eq!(status, 401);
    post_events(&server, WEBHOOK_KEY, &id, &batch).await;
    let (status, _) = read_events(&server, ("x-session-api-key", OTHER_WEBHOOK_KEY), &id, "").await;
    assert_eq!(status, 404);

    // A conversation with a record and no events lists none.
    let id_without_events = new_id();
    server
        .deliver_ok(&conversation(
            &id_without_events,
            "2026-03-01T12:00:00Z",
            "idle",
        ))
        .await;
    let (status, page) = read_events(
        &server,
        ("x-session-api-key", WEBHOOK_KEY),
        &id_without_events,
        "",
    )
    .await;
    assert_eq!((status, event_ids(&page).len()), (200, 0));
}

/// Squatting: another sender posts events for a conversation id before its owner's first
/// delivery. They are held until the record arrives, then dropped: the owner is never
/// locked out of its own conversation, and never sees or counts the squatter's events.
async fn events_posted_before_the_record_are_held_for_its_owner(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let squatted = new_id();
    let squat = json!([message("squat", &at(1), "not yours")]);
    let (status, _) = post_events(&server, OTHER_WEBHOOK_KEY, &squatted, &squat).await;
    assert_eq!(status, 200);
    server
        .deliver_ok(&conversation(&squatted, "2026-03-01T12:00:00Z", "running"))
        .await;
    let own = json!([message("mine", &at(2), "hello")]);
    let (status, answer) = post_events(&server, WEBHOOK_KEY, &squatted, &own).await;
    assert_eq!((status, &answer["stored"]), (200, &json!(1)), "{answer}");
    // The squatter posts no more, and reads nothing.
    let (status, _) = post_events(&server, OTHER_WEBHOOK_KEY, &squatted, &squat).await;
    assert_eq!(status, 401);
    let (status, _) = read_events(
        &server,
        ("x-session-api-key", OTHER_WEBHOOK_KEY),
        &squatted,
        "",
    )
    .await;
    assert_eq!(status, 404);
    for header in [
        ("x-session-api-key", WEBHOOK_KEY),
        ("x-api-key", RUNTIME_KEY),
    ] {
        let (status, page) = read_events(&server, header, &squatted, "").await;
        assert_eq!(
            (status, event_ids(&page)),
            (200, vec!["mine"]),
            "{header:?}"
        );
    }
    let record: Value = server
        .conversation(&squatted)
        .await
        .json()
        .await
        .expect("JSON");
    assert_eq!(record["sandgate"]["event_count"], 1);

    // The owner's own early events are adopted with its record.
    let early = new_id();
    let (status, _) = post_events(&server, WEBHOOK_KEY, &early, &own).await;
    assert_eq!(status, 200);
    server
        .deliver_ok(&conversation(&early, "2026-03-01T12:00:00Z", "running"))
        .await;
    let (status, page) = read_events(&server, ("x-session-api-key", WEBHOOK_KEY), &early, "").await;
    assert_eq!((status, event_ids(&page)), (200, vec!["mine"]));
}

async fn state_updates_move_the_record_unless_it_is_newer(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let id = new_id();
    server
        .deliver_ok(&conversation(&id, "2026-03-01T12:00:00Z", "running"))
        .await;
    let batch = json!([
        state_update("s1", &at(5), "execution_status", json!("paused")),
        state_update("s2", &at(6), "title", json!("Fix the build")),
    ]);
    let (status, _) = post_events(&server, WEBHOOK_KEY, &id, &batch).await;
    assert_eq!(status, 200);
    let record: Value = server.conversation(&id).await.json().await.expect("JSON");
    assert_eq!(record["execution_status"], "paused");
    assert_eq!(record["title"], "Fix the build");
    let lifecycle: Vec<&str> = record["sandgate"]["lifecycle"]
        .as_array()
        .expect("lifecycle")
        .iter()
        .map(|step| step["kind"].as_str().expect("kind"))
        .collect();
    assert_eq!(lifecycle, ["start", "pause"]);

    // A newer delivery, then an older event: the record stays as delivered.
    server
        .deliver_ok(&conversation(&id, &format!("{}Z", at(60)), "running"))
        .await;
    let stale = json!([state_update(
        "s3",
        &at(30),
        "execution_status",
        json!("finished")
    )]);
    post_events(&server, WEBHOOK_KEY, &id, &stale).await;
    let record: Value = server.conversation(&id).await.json().await.expect("JSON");
    assert_eq!(record["execution_status"], "running");
}

async fn secrets_in_events_are_redacted_before_they_are_kept(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let id = new_id();
    let batch = json!([state_update(
        "full",
        &at(1),
        "full_state",
        json!({
            "agent": {"kind": "Agent", "llm": {"model": "gpt-4o", "api_key": "sk-live-secret",
                      "base_url": "https://user:pa55word@llm.internal/v1"}},
            "secret_registry": {"secret_sources": {"GH": {"kind": "StaticSecret", "value": "ghp_secret"}}},
        }),
    )]);
    post_events(&server, WEBHOOK_KEY, &id, &batch).await;
    let (_, page) = read_events(&server, ("x-api-key", RUNTIME_KEY), &id, "").await;
    let text = page.to_string();
    for secret in ["sk-live-secret", "pa55word", "ghp_secret"] {
        assert!(!text.contains(secret), "{secret} kept in {text}");
    }
    assert_eq!(
        page["items"][0]["value"]["agent"]["llm"]["base_url"],
        "https://user:***@llm.internal/v1"
    );
}

async fn retention_keeps_the_newest_events(backend: Backend) {
    let server = Sandgate::start_with(&backend, &["--events-per-conversation", "2"]).await;
    let id = new_id();
    let batch: Vec<Value> = (1..=4)
        .map(|n| message(&format!("e{n}"), &at(n), "x"))
        .collect();
    let (status, answer) = post_events(&server, WEBHOOK_KEY, &id, &Value::from(batch)).await;
    assert_eq!((status, &answer["stored"]), (200, &json!(4)));
    let (_, page) = read_events(&server, ("x-api-key", RUNTIME_KEY), &id, "").await;
    assert_eq!(event_ids(&page), ["e3", "e4"]);
}

on_both_backends!(
    batches_are_stored_once_in_order_and_read_back,
    bad_events_are_dead_letters_and_never_stall_the_batch,
    another_sender_neither_posts_nor_reads_them,
    events_posted_before_the_record_are_held_for_its_owner,
    state_updates_move_the_record_unless_it_is_newer,
    secrets_in_events_are_redacted_before_they_are_kept,
    retention_keeps_the_newest_events,
);
