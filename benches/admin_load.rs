//! Runtime management under load: `GET /api/warm-runtime-configs` with 100 saved
//! configurations, and admin logins at the default PBKDF2 iteration count, each beside a
//! baseline measured in the same run (this machine is shared and noisy: compare ratios).
//!
//! `cargo bench --bench admin_load`. Environment: `BENCH_SECONDS` (per run, default 5),
//! `BENCH_CONCURRENCY` (default `1,16,64`), `BENCH_LOGIN_SECONDS` (default 10).

#![expect(clippy::expect_used, reason = "a benchmark fails loudly")]
#![expect(clippy::print_stdout, reason = "a benchmark prints its table")]

#[path = "harness/admin.rs"]
mod admin;
#[path = "harness/closed_loop.rs"]
mod closed_loop;
mod harness;

use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use sandgate_runtime_api::admin::login::{DEFAULT_PBKDF2_ITERATIONS, login_hash};
use serde_json::{Value, json};
use tokio::process::Child;

const API_KEY: &str = "bench-api-key";
const PASSWORD: &str = "bench admin password";
const CONFIGS: usize = 100;

async fn sandgate(store_args: &[String]) -> (Child, String) {
    let mut args = vec!["--log".to_owned(), "warn,sandgate=info".to_owned()];
    args.extend_from_slice(store_args);
    harness::sandgate(
        env!("CARGO_BIN_EXE_sandgate"),
        &args,
        &[
            ("ADMIN_PASSWORD", PASSWORD),
            ("JWT_SECRET", "bench JWT secret, at least 32 bytes long"),
            ("DEFAULT_API_KEY", API_KEY),
            ("PBKDF2_ITERATIONS", &DEFAULT_PBKDF2_ITERATIONS.to_string()),
        ],
    )
    .await
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
    let token = admin::login(client, base, PASSWORD).await;
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

fn list_request() -> http::Request<http_body_util::Full<bytes::Bytes>> {
    http::Request::get("/api/warm-runtime-configs")
        .header("host", "bench")
        .header("x-api-key", API_KEY)
        .body(http_body_util::Full::default())
        .expect("request")
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
                    admin::login(&client, &base, PASSWORD).await;
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

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let seconds = harness::env_number("BENCH_SECONDS", 5);
    let login_seconds = harness::env_number("BENCH_LOGIN_SECONDS", 10);
    let levels = closed_loop::concurrency_levels();

    let data = tempfile::tempdir().expect("temp dir");
    let (_redis, redis) = harness::redis().await;
    let (_embedded, embedded) =
        sandgate(&["--data-dir".into(), data.path().display().to_string()]).await;
    let (_redis_backed, redis_backed) = sandgate(&["--redis".into(), redis]).await;
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
            closed_loop::load(base, concurrency, 1, list_request).await;
            let outcome = closed_loop::load(base, concurrency, seconds, list_request).await;
            println!(
                "| {target} | {concurrency} | {:.0} | {:.2} | {:.2} | {} |",
                outcome.rate(),
                outcome.ms(0.5),
                outcome.ms(0.99),
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
