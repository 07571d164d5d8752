//! Idempotent and ordered deliveries, on both stores.

use futures::future::join_all;
use serde_json::Value;

use crate::common::{Backend, OTHER_WEBHOOK_KEY, Sandgate, WEBHOOK_KEY, conversation, new_id};
use crate::on_both_backends;

async fn stored(server: &Sandgate, id: &str) -> Value {
    let response = server.conversation(id).await;
    assert_eq!(response.status(), 200);
    response.json().await.expect("JSON")
}

fn lifecycle(record: &Value) -> Vec<String> {
    record["sandgate"]["lifecycle"]
        .as_array()
        .expect("lifecycle")
        .iter()
        .map(|event| event["kind"].as_str().expect("kind").to_owned())
        .collect()
}

async fn repeated_and_out_of_order_deliveries_keep_the_newest(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let id = new_id();
    let running = conversation(&id, "2026-03-01T12:00:01Z", "running");
    let paused = conversation(&id, "2026-03-01T12:00:02Z", "paused");

    server.deliver_ok(&running).await;
    server.deliver_ok(&running).await;
    assert_eq!(
        lifecycle(&stored(&server, &id).await),
        ["start"],
        "a repeated delivery stores once"
    );

    server.deliver_ok(&paused).await;
    server.deliver_ok(&paused).await;
    // The older delivery arrives late: acknowledged, not applied.
    server.deliver_ok(&running).await;
    let record = stored(&server, &id).await;
    assert_eq!(record["execution_status"], "paused");
    assert_eq!(record["sandgate"]["execution_status"], "paused");
    assert_eq!(lifecycle(&record), ["start", "pause"]);

    server
        .deliver_ok(&conversation(&id, "2026-03-01T12:00:03Z", "running"))
        .await;
    server
        .deliver_ok(&conversation(&id, "2026-03-01T12:00:04Z", "deleting"))
        .await;
    let record = stored(&server, &id).await;
    assert_eq!(lifecycle(&record), ["start", "pause", "resume", "delete"]);
    assert_eq!(record["sandgate"]["deleted"], true);
}

async fn deliveries_in_reverse_order_leave_the_newest(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let id = new_id();
    for (second, status) in [(3, "deleting"), (2, "paused"), (1, "running")] {
        server
            .deliver_ok(&conversation(
                &id,
                &format!("2026-03-01T12:00:0{second}Z"),
                status,
            ))
            .await;
    }
    let record = stored(&server, &id).await;
    assert_eq!(record["execution_status"], "deleting");
    assert_eq!(record["updated_at"], "2026-03-01T12:00:03Z");
    assert_eq!(record["sandgate"]["deleted"], true);
}

async fn fifty_concurrent_deliveries_leave_the_newest(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let id = new_id();
    // Interleave the order in which they are sent, so the newest is not sent last.
    let mut order: Vec<u32> = (0..50).collect();
    order.sort_by_key(|i| (i * 37) % 50);
    let bodies: Vec<String> = order
        .iter()
        .map(|i| {
            let status = if i % 2 == 0 { "running" } else { "paused" };
            conversation(
                &id,
                &format!("2026-03-01T12:{:02}:{:02}Z", i / 60, i % 60),
                status,
            )
            .to_string()
        })
        .collect();
    let answers = join_all(
        bodies
            .into_iter()
            .map(|body| server.deliver(WEBHOOK_KEY, body)),
    )
    .await;
    for answer in answers {
        assert_eq!(answer.status(), 200);
    }
    let record = stored(&server, &id).await;
    assert_eq!(record["updated_at"], "2026-03-01T12:00:49Z");
    assert_eq!(record["execution_status"], "paused");
}

async fn another_sender_cannot_overwrite_a_conversation(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let id = new_id();
    server
        .deliver_ok(&conversation(&id, "2026-03-01T12:00:01Z", "running"))
        .await;
    let response = server
        .deliver(
            OTHER_WEBHOOK_KEY,
            conversation(&id, "2026-03-01T12:00:02Z", "paused").to_string(),
        )
        .await;
    assert_eq!(response.status(), 401);
    assert_eq!(
        response.json::<Value>().await.expect("JSON"),
        serde_json::json!({"detail": "Unauthorized"})
    );
    assert_eq!(stored(&server, &id).await["execution_status"], "running");
}

on_both_backends!(
    repeated_and_out_of_order_deliveries_keep_the_newest,
    deliveries_in_reverse_order_leave_the_newest,
    fifty_concurrent_deliveries_leave_the_newest,
    another_sender_cannot_overwrite_a_conversation,
);
