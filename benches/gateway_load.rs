//! The model gateway's cost: the same fake upstream called directly and through
//! `sandgate serve` (edge → ModelGateway → upstream), side by side in one run. Reports
//! the added latency at concurrency 1 and 16, requests per second at 64, and the added
//! time to a stream's first chunk.
//!
//! `cargo bench --bench gateway_load` (needs `redis-server`: the spend log goes to Redis).
//! Environment: `BENCH_SECONDS` (per run, default 5), `BENCH_CONCURRENCY` (default
//! `1,16,64`), `BENCH_STREAMS` (streams timed per target, default 2000), `BENCH_ROUNDS`
//! (how many times each cell runs, interleaved; default 1) and `BENCH_SANDGATE`
//! (`label=path,…`: release binaries to compare side by side in one run; default the
//! current build).

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
#[path = "harness/upstream.rs"]
mod upstream;

use std::time::Instant;

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};

const MASTER_KEY: &str = "bench-master-key";

fn request(body: &Bytes) -> http::Request<Full<Bytes>> {
    http::Request::post("/v1/chat/completions")
        .header("host", "bench")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {MASTER_KEY}"))
        .header(
            "x-gateway-session-id",
            "0f0e0d0c-0b0a-4908-8706-050403020100",
        )
        .body(Full::new(body.clone()))
        .expect("request")
}

/// Time to the first body chunk of `count` streamed requests, one at a time, in µs.
async fn first_chunks(base: &str, body: &Bytes, count: usize) -> Histogram<u64> {
    let mut sender = closed_loop::connect(base).await;
    let mut times = closed_loop::histogram();
    for _ in 0..count {
        sender.ready().await.expect("connection ready");
        let sent = Instant::now();
        let response = sender.send_request(request(body)).await.expect("send");
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let first = body.frame().await.expect("a first chunk").expect("frame");
        times.saturating_record(sent.elapsed().as_micros() as u64);
        assert!(first.is_data());
        while let Some(frame) = body.frame().await {
            frame.expect("frame");
        }
    }
    times
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let seconds = harness::env_number("BENCH_SECONDS", 5);
    let streams = harness::env_number("BENCH_STREAMS", 2000) as usize;

    let rounds = harness::env_number("BENCH_ROUNDS", 1);

    let direct = upstream::start().await;
    let config = upstream::gateway_config(&direct);
    // Production's store: the spend log goes to Redis.
    let (_redis, redis) = harness::redis().await;
    let mut gateways = Vec::new();
    for (index, (label, binary)) in binaries::from_env(env!("CARGO_BIN_EXE_sandgate"))
        .into_iter()
        .enumerate()
    {
        let (child, url) = harness::sandgate(
            &binary,
            &[
                "--log".into(),
                "warn,sandgate=info".into(),
                "--redis".into(),
                // Each binary its own database.
                format!("{redis}{index}"),
                "--gateway-config".into(),
                config.path().display().to_string(),
            ],
            &[("PROXY_MASTER_KEY", MASTER_KEY)],
        )
        .await;
        gateways.push((format!("{label}through sandgate serve"), child, url));
    }

    // The client asks the gateway for `claude`; the provider is asked for `claude-sonnet`.
    let through = upstream::chat("claude", false);
    let direct_body = upstream::chat("claude-sonnet", false);
    println!("Non-streaming chat completions, closed loop\n");
    println!("| target | concurrency | requests/s | p50 ms | p99 ms | errors |");
    println!("|---|---:|---:|---:|---:|---:|");
    for concurrency in closed_loop::concurrency_levels() {
        for _ in 0..rounds {
            let direct_target = ("direct to the fake upstream", &direct, &direct_body);
            let targets = gateways
                .iter()
                .map(|(target, _, url)| (target.as_str(), url, &through));
            for (target, base, body) in std::iter::once(direct_target).chain(targets) {
                let body = body.clone();
                let next = move || request(&body);
                closed_loop::load(base, concurrency, 1, next.clone()).await;
                let outcome = closed_loop::load(base, concurrency, seconds, next).await;
                println!(
                    "| {target} | {concurrency} | {:.0} | {:.3} | {:.3} | {} |",
                    outcome.rate(),
                    outcome.ms(0.5),
                    outcome.ms(0.99),
                    outcome.errors
                );
            }
        }
    }

    println!("\nStreaming: time to the first chunk, {streams} streams one at a time\n");
    println!("| target | p50 ms | p99 ms |");
    println!("|---|---:|---:|");
    for _ in 0..rounds {
        let direct_target = (
            "direct to the fake upstream",
            &direct,
            upstream::chat("claude-sonnet", true),
        );
        let targets = gateways
            .iter()
            .map(|(target, _, url)| (target.as_str(), url, upstream::chat("claude", true)));
        for (target, base, body) in std::iter::once(direct_target).chain(targets) {
            first_chunks(base, &body, streams / 10).await;
            let times = first_chunks(base, &body, streams).await;
            println!(
                "| {target} | {:.3} | {:.3} |",
                times.value_at_quantile(0.5) as f64 / 1000.0,
                times.value_at_quantile(0.99) as f64 / 1000.0
            );
        }
    }
}
