//! What an attacker found, round two: an open redirect, and tenants reaching each other's
//! conversations through the tag index and parent links. On both stores.

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{
    Backend, OTHER_WEBHOOK_KEY, RUNTIME_KEY, Sandgate, WEBHOOK_KEY, conversation, new_id,
};
use crate::on_both_backends;

async fn get(server: &Sandgate, path: &str, header: (&str, &str)) -> (u16, Value) {
    let response = server
        .client
        .get(server.url(path))
        .header(header.0, header.1)
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON"))
}

fn ids(page: &Value) -> Vec<&str> {
    page["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|item| item["id"].as_str().expect("id"))
        .collect()
}

/// The `Location` of a raw `GET path` (raw, so that a backslash reaches the server as sent).
async fn redirect_target(server: &Sandgate, path: &str) -> (String, Option<String>) {
    let mut stream = tokio::net::TcpStream::connect(server.address)
        .await
        .expect("connect");
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: sandgate\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("read");
    let status = answer.split(' ').nth(1).unwrap_or_default().to_owned();
    let location = answer
        .lines()
        .find_map(|line| line.strip_prefix("location: ").map(str::to_owned));
    (status, location)
}

async fn trailing_slash_redirects_stay_on_this_host(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    for (path, expected) in [
        ("//evil.example/", "/evil.example"),
        ("/\\evil.example/", "/evil.example"),
        ("///\\/evil.example/x/", "/evil.example/x"),
        (
            "/api/v1/conversations/?limit=1",
            "/api/v1/conversations?limit=1",
        ),
    ] {
        let (status, location) = redirect_target(&server, path).await;
        assert_eq!(status, "307", "{path}");
        assert_eq!(location.as_deref(), Some(expected), "{path}");
    }
}

async fn a_tag_query_neither_crosses_nor_changes_the_index(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let id = new_id();
    let mut body = conversation(&id, "2026-03-01T12:00:00Z", "running");
    body["tags"] = json!({"team": "x=y"});
    server.deliver_ok(&body).await;
    // `team=x` : `y` would name the index of `team` : `x=y` if the key were not checked.
    let (status, _) = get(
        &server,
        "/api/v1/conversations?tag=team%3Dx:y",
        ("x-session-api-key", OTHER_WEBHOOK_KEY),
    )
    .await;
    assert_eq!(status, 422);
    let (status, page) = get(
        &server,
        "/api/v1/conversations?tag=team:x%3Dy",
        ("x-session-api-key", WEBHOOK_KEY),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(ids(&page), [id.as_str()]);
}

async fn a_stale_member_is_skipped_by_readers_and_dropped_by_its_writer(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let id = new_id();
    let mut body = conversation(&id, "2026-03-01T12:00:00Z", "running");
    body["tags"] = json!({"team": "alpha"});
    server.deliver_ok(&body).await;
    let patched = server
        .client
        .patch(server.url(&format!("/api/v1/conversations/{id}")))
        .header("x-api-key", RUNTIME_KEY)
        .json(&json!({"tags": {"team": "beta"}}))
        .send()
        .await
        .expect("request");
    assert_eq!(patched.status(), 200);
    if let Backend::Redis(redis) = &backend {
        // The writer that moved the record dropped the index entry it left behind, before
        // any reader came by.
        // Wherever the index's keys are (a cluster has it in buckets).
        for mut connection in redis.node_connections().await {
            let keys: Vec<String> = ::redis::cmd("KEYS")
                .arg("sandgate:idx:*tag:team=alpha*")
                .query_async(&mut connection)
                .await
                .expect("keys");
            for key in keys {
                let members: Vec<String> = ::redis::cmd("ZRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut connection)
                    .await
                    .expect("zrange");
                assert!(members.is_empty(), "{key}: {members:?}");
            }
        }
    }
    let runtime = ("x-api-key", RUNTIME_KEY);
    let (_, alpha) = get(&server, "/api/v1/conversations?tag=team:alpha", runtime).await;
    assert!(ids(&alpha).is_empty());
    let (_, beta) = get(&server, "/api/v1/conversations?tag=team:beta", runtime).await;
    assert_eq!(ids(&beta), [id.as_str()]);
}

async fn another_tenant_cannot_adopt_a_conversation_as_its_child(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let parent = new_id();
    server
        .deliver_ok(&conversation(&parent, "2026-03-01T12:00:00Z", "running"))
        .await;
    let own_child = new_id();
    let mut body = conversation(&own_child, "2026-03-01T12:00:01Z", "running");
    body["parent_conversation_id"] = parent.clone().into();
    server.deliver_ok(&body).await;
    // Another tenant names the parent.
    let intruder = new_id();
    let mut body = conversation(&intruder, "2026-03-01T12:00:02Z", "running");
    body["parent_conversation_id"] = parent.clone().into();
    assert_eq!(
        server
            .deliver(OTHER_WEBHOOK_KEY, body.to_string())
            .await
            .status(),
        200
    );
    for header in [
        ("x-api-key", RUNTIME_KEY),
        ("x-session-api-key", WEBHOOK_KEY),
    ] {
        let (_, record) = get(&server, &format!("/api/v1/conversations/{parent}"), header).await;
        assert_eq!(
            record["sub_conversation_ids"],
            json!([own_child]),
            "{header:?}"
        );
        let (_, page) = get(
            &server,
            &format!("/api/v1/conversations?parent_id={parent}"),
            header,
        )
        .await;
        assert_eq!(ids(&page), [own_child.as_str()], "{header:?}");
    }
}

on_both_backends!(
    trailing_slash_redirects_stay_on_this_host,
    a_tag_query_neither_crosses_nor_changes_the_index,
    a_stale_member_is_skipped_by_readers_and_dropped_by_its_writer,
    another_tenant_cannot_adopt_a_conversation_as_its_child,
);
