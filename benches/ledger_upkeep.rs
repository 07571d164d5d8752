//! What the ledger's upkeep costs (issue 52: at most 5 % of requests/s): webhook
//! deliveries (each counts an update to its conversation; a new conversation is also
//! indexed) and gateway calls (each under one of a thousand conversations, so each counts
//! a call, its tokens and spend to its conversation, its model and the day's total),
//! against the same build with `--ledger off`, on one Redis, in rounds of paired cells;
//! the median of the rounds' ratios.
//!
//! Webhook deliveries come as a platform's sandboxes post them: each conversation
//! [`PER_CONVERSATION`] deliveries, the first creating it, the others updating it (the
//! real app server's shortest conversations, one message answered at once, posted 5 and
//! 8: their info at start and delete, their events in batches; BENCHMARKS.md).
//!
//! `cargo bench --bench ledger_upkeep`. Environment: `BENCH_SECONDS` (per cell, default
//! 3), `BENCH_CONCURRENCY` (default 16), `BENCH_ROUNDS` (default 9), `BENCH_LEDGERS`
//! (the two servers' `--ledger`, default `on,off`; `off,off` measures the bench's own
//! bias between its two servers, which should be 1), `BENCH_PER_CONVERSATION` (deliveries
//! of each conversation, default [`PER_CONVERSATION`]; `1`: each delivery a new
//! conversation, the upkeep's worst case), `BENCH_CONVERSATIONS` (default 0; `n`: no new
//! conversation once each of `n` exists, their updates in turn).

#![expect(
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a benchmark: it fails loudly and prints its table"
)]

#[path = "harness/closed_loop.rs"]
#[expect(dead_code, reason = "the shared harness: this bench uses part of it")]
mod closed_loop;
mod harness;
#[path = "harness/medians.rs"]
mod medians;
#[path = "harness/upstream.rs"]
#[expect(dead_code, reason = "the shared harness: this bench uses part of it")]
mod upstream;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use serde_json::Value;

const WEBHOOK_KEY: &str = "bench-key";
const MASTER_KEY: &str = "sk-bench-master-key";
const SESSIONS: u64 = 1000;

fn fixture() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/webhook/accept/agent_basic_idle.json");
    serde_json::from_slice(&std::fs::read(&path).expect("fixture")).expect("JSON")
}

/// Deliveries of each conversation: the real app server's shortest conversations posted 5.
const PER_CONVERSATION: u64 = 5;
/// Conversations posted to side by side: a conversation's next delivery comes this many
/// after its last, so that at the bench's concurrency its updates arrive in order (an
/// update older than the stored record's is acknowledged and not applied: cheaper).
const SIDE_BY_SIDE: u64 = 64;

/// Which conversations the deliveries are of.
#[derive(Clone, Copy)]
struct Mix {
    /// The first conversation's id, as a number (random: a run's conversations are its own).
    first: u128,
    /// At least 1.
    per_conversation: u64,
    /// Not 0: updates of this many conversations in turn.
    conversations: u64,
}

impl Mix {
    /// The conversation of delivery `n`.
    fn conversation(&self, n: u64) -> uuid::Uuid {
        let number = if self.conversations > 0 {
            n % self.conversations
        } else {
            // Deliveries in blocks, each of SIDE_BY_SIDE conversations taking turns.
            let block = n / (self.per_conversation * SIDE_BY_SIDE);
            block * SIDE_BY_SIDE + n % SIDE_BY_SIDE
        };
        uuid::Uuid::from_u128(self.first.wrapping_add(u128::from(number)))
    }
}

/// Delivery `n` (each later than the one before) of the conversation `mix` gives it.
fn delivery(template: &Value, n: u64, mix: Mix) -> http::Request<Full<Bytes>> {
    let mut body = template.clone();
    body["id"] = mix.conversation(n).to_string().into();
    // From the fixture's noon on, a microsecond a delivery.
    let (seconds, micros) = (43_200 + n / 1_000_000, n % 1_000_000);
    body["updated_at"] = format!(
        "2026-03-01T{:02}:{:02}:{:02}.{micros:06}Z",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
    .into();
    http::Request::post("/api/v1/webhooks/conversations")
        .header("host", "bench")
        .header("content-type", "application/json")
        .header("x-session-api-key", WEBHOOK_KEY)
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("request")
}

/// A priced chat completion of one of [`SESSIONS`] conversations.
fn call(body: &Bytes, n: u64) -> http::Request<Full<Bytes>> {
    http::Request::post("/v1/chat/completions")
        .header("host", "bench")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {MASTER_KEY}"))
        .header("x-litellm-session-id", format!("{:032x}", n % SESSIONS + 1))
        .body(Full::new(upstream::numbered(body, n)))
        .expect("request")
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let seconds = harness::env_number("BENCH_SECONDS", 3);
    let concurrency = harness::env_number("BENCH_CONCURRENCY", 16) as usize;
    let rounds = harness::env_number("BENCH_ROUNDS", 9);
    let mix = Mix {
        first: uuid::Uuid::new_v4().as_u128(),
        per_conversation: harness::env_number("BENCH_PER_CONVERSATION", PER_CONVERSATION).max(1),
        conversations: harness::env_number("BENCH_CONVERSATIONS", 0),
    };

    let provider = upstream::start().await;
    let config = upstream::gateway_config(&provider);
    let (_redis, redis) = harness::redis().await;
    let ledgers = std::env::var("BENCH_LEDGERS").unwrap_or_else(|_| "on,off".to_owned());
    let ledgers: Vec<&str> = ledgers.split(',').collect();
    assert_eq!(ledgers.len(), 2, "BENCH_LEDGERS: two values, as `on,off`");
    let mut servers = Vec::new();
    for (index, ledger) in ledgers.iter().copied().enumerate() {
        let (child, url) = harness::sandgate(
            env!("CARGO_BIN_EXE_sandgate"),
            &[
                "--log".into(),
                "warn,sandgate=info".into(),
                "--redis".into(),
                format!("{redis}{index}"),
                "--gateway-config".into(),
                config.path().display().to_string(),
                "--ledger".into(),
                ledger.into(),
            ],
            &[
                ("PROXY_MASTER_KEY", MASTER_KEY),
                ("SANDGATE_WEBHOOK_API_KEYS", WEBHOOK_KEY),
                // Every delivery a new conversation, many times the default bound a
                // minute: the bound is not what is measured.
                ("WEBHOOK_NEW_CONVERSATIONS_RATE", "0"),
            ],
        )
        .await;
        servers.push((ledger, child, url));
    }
    let template = Arc::new(fixture());
    // `claude`: priced, so a call counts spend too.
    let body = upstream::chat("claude", false);
    let counter = Arc::new(AtomicU64::new(0));
    // Per load, the two builds' cells back to back, which of them first alternating from
    // round to round: each round's ratio is of two cells a few seconds apart, so that the
    // machine's drift (neighbours come and go) moves both, and the order favours neither.
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); 4];
    let mut ratios: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for (load, ratios) in ratios.iter_mut().enumerate() {
            let mut pair = [0.0; 2];
            for index in order {
                let base = &servers[index].2;
                let result = if load == 0 {
                    let (template, counter) = (template.clone(), counter.clone());
                    closed_loop::load(base, concurrency, seconds, move || {
                        delivery(&template, counter.fetch_add(1, Ordering::Relaxed), mix)
                    })
                    .await
                } else {
                    let (body, counter) = (body.clone(), counter.clone());
                    closed_loop::load(base, concurrency, seconds, move || {
                        call(&body, counter.fetch_add(1, Ordering::Relaxed))
                    })
                    .await
                };
                assert_eq!(result.errors, 0, "errors");
                pair[index] = result.rate();
                rates[2 * load + index].push(result.rate());
            }
            ratios.push(pair[0] / pair[1]);
        }
    }
    println!(
        "c{concurrency}, {seconds} s cells, {rounds} rounds of paired cells; webhook deliveries: {}\n",
        if mix.conversations > 0 {
            format!("updates of {} conversations in turn", mix.conversations)
        } else {
            format!("{} of each conversation", mix.per_conversation)
        }
    );
    println!(
        "| load | ledger {}, requests/s | ledger {}, requests/s | first / second, median of the rounds' | rounds' range |",
        ledgers[0], ledgers[1]
    );
    println!("|---|---:|---:|---:|---|");
    for (load, name) in ["webhook deliveries", "gateway calls"]
        .into_iter()
        .enumerate()
    {
        let (on, off) = (
            medians::median(&rates[2 * load]),
            medians::median(&rates[2 * load + 1]),
        );
        println!(
            "| {name} | {on:.0} | {off:.0} | {:.3} | {} |",
            medians::median(&ratios[load]),
            medians::range(&ratios[load], 3)
        );
    }
}
