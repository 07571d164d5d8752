//! One tenant cannot make another pay for its data (issue 40): large records another
//! tenant posts naming one's conversation as their parent, or carrying one's tag, are
//! never read for one's own reads and queries; and large records shorten a list page,
//! never fail it. On Redis, the other tenant's records are then corrupted in place (their
//! heads kept): a read that decoded one would answer 503, so a 200 proves none was read.

use serde_json::{Value, json};

use crate::common::{
    Backend, OTHER_WEBHOOK_KEY, RUNTIME_KEY, Sandgate, WEBHOOK_KEY, conversation, new_id,
};
use crate::on_both_backends;

const MB: usize = 1024 * 1024;
/// The other tenant's records: enough to have cost a reader seconds before.
const FLOOD: usize = 6;

/// A record of about `size` bytes (its title carries them).
fn large(id: &str, size: usize) -> Value {
    let mut body = conversation(id, "2026-03-01T12:00:00Z", "running");
    body["title"] = "x".repeat(size).into();
    body
}

async fn deliver(server: &Sandgate, key: &str, body: &Value) {
    let response = server.deliver(key, body.to_string()).await;
    assert_eq!(
        response.status(),
        200,
        "{}",
        response.text().await.unwrap_or_default()
    );
}

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

fn ids(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|item| item["id"].as_str().expect("id").to_owned())
        .collect()
}

/// On Redis, replaces each record's JSON with bytes that do not decode, keeping its head.
async fn corrupt_records(backend: &Backend, ids: &[String]) {
    let Backend::Redis(redis) = backend else {
        return;
    };
    let mut corrupted = 0;
    for mut connection in redis.node_connections().await {
        for id in ids {
            let key = format!("sandgate:conv:{{{id}}}");
            // On a cluster, a master holding another slot answers MOVED: not here.
            let here: bool = ::redis::cmd("EXISTS")
                .arg(&key)
                .query_async(&mut connection)
                .await
                .unwrap_or(false);
            if here {
                ::redis::cmd("HSET")
                    .arg(&key)
                    .arg("d")
                    .arg("not a record")
                    .query_async::<()>(&mut connection)
                    .await
                    .expect("HSET");
                corrupted += 1;
            }
        }
    }
    assert_eq!(corrupted, ids.len(), "every record corrupted");
}

async fn another_tenants_children_are_never_read_with_a_record(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let parent = new_id();
    deliver(
        &server,
        WEBHOOK_KEY,
        &conversation(&parent, "2026-03-01T12:00:00Z", "running"),
    )
    .await;
    let child = new_id();
    let mut body = conversation(&child, "2026-03-01T12:00:01Z", "running");
    body["parent_conversation_id"] = parent.clone().into();
    deliver(&server, WEBHOOK_KEY, &body).await;
    let flood: Vec<String> = (0..FLOOD).map(|_| new_id()).collect();
    for id in &flood {
        let mut body = large(id, 4 * MB);
        body["parent_conversation_id"] = parent.clone().into();
        deliver(&server, OTHER_WEBHOOK_KEY, &body).await;
    }
    corrupt_records(&backend, &flood).await;
    for header in [
        ("x-session-api-key", WEBHOOK_KEY),
        ("x-api-key", RUNTIME_KEY),
    ] {
        let (status, record) =
            get(&server, &format!("/api/v1/conversations/{parent}"), header).await;
        assert_eq!(status, 200, "{header:?}: {record}");
        assert_eq!(record["sub_conversation_ids"], json!([child]), "{header:?}");
        let (status, page) = get(
            &server,
            &format!("/api/v1/conversations?parent_id={parent}"),
            header,
        )
        .await;
        assert_eq!(
            (status, ids(&page)),
            (200, vec![child.clone()]),
            "{header:?}"
        );
    }
}

async fn a_tag_query_reads_only_the_tenants_own_records(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let own = new_id();
    let mut body = conversation(&own, "2026-03-01T12:00:00Z", "running");
    body["tags"] = json!({"team": "a"});
    deliver(&server, WEBHOOK_KEY, &body).await;
    let flood: Vec<String> = (0..FLOOD).map(|_| new_id()).collect();
    for id in &flood {
        let mut body = large(id, 4 * MB);
        body["tags"] = json!({"team": "a"});
        deliver(&server, OTHER_WEBHOOK_KEY, &body).await;
    }
    corrupt_records(&backend, &flood).await;
    let (status, page) = get(
        &server,
        "/api/v1/conversations?tag=team:a",
        ("x-session-api-key", WEBHOOK_KEY),
    )
    .await;
    assert_eq!((status, ids(&page)), (200, vec![own]), "{page}");
}

/// Nine 8 MB records weigh more than one gRPC message may (64 MiB): a page of them used to
/// fail every caller listing with 400. Now pages are shorter, and paging reaches them all.
async fn large_records_shorten_a_page_and_never_fail_it(backend: Backend) {
    let limit = (9 * MB).to_string();
    let server = Sandgate::start_with(&backend, &["--body-limit", &limit]).await;
    let mut all: Vec<String> = (0..9).map(|_| new_id()).collect();
    for id in &all {
        deliver(&server, WEBHOOK_KEY, &large(id, 8 * MB)).await;
    }
    all.sort();
    let mut seen = Vec::new();
    let mut pages = 0;
    let mut page_id: Option<String> = None;
    loop {
        let path = match &page_id {
            Some(page) => format!("/api/v1/conversations?limit=100&page_id={page}"),
            None => "/api/v1/conversations?limit=100".to_owned(),
        };
        let (status, page) = get(&server, &path, ("x-api-key", RUNTIME_KEY)).await;
        assert_eq!(status, 200, "page {pages}: {}", page["detail"]);
        assert!(!ids(&page).is_empty(), "a page makes progress");
        seen.extend(ids(&page));
        pages += 1;
        match page["next_page_id"].as_str() {
            Some(next) => page_id = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, all);
    assert!(pages > 1, "one page of 72 MB");
}

on_both_backends!(
    another_tenants_children_are_never_read_with_a_record,
    a_tag_query_reads_only_the_tenants_own_records,
    large_records_shorten_a_page_and_never_fail_it,
);
