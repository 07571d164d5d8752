//! Faults: nothing acknowledged is lost. Redis stopped under load (503, never 200 for what
//! was not stored, never 500; recovery without a restart), replicas killed with SIGKILL,
//! and the reconciler's lease passing to a surviving replica.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::common::{
    ADMIN_PASSWORD, Backend, RUNTIME_KEY, RedisServer, SandgateProcess, WEBHOOK_KEY, admin_args,
    conversation, new_id, serve_args, until_status,
};

/// Polls `GET /health` until it answers `want`; the time it took. Panics past `within`.
async fn health_becomes(
    client: &reqwest::Client,
    server: &SandgateProcess,
    want: u16,
    within: Duration,
) -> Duration {
    let started = Instant::now();
    // No HTTP answer at all counts as 0.
    let seen = until_status(within, want, || async {
        let response = client.get(server.url("/health")).send().await;
        response.map_or(0, |response| response.status().as_u16())
    })
    .await;
    assert_eq!(
        seen.last(),
        Some(&want),
        "/health did not answer {want} within {within:?} (seen: {seen:?})"
    );
    started.elapsed()
}

/// One webhook delivery's status, or 0 when no HTTP answer came at all.
async fn deliver(client: &reqwest::Client, server: &SandgateProcess, body: &str) -> u16 {
    client
        .post(server.url("/api/v1/webhooks/conversations"))
        .header("x-session-api-key", WEBHOOK_KEY)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .map_or(0, |response| response.status().as_u16())
}

/// Deliveries answered so far, and how many of them 503.
#[derive(Clone, Copy, Default)]
struct Progress {
    answered: usize,
    unavailable: usize,
}

/// A few thousand deliveries of distinct conversations from several concurrent senders,
/// with Redis crashed and restarted in the middle: each answer is 200 or 503, `/health`
/// follows Redis down and back up, Sandgate recovers on its own, and every delivery
/// answered 200 (first time or on a sender's retry after the outage) reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_answers_503_and_loses_nothing_acknowledged() {
    const DELIVERIES: usize = 3000;
    const SENDERS: usize = 8;
    /// The outage starts after this many answers…
    const OUTAGE_AFTER: usize = DELIVERIES / 3;
    /// …and lasts until at least this many deliveries were refused (or all were sent).
    const REFUSED_DURING_OUTAGE: usize = 40;

    let mut backend = Backend::Redis(RedisServer::start_durable().await);
    let server = Arc::new(SandgateProcess::spawn(&serve_args(&backend), &[]).await);
    let Backend::Redis(redis) = &mut backend else {
        unreachable!("a Redis backend")
    };
    let client = reqwest::Client::new();
    let ids: Arc<Vec<String>> = Arc::new((0..DELIVERIES).map(|_| new_id()).collect());
    let next = Arc::new(AtomicUsize::new(0));
    let (progress, mut watched) = watch::channel(Progress::default());
    let progress = Arc::new(progress);

    let senders: Vec<_> = (0..SENDERS)
        .map(|_| {
            let (client, server, ids, next, progress) = (
                client.clone(),
                server.clone(),
                ids.clone(),
                next.clone(),
                progress.clone(),
            );
            tokio::spawn(async move {
                let mut answers = Vec::new();
                loop {
                    let index = next.fetch_add(1, Ordering::SeqCst);
                    let Some(id) = ids.get(index) else {
                        return answers;
                    };
                    let body = conversation(id, "2026-03-01T12:00:00Z", "running").to_string();
                    let status = deliver(&client, &server, &body).await;
                    answers.push((index, status));
                    progress.send_modify(|progress| {
                        progress.answered += 1;
                        progress.unavailable += usize::from(status == 503);
                    });
                }
            })
        })
        .collect();

    // Crash Redis a third of the way in; /health must notice.
    watched
        .wait_for(|progress| progress.answered >= OUTAGE_AFTER)
        .await
        .expect("senders running");
    redis.stop().await;
    let stopped_at = Instant::now();
    let down_after = health_becomes(&client, &server, 503, Duration::from_secs(10)).await;
    // Keep the outage until the senders have been refused for a while.
    tokio::time::timeout(
        Duration::from_secs(60),
        watched.wait_for(|progress| {
            progress.unavailable >= REFUSED_DURING_OUTAGE || progress.answered == DELIVERIES
        }),
    )
    .await
    .expect("deliveries are answered while Redis is down")
    .expect("senders running");
    redis.restart().await;
    let outage = stopped_at.elapsed();
    // Back without restarting Sandgate.
    let up_after = health_becomes(&client, &server, 200, Duration::from_secs(30)).await;

    let mut answers = Vec::with_capacity(DELIVERIES);
    for sender in senders {
        answers.extend(sender.await.expect("sender"));
    }
    assert_eq!(answers.len(), DELIVERIES);
    let unexpected: Vec<_> = answers
        .iter()
        .filter(|(_, status)| !matches!(status, 200 | 503))
        .collect();
    assert!(
        unexpected.is_empty(),
        "answers other than 200 or 503 (index, status): {unexpected:?}"
    );
    let refused: Vec<usize> = answers
        .iter()
        .filter(|(_, status)| *status == 503)
        .map(|(index, _)| *index)
        .collect();
    assert!(!refused.is_empty(), "the outage refused no delivery");

    // A sender retries what was refused: every retry is stored now.
    let retried: Vec<u16> = futures::stream::iter(refused.iter().copied())
        .map(|index| {
            let (client, server, id) = (&client, &server, &ids[index]);
            async move {
                let body = conversation(id, "2026-03-01T12:00:00Z", "running").to_string();
                deliver(client, server, &body).await
            }
        })
        .buffer_unordered(SENDERS)
        .collect()
        .await;
    let retries_refused = retried.iter().filter(|status| **status != 200).count();
    assert_eq!(
        retries_refused,
        0,
        "of {} retries after the outage, {retries_refused} were not stored (statuses: {:?})",
        retried.len(),
        retried.iter().fold(
            std::collections::BTreeMap::<u16, usize>::new(),
            |mut counts, status| {
                *counts.entry(*status).or_default() += 1;
                counts
            }
        )
    );

    // Every delivery was acknowledged once by now: each reads back.
    let lost: Vec<String> = futures::stream::iter(ids.iter())
        .map(|id| {
            let (client, server) = (&client, &server);
            async move {
                let response = server.conversation(client, id).await;
                let stored = response.status() == 200
                    && response.json::<Value>().await.ok().is_some_and(|record| {
                        record["id"] == id.as_str() && record["execution_status"] == "running"
                    });
                (!stored).then(|| id.clone())
            }
        })
        .buffer_unordered(SENDERS)
        .filter_map(|lost| async move { lost })
        .collect()
        .await;
    assert!(
        lost.is_empty(),
        "{} acknowledged deliveries are gone: {lost:?}",
        lost.len()
    );
    let acknowledged = DELIVERIES - refused.len();
    report(&format!(
        "redis outage: {DELIVERIES} deliveries from {SENDERS} senders, {acknowledged} answered 200, \
         {} answered 503, 0 other; {} retries answered 200; lost 0; /health 503 after {down_after:?}, \
         outage {outage:?}, /health 200 {up_after:?} after the restart",
        refused.len(),
        retried.len(),
    ));
}

/// What a fault test measured, for RELIABILITY.md (shown with `--nocapture`).
#[expect(
    clippy::print_stderr,
    reason = "the test reports what it measured; the harness shows it on request"
)]
fn report(line: &str) {
    eprintln!("[measured] {line}");
}

const IMAGE: &str = "ghcr.io/acme/agent:1.0";

/// The flags of a `serve` with admin login, a fixed key secret (session keys survive a
/// restart) and `extra`.
fn admin_serve_args(backend: &Backend, extra: &[&str]) -> Vec<String> {
    let mut args = serve_args(backend);
    args.extend(admin_args());
    args.extend(extra.iter().map(|arg| (*arg).to_owned()));
    args
}

/// A warm runtime configuration's body.
fn warm_config(image: &str, count: i64) -> Value {
    json!({
        "image": image, "working_dir": "/workspace",
        "command": ["/usr/local/bin/agent-server", "--port", "8000"],
        "environment": {"LOG_LEVEL": "info"}, "count": count,
    })
}

/// A start for a spec no pool has: a cold start.
fn cold_start(session_id: &str) -> Value {
    json!({
        "image": "ghcr.io/acme/cold:1", "working_dir": "/workspace",
        "command": ["/bin/agent"], "environment": {}, "session_id": session_id,
    })
}

async fn post_json(
    client: &reqwest::Client,
    server: &SandgateProcess,
    path: &str,
    body: &Value,
) -> (u16, Value) {
    let response = client
        .post(server.url(path))
        .header("x-api-key", RUNTIME_KEY)
        .json(body)
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Saved configurations and started sandboxes (with their session keys) survive a
/// SIGKILL right after they were acknowledged.
async fn a_killed_server_keeps_saved_configurations_and_started_sandboxes(backend: Backend) {
    let client = reqwest::Client::new();
    let args = admin_serve_args(&backend, &[]);
    let mut server = SandgateProcess::spawn(&args, &[]).await;
    let token = server.admin_token(&client, ADMIN_PASSWORD).await;
    let names: Vec<String> = (0..5).map(|index| format!("pool-{index}")).collect();
    for (index, name) in names.iter().enumerate() {
        let response = client
            .put(server.url(&format!("/api/admin/warm-runtime-configs/{name}")))
            .bearer_auth(&token)
            .json(&warm_config(&format!("{IMAGE}-{index}"), 0))
            .send()
            .await
            .expect("put");
        assert_eq!(response.status(), 200, "{:?}", response.text().await);
    }
    let mut started = Vec::new();
    for _ in 0..10 {
        let session_id = new_id();
        let (status, sandbox) =
            post_json(&client, &server, "/start", &cold_start(&session_id)).await;
        assert_eq!(status, 200, "{sandbox}");
        started.push((session_id, sandbox));
    }
    server.kill().await;

    let server = SandgateProcess::spawn(&args, &[]).await;
    let listed: Value = client
        .get(server.url("/api/warm-runtime-configs"))
        .header("x-api-key", RUNTIME_KEY)
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("JSON");
    let listed: Vec<&str> = listed["configs"]
        .as_array()
        .expect("configs")
        .iter()
        .filter_map(|entry| entry["name"].as_str())
        .collect();
    assert_eq!(listed, names, "saved configurations after the kill");
    for (session_id, sandbox) in &started {
        let response = client
            .get(server.url(&format!("/sessions/{session_id}")))
            .header("x-api-key", RUNTIME_KEY)
            .send()
            .await
            .expect("session");
        assert_eq!(response.status(), 200, "session {session_id} is gone");
        let found: Value = response.json().await.expect("JSON");
        assert_eq!(found["runtime_id"], sandbox["runtime_id"]);
        // Its session key still opens the webhook, for this sandbox.
        let key = sandbox["session_api_key"].as_str().expect("session key");
        let delivered = client
            .post(server.url("/api/v1/webhooks/conversations"))
            .header("x-session-api-key", key)
            .header("content-type", "application/json")
            .body(conversation(&new_id(), "2026-03-01T12:00:00Z", "running").to_string())
            .send()
            .await
            .expect("deliver");
        assert_eq!(delivered.status(), 200, "the session key of {session_id}");
    }
}

crate::on_both_backends!(a_killed_server_keeps_saved_configurations_and_started_sandboxes);

/// Two replicas on one Redis: only the lease holder reconciles; when it is killed
/// (SIGKILL, the lease is never released) the other takes over once the lease expires,
/// and refills the pool a claim emptied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconciler_lease_passes_to_a_surviving_replica() {
    let backend = Backend::redis().await;
    let installer = tempfile::NamedTempFile::new().expect("temp file");
    let config = warm_config(IMAGE, 2);
    let mut entry = config.clone();
    entry["name"] = "v1_current".into();
    std::fs::write(
        installer.path(),
        json!({ "count": 2, "configs": [entry] }).to_string(),
    )
    .expect("installer file");
    let path = installer.path().display().to_string();
    let args = admin_serve_args(
        &backend,
        &[
            "--warm-runtimes-file",
            &path,
            "--reconcile-interval",
            "1",
            "--local-sandbox-start-seconds",
            "0.2",
        ],
    );
    let mut first = SandgateProcess::spawn(&args, &[]).await;
    // The first replica takes the lease and fills the pool…
    first
        .wait_for_log("warm pools reconciled", Duration::from_secs(20))
        .await;
    let second = SandgateProcess::spawn(&args, &[]).await;
    let client = reqwest::Client::new();
    // …and the second, though its reconciler runs every second, has nothing to do.
    let pools = |server: &SandgateProcess| {
        let request = client
            .get(server.url("/api/warm-runtime-pools"))
            .header("x-api-key", RUNTIME_KEY);
        async move {
            let pools: Value = request
                .send()
                .await
                .expect("pools")
                .json()
                .await
                .expect("JSON");
            pools["pools"][0].clone()
        }
    };
    assert_eq!(pools(&second).await["target"], 2);
    assert!(
        !second.log().contains("warm pools reconciled"),
        "the second replica reconciled while the first held the lease:\n{}",
        second.log()
    );

    first.kill().await;
    let killed_at = Instant::now();
    // A claim through the survivor empties a slot of the pool.
    let mut claim = config.clone();
    claim["session_id"] = new_id().into();
    claim.as_object_mut().expect("object").remove("count");
    let (status, claimed) = post_json(&client, &second, "/start", &claim).await;
    assert_eq!(status, 200, "{claimed}");
    assert_eq!(
        claimed["warm"], true,
        "a warm sandbox was claimed: {claimed}"
    );
    // The lease lives 3 s (2 × the 1 s interval, raised to the floor); the survivor's
    // first pass after it expires refills.
    second
        .wait_for_log("warm pools reconciled", Duration::from_secs(10))
        .await;
    let takeover = killed_at.elapsed();
    let refilled = pools(&second).await;
    assert_eq!(
        refilled["ready"].as_i64().unwrap_or(0) + refilled["starting"].as_i64().unwrap_or(0),
        2,
        "the pool after the takeover: {refilled}"
    );
    assert!(
        takeover < Duration::from_secs(3 + 1 + 2),
        "took over after {takeover:?}: more than the lease TTL, an interval and slack"
    );
    report(&format!(
        "lease takeover: the survivor reconciled {takeover:?} after the holder's SIGKILL (lease TTL 3 s, interval 1 s)"
    ));
}

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
