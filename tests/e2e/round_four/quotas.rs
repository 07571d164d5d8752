//! Quotas counted in the store, exact across replicas: two replicas on one Redis admit
//! `MAX_RUNTIMES` sandboxes and `SANDBOX_START_RATE` starts between them, not each; and a
//! webhook key creates at most `WEBHOOK_NEW_CONVERSATIONS_RATE` conversations per window,
//! whichever replica it posts to.

use std::sync::Arc;

use serde_json::json;

use crate::common::{
    Backend, OTHER_WEBHOOK_KEY, RUNTIME_KEY, Sandgate, WEBHOOK_KEY, conversation, new_id,
};

/// Starts `count` sandboxes at once, alternating between the replicas: the statuses.
async fn start_many(replicas: &[Arc<Sandgate>; 2], count: usize) -> Vec<u16> {
    let starts: Vec<_> = (0..count)
        .map(|n| {
            let sandgate = replicas[n % 2].clone();
            tokio::spawn(async move {
                sandgate
                    .client
                    .post(sandgate.url("/start"))
                    .header("x-api-key", RUNTIME_KEY)
                    .json(&json!({
                        "image": "ghcr.io/acme/agent:quota", "command": ["/agent"],
                        "working_dir": "/workspace", "environment": {},
                        "session_id": format!("quota-{n}"),
                    }))
                    .send()
                    .await
                    .expect("start")
                    .status()
                    .as_u16()
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for start in starts {
        statuses.push(start.await.expect("start task"));
    }
    statuses
}

fn count(statuses: &[u16], status: u16) -> usize {
    statuses.iter().filter(|seen| **seen == status).count()
}

async fn replicas(backend: &Backend, extra: &[&str]) -> [Arc<Sandgate>; 2] {
    [
        Arc::new(Sandgate::start_with(backend, extra).await),
        Arc::new(Sandgate::start_with(backend, extra).await),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn max_runtimes_is_exact_across_replicas() {
    let backend = Backend::redis().await;
    let replicas = replicas(&backend, &["--max-runtimes", "5"]).await;
    let statuses = start_many(&replicas, 12).await;
    assert_eq!(count(&statuses, 200), 5, "{statuses:?}");
    assert_eq!(count(&statuses, 429), 7, "{statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_start_rate_is_exact_across_replicas() {
    let backend = Backend::redis().await;
    let replicas = replicas(&backend, &["--sandbox-start-rate", "4"]).await;
    let statuses = start_many(&replicas, 10).await;
    assert_eq!(count(&statuses, 200), 4, "{statuses:?}");
    assert_eq!(count(&statuses, 429), 6, "{statuses:?}");
}

/// A webhook key creates at most its bound of new conversations per window, across the
/// replicas; its existing conversations still take deliveries, and another key is not
/// affected.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_webhook_key_creates_a_bounded_number_of_conversations() {
    let backend = Backend::redis().await;
    let replicas = replicas(&backend, &["--webhook-new-conversations-rate", "3"]).await;
    let first = new_id();
    let deliver = |n: usize, key: &'static str, id: String, updated_at: String| {
        let sandgate = replicas[n % 2].clone();
        async move {
            let body = conversation(&id, &updated_at, "running").to_string();
            let response = sandgate.deliver(key, body).await;
            let status = response.status().as_u16();
            let retry_after = response.headers().get("retry-after").cloned();
            (
                status,
                retry_after,
                response.text().await.unwrap_or_default(),
            )
        }
    };
    let (status, _, body) = deliver(
        0,
        WEBHOOK_KEY,
        first.clone(),
        "2026-03-01T12:00:00Z".to_owned(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    for n in 1..3 {
        let (status, _, body) =
            deliver(n, WEBHOOK_KEY, new_id(), "2026-03-01T12:00:00Z".to_owned()).await;
        assert_eq!(status, 200, "{n}: {body}");
    }
    let (status, retry_after, body) =
        deliver(3, WEBHOOK_KEY, new_id(), "2026-03-01T12:00:00Z".to_owned()).await;
    assert_eq!(status, 429, "{body}");
    assert!(retry_after.is_some(), "Retry-After");
    // Its existing conversation still takes a delivery, on either replica.
    for n in 0..2 {
        let updated_at = format!("2026-03-01T12:00:0{}Z", n + 1);
        let (status, _, body) = deliver(n, WEBHOOK_KEY, first.clone(), updated_at).await;
        assert_eq!(status, 200, "an update: {body}");
    }
    // Another key has a count of its own.
    let (status, _, body) = deliver(
        1,
        OTHER_WEBHOOK_KEY,
        new_id(),
        "2026-03-01T12:00:00Z".to_owned(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}
