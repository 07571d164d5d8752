//! Redis replicas and failovers: `--redis-min-replicas-ack` acknowledges only what a
//! replica has, and a Sentinel or Cluster failover under load loses no acknowledged
//! delivery.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{deliver, health_becomes, report};
use crate::common::{
    Backend, RUNTIME_KEY, RedisServer, SandgateProcess, conversation, new_id, serve_args,
};

/// `--redis-min-replicas-ack 1`: a delivery is answered 200 only once a replica has it
/// (it can be read there at once), and 503, never 200 or 500, while no replica confirms
/// it; the sender's retry is stored once the replica is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_min_replicas_ack_a_delivery_is_acknowledged_only_once_a_replica_has_it() {
    let primary = RedisServer::start().await;
    let mut replica = RedisServer::start().await;
    replica.replicate(&primary).await;
    let backend = Backend::Redis(primary);
    let mut args = serve_args(&backend);
    args.extend(["--redis-min-replicas-ack".to_owned(), "1".to_owned()]);
    let server = SandgateProcess::spawn(&args, &[]).await;
    let client = reqwest::Client::new();

    let id = new_id();
    let body = conversation(&id, "2026-03-01T12:00:00Z", "running").to_string();
    assert_eq!(deliver(&client, &server, &body).await, 200);
    let mut on_replica = replica.connection().await;
    let stored: Option<Vec<u8>> = ::redis::cmd("HGET")
        .arg(format!("sandgate:conv:{{{id}}}"))
        .arg("d")
        .query_async(&mut on_replica)
        .await
        .expect("read the replica");
    assert!(
        stored.is_some(),
        "the acknowledged delivery is not on the replica"
    );

    // No replica: the primary stores it, but it is not acknowledged.
    replica.kill().await;
    let later = conversation(&id, "2026-03-01T12:05:00Z", "paused").to_string();
    let started = Instant::now();
    assert_eq!(deliver(&client, &server, &later).await, 503);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the refusal took {:?}",
        started.elapsed()
    );
    // What its sender sends again is refused alike: 503, never 500, never a 200.
    assert_eq!(deliver(&client, &server, &later).await, 503);
}

/// Sentinel: the primary is SIGKILLed under webhook load (`--redis-min-replicas-ack 1`,
/// two replicas). Clients see 503s only, never a 500 or a hang; deliveries are answered
/// 200 again within 15 s without restarting Sandgate, `/health` comes back, and every
/// delivery answered 200, before or after the failover, is readable afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_under_load_loses_no_acknowledged_delivery() {
    let backend = Backend::Redis(RedisServer::start_sentinel(2, true).await);
    let back = failover_under_load(backend, new_id).await;
    report(&format!("sentinel failover: {back}"));
}

/// A Redis Cluster of three masters, two replicas each, under the same load with
/// `--redis-min-replicas-ack 1`: the first master SIGKILLed, one of its replicas promoted
/// by the cluster. The probes are conversations whose record lives on the killed master's
/// slots, so that "back" means the promoted replica serves them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failover_under_load_loses_no_acknowledged_delivery() {
    let backend = Backend::Redis(RedisServer::start_cluster_with_replicas(3, 2).await);
    let Backend::Redis(cluster) = &backend else {
        unreachable!("a Redis backend")
    };
    // Ids whose record key is on the first master's slots (0 to 5460), asked of the
    // cluster itself.
    let mut connection = cluster.connection().await;
    let mut probes = Vec::new();
    while probes.len() < 200 {
        let id = new_id();
        let slot: u16 = ::redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(format!("sandgate:conv:{{{id}}}"))
            .query_async(&mut connection)
            .await
            .expect("CLUSTER KEYSLOT");
        if slot < 16384 / 3 {
            probes.push(id);
        }
    }
    drop(connection);
    let probes = std::sync::Mutex::new(probes);
    let back = failover_under_load(backend, || {
        probes.lock().expect("probes").pop().expect("a probe id")
    })
    .await;
    report(&format!("cluster failover: {back}"));
}

/// `serve --redis-min-replicas-ack 1` on `backend` under four senders; `backend`'s server
/// SIGKILLed; then: only 200 and 503 answered, a probe (a conversation of `probe_id`)
/// answered 200 within 15 s of the kill without restarting Sandgate, every delivery
/// answered 200 readable afterwards. What it measured, for the report.
async fn failover_under_load(mut backend: Backend, probe_id: impl Fn() -> String) -> String {
    let mut args = serve_args(&backend);
    args.extend(["--redis-min-replicas-ack".to_owned(), "1".to_owned()]);
    let server = Arc::new(SandgateProcess::spawn(&args, &[]).await);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    assert_eq!(
        deliver(
            &client,
            &server,
            &conversation(&new_id(), "2026-03-01T12:00:00Z", "running").to_string()
        )
        .await,
        200
    );

    // Four senders, each delivering new conversations one after the other.
    let (stop, stopped) = watch::channel(false);
    let mut senders = Vec::new();
    for _ in 0..4 {
        let (client, server, stopped) = (client.clone(), server.clone(), stopped.clone());
        senders.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            while !*stopped.borrow() {
                let id = new_id();
                let body = conversation(&id, "2026-03-01T12:00:00Z", "running").to_string();
                let status = deliver(&client, &server, &body).await;
                answers.push((id, status, Instant::now()));
            }
            answers
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed_at = Instant::now();
    let Backend::Redis(primary) = &mut backend else {
        unreachable!("a Redis backend")
    };
    primary.kill().await;
    // Until the deliveries come back, then a second more of them.
    let deadline = killed_at + Duration::from_secs(15);
    let mut back_at = None;
    while Instant::now() < deadline {
        let probe = conversation(&probe_id(), "2026-03-01T12:00:00Z", "running").to_string();
        if deliver(&client, &server, &probe).await == 200 {
            back_at = Some(Instant::now());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let back_at = back_at.expect("deliveries answered 200 again within 15 s of the kill");
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.send_replace(true);
    let mut answers = Vec::new();
    for sender in senders {
        answers.extend(sender.await.expect("sender"));
    }
    let statuses: std::collections::BTreeMap<u16, usize> =
        answers
            .iter()
            .fold(Default::default(), |mut counts, (_, status, _)| {
                *counts.entry(*status).or_default() += 1;
                counts
            });
    assert!(
        statuses.keys().all(|status| matches!(status, 200 | 503)),
        "only 200 and 503: {statuses:?}"
    );
    assert!(
        answers
            .iter()
            .any(|(_, status, at)| *status == 200 && *at > back_at),
        "deliveries succeed after the failover: {statuses:?}"
    );
    health_becomes(&client, &server, 200, Duration::from_secs(5)).await;
    for (id, _, _) in answers.iter().filter(|(_, status, _)| *status == 200) {
        let read = client
            .get(server.url(&format!("/api/v1/conversations/{id}")))
            .header("x-api-key", RUNTIME_KEY)
            .send()
            .await
            .expect("read");
        assert_eq!(read.status(), 200, "acknowledged delivery {id} lost");
    }
    format!(
        "deliveries back {:?} after the kill; answers {statuses:?}",
        back_at - killed_at
    )
}
