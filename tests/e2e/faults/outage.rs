//! A Redis outage under load: every answer 200 or 503, `/health` follows Redis down and
//! back up, Sandgate recovers without a restart, and every delivery answered 200 reads
//! back.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::Value;
use tokio::sync::watch;

use super::{deliver, health_becomes, report};
use crate::common::{Backend, RedisServer, SandgateProcess, conversation, new_id, serve_args};

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
