//! The ledger by tag, and who a conversation is billed to (issue 52, point 1): a rollup by
//! a tag's key sums the conversations carrying each of its values, each counted under the
//! tags it had when the count was made; a conversation's row and page name the user, team
//! and key alias of the first virtual key that called for it, whoever calls after.

use serde_json::{Value, json};

use crate::admin::{login, start};
use crate::common::{Backend, Sandgate, file_with};
use crate::gateway_keys::{chat, generate, post, send};
use crate::gateway_orgs::one_a_call;
use crate::model_gateway::{FakeUpstream, MASTER_KEY};

async fn read(sandgate: &Sandgate, token: &str, path: &str) -> (reqwest::StatusCode, Value) {
    send(sandgate.client.get(sandgate.url(path)).bearer_auth(token)).await
}

/// The conversation `id` in the catalog, with `tags`, at `updated_at`.
async fn tagged(sandgate: &Sandgate, id: &str, updated_at: &str, tags: Value) {
    let mut body = crate::common::conversation(id, updated_at, "running");
    body["tags"] = tags;
    sandgate.deliver_ok(&body).await;
}

/// The rows of the rollup at `path`, by id, once `ready` holds of them (counts are
/// written just after each call ends).
async fn rows_once(
    sandgate: &Sandgate,
    token: &str,
    path: &str,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (status, page) = read(sandgate, token, path).await;
        assert_eq!(status, 200, "{path}: {page}");
        let rows: serde_json::Map<String, Value> = page["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|row| (row["id"].as_str().expect("id").to_owned(), row.clone()))
            .collect();
        let rows = json!({"rows": rows, "total_rows": page["total_rows"]});
        if ready(&rows) || tokio::time::Instant::now() > deadline {
            return rows;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollup_by_tag_and_a_conversation_s_owner() {
    let upstream = FakeUpstream::start().await;
    let config = file_with(&format!(
        "model_list:\n{}",
        one_a_call(&upstream, "gpt", "gpt-4o")
    ));
    let path = config.path().display().to_string();
    let sandgate = start(
        &Backend::embedded(),
        None,
        &["--gateway-config", &path, "--proxy-master-key", MASTER_KEY],
    )
    .await;
    let token = login(&sandgate).await;
    let (status, body) = send(post(
        &sandgate,
        "/team/new",
        MASTER_KEY,
        &json!({"team_id": "team-one"}),
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    let (first, _) = generate(
        &sandgate,
        &json!({"user_id": "user-one", "team_id": "team-one", "key_alias": "first-key"}),
    )
    .await;
    let (second, _) = generate(
        &sandgate,
        &json!({"user_id": "user-two", "key_alias": "second-key"}),
    )
    .await;
    let [a, b, c] = [(); 3].map(|()| crate::common::new_id().replace('-', ""));
    tagged(
        &sandgate,
        &a,
        "2026-11-29T10:00:00Z",
        json!({"project": "alpha", "stage": "prod"}),
    )
    .await;
    tagged(
        &sandgate,
        &b,
        "2026-11-29T10:00:00Z",
        json!({"project": "beta"}),
    )
    .await;
    tagged(
        &sandgate,
        &c,
        "2026-11-29T10:00:00Z",
        json!({"project": "alpha"}),
    )
    .await;
    for (key, conversation) in [(&first, &a), (&first, &a), (&first, &c), (&second, &b)] {
        let (status, body) = chat(&sandgate, key, "gpt", Some(conversation)).await;
        assert_eq!(status, 200, "{body}");
    }
    // The second key naming the first's conversation is refused (issue 51): it neither
    // counts nor becomes the owner.
    let (status, body) = chat(&sandgate, &second, "gpt", Some(&a)).await;
    assert_eq!(status, 403, "{body}");

    let by_project = "/api/ledger/rollup?by=tag:project";
    let rows = rows_once(&sandgate, &token, by_project, |rows| {
        rows["rows"]["alpha"]["calls"] == 3 && rows["rows"]["beta"]["calls"] == 1
    })
    .await;
    assert_eq!(rows["total_rows"], 2, "{rows}");
    let alpha = &rows["rows"]["alpha"];
    assert_eq!(alpha["calls"], 3, "{rows}");
    assert_eq!(alpha["spend"], 3.0, "{rows}");
    // Each conversation's update, counted under its tags as well.
    assert_eq!(alpha["webhooks"], 2, "{rows}");
    assert_eq!(rows["rows"]["beta"]["spend"], 1.0, "{rows}");
    // Another key of the tags: its own values alone.
    let (status, stage) = read(&sandgate, &token, "/api/ledger/rollup?by=tag:stage").await;
    assert_eq!(status, 200, "{stage}");
    assert_eq!(stage["total_rows"], 1, "{stage}");
    assert_eq!(stage["rows"][0]["id"], "prod", "{stage}");
    assert_eq!(stage["rows"][0]["calls"], 2, "{stage}");
    // Paged by value: `after` is a value, as `next` gives it.
    let (_, page) = read(&sandgate, &token, &format!("{by_project}&limit=1")).await;
    assert_eq!(page["next"], "alpha", "{page}");
    let (_, page) = read(&sandgate, &token, &format!("{by_project}&after=alpha")).await;
    assert_eq!(page["rows"][0]["id"], "beta", "{page}");
    assert!(page["next"].is_null(), "{page}");
    // Without the tag's key: refused, naming the parameter.
    for by in ["tag", "tag:"] {
        let (status, refused) =
            read(&sandgate, &token, &format!("/api/ledger/rollup?by={by}")).await;
        assert_eq!(status, 422, "{refused}");
        assert_eq!(
            refused["detail"][0]["loc"],
            json!(["query", "by"]),
            "{refused}"
        );
    }

    // The command, by tag: the key is asked for, and each value is a line.
    let (ok, _, err) = crate::ledger::ledger_cli(&sandgate, &["rollup", "--by", "tag"]).await;
    assert!(!ok && err.contains("tag:<key>"), "{err}");
    let (ok, out, err) =
        crate::ledger::ledger_cli(&sandgate, &["rollup", "--by", "tag:project"]).await;
    assert!(ok, "{err}");
    let lines: Vec<_> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[1].starts_with("\"alpha\",3,3,"), "{out}");
    assert!(lines[2].starts_with("\"beta\",1,1,"), "{out}");

    // Retagged, a conversation counts under its new value from then on.
    tagged(
        &sandgate,
        &c,
        "2026-11-29T10:00:05Z",
        json!({"project": "gamma"}),
    )
    .await;
    let (status, body) = chat(&sandgate, &first, "gpt", Some(&c)).await;
    assert_eq!(status, 200, "{body}");
    let rows = rows_once(&sandgate, &token, by_project, |rows| {
        rows["rows"]["gamma"]["calls"] == 1
    })
    .await;
    assert_eq!(rows["rows"]["gamma"]["calls"], 1, "{rows}");
    // (The refused call, queued before this one, is written by now: it counted nowhere.)
    assert_eq!(rows["rows"]["alpha"]["calls"], 3, "{rows}");
    assert_eq!(rows["rows"]["alpha"]["failed_calls"], 0, "{rows}");
    let (_, page) = read(&sandgate, &token, &format!("/api/ledger/conversations/{a}")).await;
    assert_eq!(page["total"]["calls"], 2, "{page}");
    assert_eq!(page["total"]["failed_calls"], 0, "{page}");

    // Who each conversation is billed to: its first key's user, team and alias.
    let (status, conversations) = read(
        &sandgate,
        &token,
        "/api/ledger/rollup?by=conversation&limit=1000",
    )
    .await;
    assert_eq!(status, 200, "{conversations}");
    let row = |id: &str| {
        conversations["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .find(|row| row["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} in {conversations}"))
    };
    let (row_a, row_b) = (row(&a), row(&b));
    assert_eq!(row_a["user_id"], "user-one", "{row_a}");
    assert_eq!(row_a["team_id"], "team-one", "{row_a}");
    assert_eq!(row_a["key_alias"], "first-key", "{row_a}");
    assert_eq!(row_b["user_id"], "user-two", "{row_b}");
    assert!(row_b.get("team_id").is_none(), "{row_b}");
    let (_, page) = read(&sandgate, &token, &format!("/api/ledger/conversations/{b}")).await;
    assert_eq!(page["key_alias"], "second-key", "{page}");
    assert_eq!(page["user_id"], "user-two", "{page}");
    // …and in the export.
    let csv = sandgate
        .client
        .get(sandgate.url("/api/ledger/rollup?by=conversation&format=csv&limit=1000"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("csv")
        .text()
        .await
        .expect("csv");
    let header = csv.lines().next().unwrap_or_default();
    assert!(header.ends_with(",user_id,team_id,key_alias"), "{header}");
    let line = csv
        .lines()
        .find(|line| line.contains(&a))
        .expect("a's line");
    assert!(
        line.ends_with(",\"user-one\",\"team-one\",\"first-key\""),
        "{line}"
    );
}
