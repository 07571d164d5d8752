//! Webhook deliveries per second through the real binary, side by side with a baseline in
//! the same run: a no-op HTTP server that reads the same bodies and answers `{"success":true}`
//! (the floor this machine and this load generator allow).
//!
//! `cargo bench --bench webhook_load` (needs `redis-server`; `scripts/test` installs it).
//! Each request carries a new conversation id, so every delivery is a real write.
//! Environment: `BENCH_SECONDS` (per run, default 5), `BENCH_CONCURRENCY` (default `1,16,64`).

#![expect(
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a benchmark: it fails loudly and prints its table"
)]

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use hdrhistogram::Histogram;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const KEY: &str = "bench-key";

struct Body {
    name: &'static str,
    template: Value,
    bytes: usize,
}

fn fixture(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/webhook/accept")
        .join(format!("{name}.json"));
    serde_json::from_slice(
        &std::fs::read(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display())),
    )
    .expect("fixture is JSON")
}

fn bodies() -> Vec<Body> {
    let small = fixture("status_idle");
    let large = fixture("sdk158_stats_metrics");
    vec![
        Body {
            name: "small",
            bytes: small.to_string().len(),
            template: small,
        },
        Body {
            name: "10 KB",
            bytes: large.to_string().len(),
            template: large,
        },
    ]
}

/// `count` distinct deliveries of `template`, each a new conversation.
fn deliveries(template: &Value, count: usize) -> Vec<bytes::Bytes> {
    (0..count)
        .map(|_| {
            let mut body = template.clone();
            body["id"] = uuid::Uuid::new_v4().to_string().into();
            bytes::Bytes::from(body.to_string())
        })
        .collect()
}

struct Outcome {
    requests: u64,
    errors: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
}

/// Closed-loop load: `concurrency` workers, each sending its next body as soon as the
/// previous answer arrived, for `seconds`.
async fn load(url: &str, template: &Value, concurrency: usize, seconds: u64) -> Outcome {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .tcp_nodelay(true)
        .build()
        .expect("client");
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, url, stop) = (client.clone(), url.to_owned(), stop.clone());
            let bodies = deliveries(template, 4096);
            tokio::spawn(async move {
                let mut latency =
                    Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
                let (mut requests, mut errors) = (0u64, 0u64);
                for body in bodies.iter().cycle() {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    // A repeated body would be an idempotent no-op: give it a fresh id.
                    let body = if requests as usize >= bodies.len() {
                        let mut value: Value = serde_json::from_slice(body).expect("JSON");
                        value["id"] = uuid::Uuid::new_v4().to_string().into();
                        bytes::Bytes::from(value.to_string())
                    } else {
                        body.clone()
                    };
                    let sent = Instant::now();
                    let answer = client
                        .post(&url)
                        .header("content-type", "application/json")
                        .header("x-session-api-key", KEY)
                        .body(body)
                        .send()
                        .await;
                    match answer {
                        Ok(response) if response.status() == 200 => drop(response.bytes().await),
                        _ => errors += 1,
                    }
                    latency.saturating_record(sent.elapsed().as_micros() as u64);
                    requests += 1;
                }
                (requests, errors, latency)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut outcome = Outcome {
        requests: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        latency: Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram"),
    };
    for worker in workers {
        let (requests, errors, latency) = worker.await.expect("worker");
        outcome.requests += requests;
        outcome.errors += errors;
        outcome.latency.add(latency).expect("same bounds");
    }
    outcome.elapsed = started.elapsed();
    outcome
}

async fn spawn_listening(mut command: Command, ready: &str) -> (Child, String) {
    let mut child = command
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let stream: Box<dyn tokio::io::AsyncRead + Unpin + Send> = if ready.contains("Ready") {
        Box::new(child.stdout.take().expect("stdout"))
    } else {
        Box::new(child.stderr.take().expect("stderr"))
    };
    let mut lines = BufReader::new(stream).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some((_, rest)) = line.split_once(ready) {
            let found = rest.trim().to_owned();
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return (child, found);
        }
    }
    panic!("{command:?} exited before it was ready");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

async fn sandgate(store_args: &[String]) -> (Child, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sandgate"));
    command
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--log",
            "warn,sandgate=info",
        ])
        .args(store_args)
        .env("SANDGATE_WEBHOOK_API_KEYS", KEY);
    let (child, address) = spawn_listening(command, "listening on http://").await;
    (
        child,
        format!("http://{address}/api/v1/webhooks/conversations"),
    )
}

async fn baseline() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("addr");
    let app = Router::new().route(
        "/api/v1/webhooks/conversations",
        post(|body: bytes::Bytes| async move {
            std::hint::black_box(body);
            axum::Json(serde_json::json!({"success": true}))
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}/api/v1/webhooks/conversations")
}

fn row(target: &str, body: &Body, concurrency: usize, outcome: &Outcome) -> String {
    let rate = outcome.requests as f64 / outcome.elapsed.as_secs_f64();
    format!(
        "| {target} | {} ({} B) | {concurrency} | {rate:.0} | {:.2} | {:.2} | {} |",
        body.name,
        body.bytes,
        outcome.latency.value_at_quantile(0.5) as f64 / 1000.0,
        outcome.latency.value_at_quantile(0.99) as f64 / 1000.0,
        outcome.errors,
    )
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let seconds: u64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let levels: Vec<usize> = std::env::var("BENCH_CONCURRENCY")
        .unwrap_or_else(|_| "1,16,64".into())
        .split(',')
        .filter_map(|level| level.trim().parse().ok())
        .collect();

    let data = tempfile::tempdir().expect("temp dir");
    let mut redis = Command::new("redis-server");
    let port = free_port();
    redis.args([
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--logfile",
        "",
    ]);
    let (_redis, _) = spawn_listening(redis, "Ready to accept connections").await;
    let (_embedded, embedded_url) =
        sandgate(&["--data-dir".into(), data.path().display().to_string()]).await;
    let (_redis_backed, redis_url) =
        sandgate(&["--redis".into(), format!("redis://127.0.0.1:{port}/")]).await;
    let baseline_url = baseline().await;

    println!("| target | body | concurrency | deliveries/s | p50 ms | p99 ms | errors |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    for body in bodies() {
        for &concurrency in &levels {
            for (target, url) in [
                ("baseline (no-op HTTP)", &baseline_url),
                ("sandgate serve, Redis", &redis_url),
                ("sandgate serve, embedded", &embedded_url),
            ] {
                // A short warm-up, then the measured run.
                load(url, &body.template, concurrency, 1).await;
                let outcome = load(url, &body.template, concurrency, seconds).await;
                println!("{}", row(target, &body, concurrency, &outcome));
            }
        }
    }
}
