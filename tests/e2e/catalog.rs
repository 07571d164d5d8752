//! Catalog reads, tags, profiles, limits and health over REST, on both stores.

use serde_json::{Value, json};

use crate::common::{
    Backend, OTHER_WEBHOOK_KEY, RUNTIME_KEY, Sandgate, WEBHOOK_KEY, conversation, new_id,
    until_status,
};
use crate::on_both_backends;

async fn get_json(server: &Sandgate, path: &str, header: (&str, &str)) -> (u16, Value) {
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

async fn children_are_derived_and_listed_by_parent(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let parent = new_id();
    let mut children = vec![new_id(), new_id()];
    children.sort();
    let mut body = conversation(&parent, "2026-03-01T12:00:00Z", "running");
    // What a payload claims is not what the catalog says.
    body["sub_conversation_ids"] = json!([new_id()]);
    server.deliver_ok(&body).await;
    for child in &children {
        let mut body = conversation(child, "2026-03-01T12:00:01Z", "running");
        body["parent_conversation_id"] = parent.clone().into();
        server.deliver_ok(&body).await;
    }
    let (status, record) = get_json(
        &server,
        &format!("/api/v1/conversations/{parent}"),
        ("x-api-key", RUNTIME_KEY),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(record["sub_conversation_ids"], json!(children));
    let (_, page) = get_json(
        &server,
        &format!("/api/v1/conversations?parent_id={parent}"),
        ("x-api-key", RUNTIME_KEY),
    )
    .await;
    assert_eq!(ids(&page), children);
}

async fn tags_filter_lists_and_patch_replaces_them(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let id = new_id();
    let mut body = conversation(&id, "2026-03-01T12:00:00Z", "running");
    body["tags"] = json!({"team": "alpha", "env": "prod"});
    server.deliver_ok(&body).await;
    let key = ("x-session-api-key", WEBHOOK_KEY);
    let (_, page) = get_json(
        &server,
        "/api/v1/conversations?tag=team:alpha&tag=env:prod",
        key,
    )
    .await;
    assert_eq!(ids(&page), std::slice::from_ref(&id));

    let patch = |tags: Value| {
        server
            .client
            .patch(server.url(&format!("/api/v1/conversations/{id}")))
            .header("x-session-api-key", WEBHOOK_KEY)
            .json(&json!({ "tags": tags }))
            .send()
    };
    let response = patch(json!({"team": "beta"})).await.expect("patch");
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.json::<Value>().await.expect("JSON")["tags"],
        json!({"team": "beta"})
    );
    let (_, page) = get_json(&server, "/api/v1/conversations?tag=team:alpha", key).await;
    assert!(
        ids(&page).is_empty(),
        "the old tag no longer lists it: {page}"
    );
    let (_, page) = get_json(&server, "/api/v1/conversations?tag=team:beta", key).await;
    assert_eq!(ids(&page), std::slice::from_ref(&id));

    let response = patch(json!({"my-tag": "x"})).await.expect("patch");
    assert_eq!(response.status(), 422);
    let error = &response.json::<Value>().await.expect("JSON")["detail"][0];
    assert_eq!(error["type"], "value_error");
    assert_eq!(error["loc"], json!(["body", "tags"]));
    let response = patch(json!({"team": "x".repeat(257)}))
        .await
        .expect("patch");
    assert_eq!(response.status(), 422);
    let response = patch(json!({"team": 5})).await.expect("patch");
    assert_eq!(response.status(), 422);
    assert_eq!(
        response.json::<Value>().await.expect("JSON")["detail"][0]["loc"],
        json!(["body", "tags", "team"])
    );
}

async fn readers_see_only_what_they_may(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let id = new_id();
    server
        .deliver_ok(&conversation(&id, "2026-03-01T12:00:00Z", "running"))
        .await;
    let path = format!("/api/v1/conversations/{id}");
    assert_eq!(
        get_json(&server, &path, ("x-session-api-key", WEBHOOK_KEY))
            .await
            .0,
        200
    );
    assert_eq!(
        get_json(&server, &path, ("x-api-key", RUNTIME_KEY)).await.0,
        200
    );
    assert_eq!(
        get_json(&server, &path, ("x-session-api-key", OTHER_WEBHOOK_KEY))
            .await
            .0,
        404
    );
    let (status, body) = get_json(&server, &path, ("x-api-key", "wrong")).await;
    assert_eq!(
        (status, body),
        (401, json!({"detail": "provide a valid API key"}))
    );
    let (status, _) = get_json(&server, &path, ("x-other", "nothing")).await;
    assert_eq!(status, 401);
    let (_, page) = get_json(
        &server,
        "/api/v1/conversations",
        ("x-session-api-key", OTHER_WEBHOOK_KEY),
    )
    .await;
    assert!(
        ids(&page).is_empty(),
        "another sender lists nothing of ours: {page}"
    );
    let (status, body) = get_json(
        &server,
        "/api/v1/conversations/not-a-uuid",
        ("x-api-key", RUNTIME_KEY),
    )
    .await;
    assert_eq!(status, 422, "{body}");
}

async fn lists_are_paged_in_id_order(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let mut all: Vec<String> = (0..5).map(|_| new_id()).collect();
    for id in &all {
        server
            .deliver_ok(&conversation(id, "2026-03-01T12:00:00Z", "idle"))
            .await;
    }
    all.sort();
    let mut seen = Vec::new();
    let mut page_id: Option<String> = None;
    loop {
        let path = match &page_id {
            Some(page) => format!("/api/v1/conversations?limit=2&page_id={page}"),
            None => "/api/v1/conversations?limit=2".to_owned(),
        };
        let (status, page) = get_json(&server, &path, ("x-api-key", RUNTIME_KEY)).await;
        assert_eq!(status, 200);
        assert!(ids(&page).len() <= 2);
        seen.extend(ids(&page));
        match page["next_page_id"].as_str() {
            Some(next) => page_id = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, all);
}

async fn llm_profiles_are_saved_per_sender(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let path = server.url("/api/v1/settings/profiles/team-a");
    let profile = json!({
        "preserve_existing_api_key": true,
        "llm": {"model": "gateway_proxy/claude", "base_url": "https://gw.example", "extra_headers": {"x-team": "a"}}
    });
    let response = server
        .client
        .post(&path)
        .header("x-session-api-key", WEBHOOK_KEY)
        .json(&profile)
        .send()
        .await
        .expect("post");
    assert_eq!(response.status(), 200);
    let saved: Value = response.json().await.expect("JSON");
    assert_eq!(saved["llm"]["extra_headers"], json!({"x-team": "a"}));
    let (status, fetched) = get_json(
        &server,
        "/api/v1/settings/profiles/team-a",
        ("x-session-api-key", WEBHOOK_KEY),
    )
    .await;
    assert_eq!((status, &fetched), (200, &saved));
    let (status, _) = get_json(
        &server,
        "/api/v1/settings/profiles/team-a",
        ("x-session-api-key", OTHER_WEBHOOK_KEY),
    )
    .await;
    assert_eq!(status, 404);

    let reserved = json!({"llm": {"model": "m", "extra_headers": {"X-Gateway-Session-Id": "abc"}}});
    let response = server
        .client
        .post(&path)
        .header("x-session-api-key", WEBHOOK_KEY)
        .json(&reserved)
        .send()
        .await
        .expect("post");
    assert_eq!(response.status(), 422);
    let error = &response.json::<Value>().await.expect("JSON")["detail"][0];
    assert_eq!(
        error["loc"],
        json!(["body", "llm", "extra_headers", "X-Gateway-Session-Id"])
    );
    let response = server
        .client
        .post(&path)
        .json(&profile)
        .send()
        .await
        .expect("post");
    assert_eq!(response.status(), 401);
    // Without a key, a body of the wrong shape is refused for the key, not the shape;
    // one that is not JSON at all gets 422 first, as the reference does.
    for (body, status) in [(r#"{"llm": 1}"#, 401), ("{", 422)] {
        let response = server
            .client
            .post(&path)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("post");
        assert_eq!(response.status(), status, "{body}");
    }
    let response = server
        .client
        .post(&path)
        .header("x-session-api-key", WEBHOOK_KEY)
        .json(&json!({"llm": {"base_url": "x"}}))
        .send()
        .await
        .expect("post");
    assert_eq!(response.status(), 422);
    let error = &response.json::<Value>().await.expect("JSON")["detail"][0];
    assert_eq!(error["loc"], json!(["body", "llm", "model"]));
    assert_eq!(error["type"], "missing");
}

async fn health_reports_the_store(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let response = server
        .client
        .get(server.url("/health"))
        .send()
        .await
        .expect("health");
    assert_eq!(response.status(), 200);
    if let Backend::Redis(mut redis) = backend {
        let within = redis.failure_detection();
        redis.kill().await;
        let health = until_status(within, 503, || async {
            let response = server.client.get(server.url("/health")).send().await;
            response.expect("health").status().as_u16()
        })
        .await;
        assert_eq!(health.last(), Some(&503), "{health:?}");
        let deliveries = until_status(within, 503, || async {
            let body = conversation(&new_id(), "2026-03-01T12:00:00Z", "idle");
            server
                .deliver(WEBHOOK_KEY, body.to_string())
                .await
                .status()
                .as_u16()
        })
        .await;
        // A cluster's surviving masters take the deliveries of their slots until they
        // judge the cluster down; none is ever a 500.
        assert_eq!(
            deliveries.last(),
            Some(&503),
            "a delivery that cannot be stored is not acknowledged: {deliveries:?}"
        );
        assert!(deliveries.iter().all(|status| [200, 503].contains(status)));
    }
}

/// Every record the webhook accepts reads back whole, however deep: a reader that
/// re-parsed with serde_json's 128-level limit returned `{"sandgate": …}` alone.
async fn a_deep_record_reads_back_whole(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let id = new_id();
    let mut nested = json!({"leaf": true});
    for _ in 0..200 {
        nested = json!({"a": nested});
    }
    let mut body = conversation(&id, "2026-03-01T12:00:00Z", "running");
    body["agent_state"] = nested.clone();
    server.deliver_ok(&body).await;
    // Deeper than serde_json reads by default, so read without its limit.
    let read = |path: String| {
        let request = server
            .client
            .get(server.url(&path))
            .header("x-api-key", RUNTIME_KEY)
            .send();
        async move {
            let response = request.await.expect("request");
            assert_eq!(response.status(), 200);
            let bytes = response.bytes().await.expect("body");
            sandgate_proto::json::from_stored::<Value>(&bytes).expect("JSON")
        }
    };
    let record = read(format!("/api/v1/conversations/{id}")).await;
    assert_eq!(record["agent_state"], nested);
    assert_eq!(record["id"], id.as_str());
    let page = read("/api/v1/conversations?limit=1000".to_owned()).await;
    let listed = page["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|item| item["id"] == id.as_str())
        .expect("listed");
    assert_eq!(listed["agent_state"], nested);
}

/// A value the models coerce reads back in its documented type, as the real receiver's
/// `model_dump(mode="json")` stores it: `"500"` for an integer, `"yes"` for a boolean, an
/// epoch for a date-time.
async fn coerced_values_read_back_in_their_documented_types(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let id = new_id();
    let mut body = conversation(&id, "2026-03-01T12:00:00Z", "running");
    body["max_iterations"] = json!("500");
    body["stuck_detection"] = json!("yes");
    body["created_at"] = json!(1_772_366_400);
    server.deliver_ok(&body).await;
    let (status, record) = get_json(
        &server,
        &format!("/api/v1/conversations/{id}"),
        ("x-api-key", RUNTIME_KEY),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(record["max_iterations"], 500, "{record}");
    assert_eq!(record["stuck_detection"], true);
    assert_eq!(record["created_at"], "2026-03-01T12:00:00Z");
}

on_both_backends!(
    coerced_values_read_back_in_their_documented_types,
    a_deep_record_reads_back_whole,
    children_are_derived_and_listed_by_parent,
    tags_filter_lists_and_patch_replaces_them,
    readers_see_only_what_they_may,
    lists_are_paged_in_id_order,
    llm_profiles_are_saved_per_sender,
    health_reports_the_store,
);

#[tokio::test]
async fn bodies_over_the_limit_get_413_in_json() {
    let backend = Backend::embedded();
    let server = Sandgate::start_with(&backend, &["--body-limit", "1024"]).await;
    let response = server.deliver(WEBHOOK_KEY, vec![b' '; 4096]).await;
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.expect("JSON");
    assert!(
        body["detail"].as_str().expect("detail").contains("1024"),
        "{body}"
    );
}

#[tokio::test]
async fn the_openapi_document_describes_routed_paths_and_methods() {
    let backend = Backend::embedded();
    let server = Sandgate::start(&backend).await;
    let document: Value = server
        .client
        .get(server.url("/openapi.json"))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("JSON");
    assert!(document["components"]["schemas"]["ConversationInfo"].is_object());
    let paths = document["paths"].as_object().expect("paths");
    assert!(paths.contains_key("/api/v1/webhooks/conversations"));
    for (path, operations) in paths {
        let concrete = path
            .replace("{id}", &new_id())
            .replace("{profile_name}", "p")
            .replace("{name}", "custom");
        // Every method: a documented one is routed; any other answers 405 (and every
        // routed path is in the document: the edge routes only what it documents).
        for method in ["get", "post", "put", "patch", "delete"] {
            let response = server
                .client
                .request(
                    method.to_uppercase().parse().expect("method"),
                    server.url(&concrete),
                )
                .send()
                .await
                .expect("request");
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            if operations.get(method).is_some() {
                assert!(
                    status != 405 && body != json!({"detail": "Not Found"}),
                    "{method} {path} is documented but not routed: {status} {body}"
                );
            } else {
                assert_eq!(status, 405, "{method} {path} is routed but not documented");
            }
        }
    }
    let response = server
        .client
        .get(server.url("/no/such/path"))
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), 404);
    assert_eq!(
        response.json::<Value>().await.expect("JSON"),
        json!({"detail": "Not Found"})
    );
}
