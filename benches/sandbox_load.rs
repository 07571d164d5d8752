//! Warm pools on the local driver: `/start` latency when it claims a warm sandbox versus
//! when it cold-starts one, beside a no-op HTTP baseline in the same run, and the time
//! from a configuration save to a full pool.
//!
//! The local driver runs no containers, so these figures are Sandgate's own cost: the
//! claim (a compare-and-swap in the store), the bookkeeping of a cold start, and the
//! reconciler's reaction. On Kubernetes a cold start adds the pod's scheduling, image pull
//! and boot (tens of seconds), which a claim avoids.
//!
//! `cargo bench --bench sandbox_load` (needs `redis-server`). Environment: `BENCH_STARTS`
//! (starts timed per kind, default 200), `BENCH_POOL` (pool size, default 50),
//! `BENCH_SAVES` (saves timed, default 10), `BENCH_SECONDS` (each rate run, default 5),
//! `BENCH_CONCURRENCY` (default `1,16,64`), `BENCH_SANDGATE` (`label=path,…`: release
//! builds measured one after the other in one run; default the current build).

#![expect(clippy::expect_used, reason = "a benchmark fails loudly")]
#![expect(clippy::print_stdout, reason = "a benchmark prints its table")]

#[path = "harness/admin.rs"]
mod admin;
#[path = "harness/binaries.rs"]
mod binaries;
#[path = "harness/closed_loop.rs"]
mod closed_loop;
mod harness;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::Full;
use serde_json::{Value, json};

const API_KEY: &str = "bench-api-key";
const PASSWORD: &str = "bench admin password";
const ITERATIONS: u32 = 1000;

fn spec(image: &str, session: &str) -> Value {
    json!({
        "image": image,
        "command": ["/usr/local/bin/agent-server", "--port", "8000"],
        "working_dir": "/workspace",
        "environment": {"LOG_LEVEL": "info", "OH_WEBHOOKS_0_BASE_URL": "http://app/hooks"},
        "session_id": session,
    })
}

fn config(image: &str, count: u64) -> Value {
    let mut body = spec(image, "");
    let object = body.as_object_mut().expect("object");
    object.remove("session_id");
    object.insert("count".into(), count.into());
    body
}

/// `(ready, target)` of the pool `name`.
async fn pool(client: &reqwest::Client, base: &str, name: &str) -> (i64, i64) {
    let body: Value = client
        .get(format!("{base}/api/warm-runtime-pools"))
        .header("x-api-key", API_KEY)
        .send()
        .await
        .expect("pools")
        .json()
        .await
        .expect("JSON");
    body["pools"]
        .as_array()
        .expect("pools")
        .iter()
        .find(|pool| pool["name"] == name)
        .map_or((0, -1), |pool| {
            (
                pool["ready"].as_i64().expect("ready"),
                pool["target"].as_i64().expect("target"),
            )
        })
}

/// Saves `image` as the pool `bench` and waits (polling every 2 ms) until it is full.
async fn save_until_full(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    image: &str,
    count: u64,
) -> Duration {
    let saved = Instant::now();
    let response = client
        .put(format!("{base}/api/admin/warm-runtime-configs/bench"))
        .bearer_auth(token)
        .json(&config(image, count))
        .send()
        .await
        .expect("save");
    assert_eq!(response.status(), 200, "save failed");
    loop {
        let (ready, target) = pool(client, base, "bench").await;
        if target == count as i64 && ready == target {
            return saved.elapsed();
        }
        assert!(
            saved.elapsed() < Duration::from_secs(60),
            "the pool never filled"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Times `count` starts made by `body(i)`, one at a time; how many were claims.
async fn starts(
    client: &reqwest::Client,
    base: &str,
    count: u64,
    body: impl Fn(u64) -> Value,
) -> (Histogram<u64>, u64) {
    let mut times = closed_loop::histogram();
    let mut claims = 0;
    for i in 0..count {
        let request = client
            .post(format!("{base}/start"))
            .header("x-api-key", API_KEY)
            .json(&body(i));
        let sent = Instant::now();
        let response = request.send().await.expect("start");
        assert_eq!(response.status(), 200, "start failed");
        let answer: Value = response.json().await.expect("JSON");
        times.saturating_record(sent.elapsed().as_micros() as u64);
        claims += u64::from(answer["warm"] == true);
    }
    (times, claims)
}

fn ms(times: &Histogram<u64>, quantile: f64) -> f64 {
    times.value_at_quantile(quantile) as f64 / 1000.0
}

/// A no-op server answering `/start` with a static runtime: the floor of this client,
/// machine and HTTP path.
async fn baseline() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("addr");
    let answer = json!({"runtime_id": "0123456789abcdef0123", "status": "running"}).to_string();
    let app = Router::new().route(
        "/start",
        post(move |_: axum::body::Bytes| {
            let answer = answer.clone();
            async move { answer }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let count = harness::env_number("BENCH_STARTS", 200);
    let pool_size = harness::env_number("BENCH_POOL", 50);
    let saves = harness::env_number("BENCH_SAVES", 10);
    let client = reqwest::Client::new();
    let floor = baseline().await;

    println!("| store | kind | starts | claimed | p50 ms | p99 ms |");
    println!("|---|---|---:|---:|---:|---:|");
    let (times, _) = starts(&client, &floor, count, |i| spec("img", &format!("s{i}"))).await;
    println!(
        "| — | baseline (no-op HTTP) | {count} | — | {:.3} | {:.3} |",
        ms(&times, 0.5),
        ms(&times, 0.99)
    );

    let mut save_rows = Vec::new();
    let mut rate_rows = Vec::new();
    let (_redis, redis_url) = harness::redis().await;
    let data = tempfile::tempdir().expect("temp dir");
    let builds = binaries::from_env(env!("CARGO_BIN_EXE_sandgate"));
    let targets = builds
        .iter()
        .enumerate()
        .flat_map(|(index, (label, binary))| {
            // Each build its own database.
            let redis = format!("{redis_url}{index}");
            let dir = data.path().join(index.to_string()).display().to_string();
            [
                (
                    format!("{label}Redis"),
                    binary,
                    vec!["--redis".to_owned(), redis],
                ),
                (
                    format!("{label}embedded"),
                    binary,
                    vec!["--data-dir".to_owned(), dir],
                ),
            ]
        });
    for (store, binary, store_args) in targets {
        let mut args = vec![
            "--log".to_owned(),
            "warn,sandgate=info".to_owned(),
            "--reconcile-interval".to_owned(),
            "3600".to_owned(),
            "--local-sandbox-start-seconds".to_owned(),
            "0.001".to_owned(),
        ];
        args.extend(store_args);
        let (_sandgate, base) = harness::sandgate(
            binary,
            &args,
            &[
                ("ADMIN_PASSWORD", PASSWORD),
                ("JWT_SECRET", "bench JWT secret, at least 32 bytes long"),
                ("DEFAULT_API_KEY", API_KEY),
                ("PBKDF2_ITERATIONS", &ITERATIONS.to_string()),
            ],
        )
        .await;
        let token = admin::login(&client, &base, PASSWORD).await;

        // Save to full pool: every save changes the image, so the pool is replaced whole.
        let mut times = closed_loop::histogram();
        for round in 0..saves {
            let took = save_until_full(
                &client,
                &base,
                &token,
                &format!("ghcr.io/acme/agent:{round}"),
                pool_size,
            )
            .await;
            times.saturating_record(took.as_micros() as u64);
        }
        save_rows.push(format!(
            "| {store} | {pool_size} | {saves} | {:.1} | {:.1} |",
            ms(&times, 0.5),
            ms(&times, 1.0)
        ));

        // Claims: a pool as large as the starts, so that every start finds one ready.
        let image = "ghcr.io/acme/agent:claims";
        save_until_full(&client, &base, &token, image, count).await;
        let (times, claims) = starts(&client, &base, count, |i| {
            spec(image, &format!("claim-{i}"))
        })
        .await;
        println!(
            "| {store} | claim | {count} | {claims} | {:.3} | {:.3} |",
            ms(&times, 0.5),
            ms(&times, 0.99)
        );
        let (times, claims) = starts(&client, &base, count, |i| {
            spec("ghcr.io/acme/unpooled:1", &format!("cold-{i}"))
        })
        .await;
        println!(
            "| {store} | cold start | {count} | {claims} | {:.3} | {:.3} |",
            ms(&times, 0.5),
            ms(&times, 0.99)
        );
        let sessions = Arc::new(AtomicU64::new(0));
        for concurrency in closed_loop::concurrency_levels() {
            let sessions = sessions.clone();
            let next = move || {
                let n = sessions.fetch_add(1, Ordering::Relaxed);
                http::Request::post("/start")
                    .header("host", "bench")
                    .header("content-type", "application/json")
                    .header("x-api-key", API_KEY)
                    .body(Full::new(Bytes::from(
                        spec("ghcr.io/acme/unpooled:2", &format!("rate-{n}")).to_string(),
                    )))
                    .expect("request")
            };
            let seconds = harness::env_number("BENCH_SECONDS", 5);
            let outcome = closed_loop::load(&base, concurrency, seconds, next).await;
            rate_rows.push(format!(
                "| {store} | {concurrency} | {:.0} | {:.3} | {:.3} | {} |",
                outcome.rate(),
                outcome.ms(0.5),
                outcome.ms(0.99),
                outcome.errors
            ));
        }
    }

    println!("\nCold starts per second, closed loop (each a new session)\n");
    println!("| store | concurrency | starts/s | p50 ms | p99 ms | errors |");
    println!("|---|---:|---:|---:|---:|---:|");
    for row in rate_rows {
        println!("{row}");
    }

    println!("\nConfiguration save → full pool (each save a new image: the old pool is culled)\n");
    println!("| store | pool size | saves | median ms | max ms |");
    println!("|---|---:|---:|---:|---:|");
    for row in save_rows {
        println!("{row}");
    }
}
