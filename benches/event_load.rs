//! Agent-server event batches per second through the real binary, side by side with a
//! baseline in the same run: a no-op HTTP server that reads the same bodies and answers
//! `{"success":true}` (the floor this machine and this load generator allow).
//!
//! `cargo bench --bench event_load` (needs `redis-server`; `scripts/test` installs it).
//! Each batch is 10 real events of the agent-server 1.58.2
//! (`tests/fixtures/agent_server_events/1.58.2/batch_10.json`, about 14 KB) posted for a
//! new conversation, so every batch stores 10 events.
//! Environment: `BENCH_SECONDS` (per run, default 5), `BENCH_CONCURRENCY` (default `1,16,64`),
//! `BENCH_BACKENDS` (`redis`, `embedded`; default both), `BENCH_ROUNDS` (default 1) and
//! `BENCH_SANDGATE` (`label=path,…`: builds to compare side by side in one run).

#![expect(
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a benchmark: it fails loudly and prints its table"
)]

#[path = "harness/binaries.rs"]
mod binaries;
#[path = "harness/closed_loop.rs"]
mod closed_loop;
mod harness;

use axum::Router;
use axum::routing::post;
use closed_loop::Outcome;

const KEY: &str = "bench-key";

/// Ten events as the agent-server 1.58.2 posted them in one batch.
const BATCH: &[u8] = include_bytes!("../tests/fixtures/agent_server_events/1.58.2/batch_10.json");

/// A batch for a new conversation: the path names a fresh id.
fn batch() -> http::Request<http_body_util::Full<bytes::Bytes>> {
    let id = uuid::Uuid::new_v4().simple().to_string();
    http::Request::post(format!("/api/v1/webhooks/events/{id}"))
        .header("host", "bench")
        .header("content-type", "application/json")
        .header("x-session-api-key", KEY)
        .body(http_body_util::Full::new(bytes::Bytes::from_static(BATCH)))
        .expect("request")
}

async fn sandgate(binary: &str, store_args: &[String]) -> (tokio::process::Child, String) {
    // Quiet, but for the "listening on" line the harness waits for.
    let mut args = vec!["--log".to_owned(), "warn,sandgate=info".to_owned()];
    args.extend_from_slice(store_args);
    harness::sandgate(binary, &args, &[("SANDGATE_WEBHOOK_API_KEYS", KEY)]).await
}

async fn baseline() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("addr");
    let app = Router::new().route(
        "/api/v1/webhooks/events/{id}",
        post(|body: bytes::Bytes| async move {
            std::hint::black_box(body);
            axum::Json(serde_json::json!({"success": true}))
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

fn row(target: &str, concurrency: usize, outcome: &Outcome) -> String {
    format!(
        "| {target} | {concurrency} | {:.0} | {:.2} | {:.2} | {} |",
        outcome.rate(),
        outcome.ms(0.5),
        outcome.ms(0.99),
        outcome.errors,
    )
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let events: Vec<serde_json::Value> = serde_json::from_slice(BATCH).expect("a JSON list");
    let seconds = harness::env_number("BENCH_SECONDS", 5);
    let levels = closed_loop::concurrency_levels();
    let backends = std::env::var("BENCH_BACKENDS").unwrap_or_else(|_| "redis,embedded".into());
    let rounds = harness::env_number("BENCH_ROUNDS", 1);
    let binaries = binaries::from_env(env!("CARGO_BIN_EXE_sandgate"));

    let data = tempfile::tempdir().expect("temp dir");
    let (_redis, redis) = harness::redis().await;
    let mut targets = vec![("baseline (no-op HTTP)".to_owned(), None, baseline().await)];
    for (index, (label, binary)) in binaries.iter().enumerate() {
        if backends.contains("redis") {
            let redis_url = format!("{redis}{index}");
            let (child, url) = sandgate(binary, &["--redis".into(), redis_url]).await;
            targets.push((format!("{label}sandgate serve, Redis"), Some(child), url));
        }
        if backends.contains("embedded") {
            let dir = data.path().join(index.to_string());
            let (child, url) =
                sandgate(binary, &["--data-dir".into(), dir.display().to_string()]).await;
            targets.push((format!("{label}sandgate serve, embedded"), Some(child), url));
        }
    }

    println!(
        "Batches of {} events ({} B), each for a new conversation.\n",
        events.len(),
        BATCH.len()
    );
    println!("| target | concurrency | batches/s | p50 ms | p99 ms | errors |");
    println!("|---|---:|---:|---:|---:|---:|");
    for &concurrency in &levels {
        for _ in 0..rounds {
            for (target, _, url) in &targets {
                // A short warm-up, then the measured run.
                closed_loop::load(url, concurrency, 1, batch).await;
                let outcome = closed_loop::load(url, concurrency, seconds, batch).await;
                println!("{}", row(target, concurrency, &outcome));
            }
        }
    }
}
