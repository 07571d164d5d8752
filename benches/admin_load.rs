//! Runtime management under load: `GET /api/warm-runtime-configs` with 100 saved
//! configurations, and admin logins at the default PBKDF2 iteration count, each beside a
//! baseline measured in the same run (this machine is shared and noisy: compare ratios).
//!
//! `cargo bench --bench admin_load`. Environment: `BENCH_SECONDS` (per run, default 5),
//! `BENCH_CONCURRENCY` (default `1,16,64`), `BENCH_LOGIN_SECONDS` (default 10).

#![expect(clippy::expect_used, reason = "a benchmark fails loudly")]
#![expect(clippy::print_stdout, reason = "a benchmark prints its table")]

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use hdrhistogram::Histogram;
use sandgate_runtime_api::admin::login::{DEFAULT_PBKDF2_ITERATIONS, login_hash};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const API_KEY: &str = "bench-api-key";
const PASSWORD: &str = "bench admin password";
const CONFIGS: usize = 100;

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

async fn sandgate(store_args: &[String]) -> (Child, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sandgate"));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--log", "warn"])
        .args(store_args)
        .env("ADMIN_PASSWORD", PASSWORD)
        .env("JWT_SECRET", "bench JWT secret, at least 32 bytes long")
        .env("DEFAULT_API_KEY", API_KEY)
        .env_remove("PBKDF2_ITERATIONS");
    let (child, address) = spawn_listening(command, "listening on http://").await;
    (child, format!("http://{address}"))
}

/// One admin login, end to end: challenge, the client's PBKDF2, the server's check.
async fn login(client: &reqwest::Client, base: &str) -> String {
    let challenge: Value = client
        .get(format!("{base}/api/admin/challenge"))
        .send()
        .await
        .expect("challenge")
        .json()
        .await
        .expect("challenge JSON");
    let nonce = challenge["challenge"]
        .as_str()
        .expect("challenge")
        .to_owned();
    let hash = tokio::task::spawn_blocking(move || {
        login_hash(
            PASSWORD,
            challenge["salt"].as_str().expect("salt"),
            challenge["challenge"].as_str().expect("challenge"),
            challenge["iterations"].as_u64().expect("iterations") as u32,
        )
    })
    .await
    .expect("hash");
    let response = client
        .post(format!("{base}/api/admin/login"))
        .json(&json!({ "challenge": nonce, "hash": hash }))
        .send()
        .await
        .expect("login");
    assert_eq!(response.status(), 200, "login failed");
    let body: Value = response.json().await.expect("token JSON");
    body["token"].as_str().expect("token").to_owned()
}

/// A realistic configuration: the installer default's shape, with its environment.
fn config(n: usize) -> Value {
    json!({
        "image": format!("ghcr.io/acme/agent-{n}:1.0"),
        "working_dir": "/workspace/project",
        "command": ["/usr/local/bin/openhands-agent-server", "--port", "60000"],
        "environment": {
            "OH_WEBHOOKS_0_BASE_URL": "https://app.example.com/api/v1/webhooks",
            "OH_ALLOW_CORS_ORIGINS_0": "https://app.example.com",
            "OH_CONVERSATIONS_PATH": "/workspace/conversations",
            "OH_BASH_EVENTS_DIR": "/workspace/bash_events",
            "SSL_CERT_FILE": "/etc/ssl/certs/ca-bundle.crt",
            "LOG_JSON": "true",
            "OH_ENABLE_VNC": "false",
            "OH_PRELOAD_TOOLS": "false"
        },
        "count": 1, "run_as_user": 1000, "run_as_group": 1000, "fs_group": 1000
    })
}

async fn fill(client: &reqwest::Client, base: &str) -> usize {
    let token = login(client, base).await;
    for n in 0..CONFIGS {
        let response = client
            .put(format!("{base}/api/admin/warm-runtime-configs/config-{n}"))
            .bearer_auth(&token)
            .json(&config(n))
            .send()
            .await
            .expect("put");
        assert_eq!(response.status(), 200, "save config-{n}");
    }
    let list = client
        .get(format!("{base}/api/warm-runtime-configs"))
        .header("x-api-key", API_KEY)
        .send()
        .await
        .expect("list")
        .bytes()
        .await
        .expect("list body");
    list.len()
}

/// The baseline: a no-op server answering bytes of the list's size.
async fn baseline(size: usize) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("addr");
    let body = bytes::Bytes::from(vec![b' '; size]);
    let app = Router::new().route(
        "/api/warm-runtime-configs",
        get(move || {
            let body = body.clone();
            async move { ([(http::header::CONTENT_TYPE, "application/json")], body) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

struct Outcome {
    requests: u64,
    errors: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
}

/// Closed-loop GETs of the list, `concurrency` keep-alive connections, for `seconds`.
async fn load(base: &str, concurrency: usize, seconds: u64) -> Outcome {
    let address = base.trim_start_matches("http://").to_owned();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut workers = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let stream = tokio::net::TcpStream::connect(&address)
            .await
            .expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .expect("handshake");
        tokio::spawn(connection);
        let stop = stop.clone();
        workers.push(tokio::spawn(async move {
            let mut latency =
                Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
            let (mut requests, mut errors) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let request = http::Request::get("/api/warm-runtime-configs")
                    .header("host", "bench")
                    .header("x-api-key", API_KEY)
                    .body(http_body_util::Empty::<bytes::Bytes>::new())
                    .expect("request");
                let sent = Instant::now();
                let ok = match sender.send_request(request).await {
                    Ok(response) => {
                        response.status() == 200
                            && http_body_util::BodyExt::collect(response.into_body())
                                .await
                                .is_ok()
                    }
                    Err(_) => false,
                };
                latency.saturating_record(sent.elapsed().as_micros() as u64);
                requests += 1;
                errors += u64::from(!ok);
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

/// Logins per second with `concurrency` clients, and their median latency.
async fn logins(base: &str, concurrency: usize, seconds: u64) -> (f64, f64) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let base = base.to_owned();
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let mut times = Vec::new();
                while Instant::now() < deadline {
                    let sent = Instant::now();
                    login(&client, &base).await;
                    times.push(sent.elapsed().as_secs_f64());
                }
                times
            })
        })
        .collect();
    let mut times = Vec::new();
    for worker in workers {
        times.extend(worker.await.expect("worker"));
    }
    times.sort_by(f64::total_cmp);
    let rate = times.len() as f64 / started.elapsed().as_secs_f64();
    (rate, times.get(times.len() / 2).copied().unwrap_or(0.0))
}

/// The same work without a server: PBKDF2 derivations per second on `concurrency`
/// threads — what one login costs the client alone.
async fn derivations(concurrency: usize, seconds: u64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            tokio::task::spawn_blocking(move || {
                let mut done = 0u64;
                while Instant::now() < deadline {
                    std::hint::black_box(login_hash(
                        PASSWORD,
                        "00112233445566778899aabbccddeeff",
                        "challenge",
                        DEFAULT_PBKDF2_ITERATIONS,
                    ));
                    done += 1;
                }
                done
            })
        })
        .collect();
    let mut done = 0;
    for worker in workers {
        done += worker.await.expect("worker");
    }
    done as f64 / started.elapsed().as_secs_f64()
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let seconds = env_number("BENCH_SECONDS", 5);
    let login_seconds = env_number("BENCH_LOGIN_SECONDS", 10);
    let levels: Vec<usize> = std::env::var("BENCH_CONCURRENCY")
        .unwrap_or_else(|_| "1,16,64".into())
        .split(',')
        .filter_map(|level| level.trim().parse().ok())
        .collect();

    let data = tempfile::tempdir().expect("temp dir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let mut redis = Command::new("redis-server");
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
    let (_embedded, embedded) =
        sandgate(&["--data-dir".into(), data.path().display().to_string()]).await;
    let (_redis_backed, redis_backed) =
        sandgate(&["--redis".into(), format!("redis://127.0.0.1:{port}/")]).await;
    let client = reqwest::Client::new();
    let size = fill(&client, &embedded).await;
    assert_eq!(fill(&client, &redis_backed).await, size);
    let baseline = baseline(size).await;

    println!("GET /api/warm-runtime-configs, {CONFIGS} configurations ({size} B answer)\n");
    println!("| target | concurrency | requests/s | p50 ms | p99 ms | errors |");
    println!("|---|---:|---:|---:|---:|---:|");
    for &concurrency in &levels {
        for (target, base) in [
            ("baseline (static bytes)", &baseline),
            ("sandgate serve, Redis", &redis_backed),
            ("sandgate serve, embedded", &embedded),
        ] {
            load(base, concurrency, 1).await;
            let outcome = load(base, concurrency, seconds).await;
            println!(
                "| {target} | {concurrency} | {:.0} | {:.2} | {:.2} | {} |",
                outcome.requests as f64 / outcome.elapsed.as_secs_f64(),
                outcome.latency.value_at_quantile(0.5) as f64 / 1000.0,
                outcome.latency.value_at_quantile(0.99) as f64 / 1000.0,
                outcome.errors,
            );
        }
    }

    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    println!("\nAdmin logins at {DEFAULT_PBKDF2_ITERATIONS} iterations, {cores} clients\n");
    println!("| target | per second | median s |");
    println!("|---|---:|---:|");
    let alone = derivations(cores, login_seconds).await;
    println!(
        "| baseline: PBKDF2 derivations alone | {alone:.2} | {:.3} |",
        cores as f64 / alone
    );
    for (target, base) in [
        ("login, Redis (client hash + server check)", &redis_backed),
        ("login, embedded (client hash + server check)", &embedded),
    ] {
        let (rate, median) = logins(base, cores, login_seconds).await;
        println!("| {target} | {rate:.2} | {median:.3} |");
    }
}
