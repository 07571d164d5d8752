//! Faults: nothing acknowledged is lost. Redis stopped under load (503, never 200 for what
//! was not stored, never 500; recovery without a restart), replicas killed with SIGKILL,
//! and the reconciler's lease passing to a surviving replica.
//!
//! This file holds the probes the tests share (`/health`, one delivery, the report of
//! what was measured); the tests are by fault: one Redis crashed and restarted
//! (`outage.rs`), Sandgate itself SIGKILLed (`sigkill.rs`), and Redis replicas, Sentinel
//! and Cluster failovers (`failover.rs`).

mod failover;
mod outage;
mod sigkill;

use std::time::{Duration, Instant};

use crate::common::{SandgateProcess, WEBHOOK_KEY, until_status};

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

/// What a fault test measured, for RELIABILITY.md (shown with `--nocapture`).
#[expect(
    clippy::print_stderr,
    reason = "the test reports what it measured; the harness shows it on request"
)]
fn report(line: &str) {
    eprintln!("[measured] {line}");
}
