//! Webhook deliveries per second through the real binary, side by side with a baseline in
//! the same run: a no-op HTTP server that reads the same bodies and answers `{"success":true}`
//! (the floor this machine and this load generator allow).
//!
//! `cargo bench --bench webhook_load` (needs `redis-server`; `scripts/test` installs it).
//! Each request carries a new conversation id, so every delivery is a real write.
//! Environment: `BENCH_SECONDS` (per run, default 5), `BENCH_CONCURRENCY` (default `1,16,64`),
//! `BENCH_BODIES` (`small`, `large`; default both), `BENCH_BACKENDS` (`redis`, `embedded`;
//! default both), `BENCH_ROUNDS` (how many times each cell runs, interleaved; default 1) and
//! `BENCH_SANDGATE` (`label=path,…`: release binaries to compare side by side in one run,
//! e.g. a copy of the previous build against the current one; default the current build).

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
    /// What `BENCH_BODIES` selects it by.
    key: &'static str,
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

/// A ≈9 KB record (the "≈10 KB real fixture" of the issue) made of real parts: `sdk158_stats_metrics` with the skills and tools
/// of `sdk158_agent_context_skills`, the hooks of `sdk158_hooks_full`, and the analyzer,
/// secrets, tags and MCP servers of `kitchen_sink`.
fn ten_kilobyte_record() -> Value {
    let mut record = fixture("sdk158_stats_metrics");
    let skills = fixture("sdk158_agent_context_skills");
    let kitchen_sink = fixture("kitchen_sink");
    record["agent"]["agent_context"] = skills["agent"]["agent_context"].clone();
    record["agent"]["tools"] = skills["agent"]["tools"].clone();
    record["agent"]["mcp_config"] = kitchen_sink["agent"]["mcp_config"].clone();
    record["hook_config"] = fixture("sdk158_hooks_full")["hook_config"].clone();
    for key in [
        "security_analyzer",
        "secret_registry",
        "tags",
        "confirmation_policy",
    ] {
        record[key] = kitchen_sink[key].clone();
    }
    record
}

fn bodies() -> Vec<Body> {
    let small = fixture("status_idle");
    let large = ten_kilobyte_record();
    vec![
        Body {
            key: "small",
            name: "small",
            bytes: small.to_string().len(),
            template: small,
        },
        Body {
            key: "large",
            name: "≈9 KB real record",
            bytes: large.to_string().len(),
            template: large,
        },
    ]
}

/// Deliveries of `template`, each a new conversation (a repeated body would be an
/// idempotent no-op): the serialized template with a fresh id written over its own.
struct Deliveries {
    bytes: Vec<u8>,
    id_at: usize,
}

const PLACEHOLDER_ID: &str = "00000000-0000-4000-8000-000000000000";

impl Deliveries {
    fn new(template: &Value) -> Self {
        let mut body = template.clone();
        body["id"] = PLACEHOLDER_ID.into();
        let bytes = body.to_string().into_bytes();
        let id_at = String::from_utf8_lossy(&bytes)
            .find(PLACEHOLDER_ID)
            .expect("the id is in the body");
        Self { bytes, id_at }
    }

    fn next(&self) -> bytes::Bytes {
        let mut bytes = self.bytes.clone();
        let id = uuid::Uuid::new_v4().hyphenated().to_string();
        bytes[self.id_at..self.id_at + id.len()].copy_from_slice(id.as_bytes());
        bytes::Bytes::from(bytes)
    }
}

struct Outcome {
    requests: u64,
    errors: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
}

/// One keep-alive HTTP/1.1 connection: hyper's bare client, so that the load generator
/// costs the machine as little as possible.
async fn connect(
    url: &str,
) -> hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>> {
    let address = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("host:port")
        .to_owned();
    let stream = tokio::net::TcpStream::connect(&address)
        .await
        .expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("handshake");
    tokio::spawn(connection);
    sender
}

/// Closed-loop load: `concurrency` workers, each on its own connection, sending its next
/// body as soon as the previous answer arrived, for `seconds`.
async fn load(url: &str, template: &Value, concurrency: usize, seconds: u64) -> Outcome {
    let stop = Arc::new(AtomicBool::new(false));
    let path = format!(
        "/{}",
        url.trim_start_matches("http://")
            .split_once('/')
            .map_or("", |(_, path)| path)
    );
    let started = Instant::now();
    let mut workers = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let mut sender = connect(url).await;
        let (path, stop) = (path.clone(), stop.clone());
        let deliveries = Deliveries::new(template);
        workers.push(tokio::spawn(async move {
            let mut latency =
                Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
            let (mut requests, mut errors) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let body = deliveries.next();
                let request = http::Request::post(path.as_str())
                    .header("host", "bench")
                    .header("content-type", "application/json")
                    .header("x-session-api-key", KEY)
                    .body(http_body_util::Full::new(body))
                    .expect("request");
                let sent = Instant::now();
                let answer = match sender.send_request(request).await {
                    Ok(response) => {
                        let ok = response.status() == 200;
                        let drained = http_body_util::BodyExt::collect(response.into_body())
                            .await
                            .is_ok();
                        ok && drained
                    }
                    Err(_) => false,
                };
                latency.saturating_record(sent.elapsed().as_micros() as u64);
                requests += 1;
                if !answer {
                    errors += 1;
                }
            }
            (requests, errors, latency)
        }));
    }
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

async fn sandgate(binary: &str, store_args: &[String]) -> (Child, String) {
    let mut command = Command::new(binary);
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

    let bodies_wanted = std::env::var("BENCH_BODIES").unwrap_or_else(|_| "small,large".into());
    let backends = std::env::var("BENCH_BACKENDS").unwrap_or_else(|_| "redis,embedded".into());
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let binaries: Vec<(String, String)> = match std::env::var("BENCH_SANDGATE") {
        Ok(list) => list
            .split(',')
            .map(|entry| {
                let (label, path) = entry.split_once('=').expect("BENCH_SANDGATE: label=path");
                (format!("{label}, "), path.to_owned())
            })
            .collect(),
        Err(_) => vec![(String::new(), env!("CARGO_BIN_EXE_sandgate").to_owned())],
    };

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
    let baseline_url = baseline().await;
    let mut targets = vec![("baseline (no-op HTTP)".to_owned(), None, baseline_url)];
    for (index, (label, binary)) in binaries.iter().enumerate() {
        if backends.contains("redis") {
            // Each binary gets its own database, so one's records do not slow the other's.
            let redis_url = format!("redis://127.0.0.1:{port}/{index}");
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

    println!("| target | body | concurrency | deliveries/s | p50 ms | p99 ms | errors |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    for body in bodies() {
        if !bodies_wanted
            .split(',')
            .any(|wanted| wanted.trim() == body.key)
        {
            continue;
        }
        for &concurrency in &levels {
            for _ in 0..rounds {
                for (target, _, url) in &targets {
                    // A short warm-up, then the measured run.
                    load(url, &body.template, concurrency, 1).await;
                    let outcome = load(url, &body.template, concurrency, seconds).await;
                    println!("{}", row(target, &body, concurrency, &outcome));
                }
            }
        }
    }
}
