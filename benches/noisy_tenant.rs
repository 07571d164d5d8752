//! One tenant's reads with another tenant's flood present, against the same reads without
//! it, in one run (issue 40): tenant B posts large records naming A's conversation as
//! their parent and carrying A's tag; A reads its own small record and runs its `?tag=`
//! query. Each figure is the median of several rounds' median latencies; the ratio
//! (with flood / without) is what the run says, not the milliseconds.
//!
//! `cargo bench --bench noisy_tenant` (needs `redis-server`; `scripts/test` installs it).
//! Environment: `BENCH_FLOOD` (B's records, default 24), `BENCH_FLOOD_MB` (each, default 4),
//! `BENCH_ROUNDS` (default 15), `BENCH_REQUESTS` (per round, default 50), `BENCH_BACKENDS`
//! (`redis`, `embedded`; default both).

#![expect(
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a benchmark: it fails loudly and prints its table"
)]

mod harness;

use std::time::Instant;

use serde_json::{Value, json};

const KEY_A: &str = "tenant-a-key";
const KEY_B: &str = "tenant-b-key";

/// A conversation as the agent-server posts it (the shared webhook fixture, about 3 KB).
fn record(fixture: &Value, id: &str, parent: Option<&str>, title: &str) -> Value {
    let mut body = fixture.clone();
    body["id"] = id.into();
    body["title"] = title.into();
    body["tags"] = json!({"team": "a"});
    body["parent_conversation_id"] = parent.into();
    body
}

/// `accept/agent_basic_idle` of the shared webhook fixtures (`SANDGATE_FIXTURES` or
/// `../shared/fixtures/webhook`).
fn fixture() -> Value {
    let root = std::env::var("SANDGATE_FIXTURES").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/webhook").to_owned()
    });
    let path = format!("{root}/accept/agent_basic_idle.json");
    serde_json::from_slice(&std::fs::read(&path).expect("the webhook fixture")).expect("JSON")
}

async fn deliver(client: &reqwest::Client, url: &str, key: &str, body: &Value) {
    let response = client
        .post(format!("{url}/api/v1/webhooks/conversations"))
        .header("x-session-api-key", key)
        .json(body)
        .send()
        .await
        .expect("deliver");
    assert_eq!(
        response.status(),
        200,
        "{}",
        response.text().await.unwrap_or_default()
    );
}

/// The median latency, in ms, of `requests` sequential GETs of `path` as tenant A.
async fn round(client: &reqwest::Client, url: &str, path: &str, requests: u64) -> f64 {
    let mut latencies = Vec::with_capacity(requests as usize);
    for _ in 0..requests {
        let started = Instant::now();
        let response = client
            .get(format!("{url}{path}"))
            .header("x-session-api-key", KEY_A)
            .send()
            .await
            .expect("get");
        assert_eq!(response.status(), 200);
        std::hint::black_box(response.bytes().await.expect("body"));
        latencies.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    median(&mut latencies)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The median over `rounds` of each path's round median, the paths interleaved.
async fn measure(
    client: &reqwest::Client,
    url: &str,
    paths: &[String],
    rounds: u64,
    requests: u64,
) -> Vec<f64> {
    let mut per_path = vec![Vec::new(); paths.len()];
    for _ in 0..rounds {
        for (path, medians) in paths.iter().zip(&mut per_path) {
            medians.push(round(client, url, path, requests).await);
        }
    }
    per_path.iter_mut().map(|medians| median(medians)).collect()
}

/// Peak resident memory of a process, from /proc (Linux), in MB.
fn peak_rss_mb(pid: Option<u32>) -> f64 {
    let status = pid
        .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| {
            value
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let flood = harness::env_number("BENCH_FLOOD", 24);
    let flood_mb = harness::env_number("BENCH_FLOOD_MB", 4) as usize;
    let rounds = harness::env_number("BENCH_ROUNDS", 15);
    let requests = harness::env_number("BENCH_REQUESTS", 50);
    let backends = std::env::var("BENCH_BACKENDS").unwrap_or_else(|_| "redis,embedded".into());
    let binary = env!("CARGO_BIN_EXE_sandgate");
    let client = reqwest::Client::new();
    let fixture = fixture();
    let data = tempfile::tempdir().expect("temp dir");
    let (_redis, redis) = harness::redis().await;
    let keys = format!("{KEY_A},{KEY_B}");
    let envs = [("SANDGATE_WEBHOOK_API_KEYS", keys.as_str())];

    println!(
        "Tenant B posts {flood} records of {flood_mb} MB naming A's conversation as parent, with A's tag.\n"
    );
    println!("| store | A's read | without B's flood, ms | with it, ms | ratio |");
    println!("|---|---|---:|---:|---:|");
    for backend in ["redis", "embedded"]
        .into_iter()
        .filter(|b| backends.contains(b))
    {
        let args = match backend {
            "redis" => vec!["--redis".to_owned(), redis.clone()],
            _ => vec!["--data-dir".to_owned(), data.path().display().to_string()],
        };
        let mut store_args = vec!["--log".to_owned(), "warn,sandgate=info".to_owned()];
        store_args.extend(args);
        let (child, url) = harness::sandgate(binary, &store_args, &envs).await;
        let parent = uuid::Uuid::new_v4().to_string();
        deliver(
            &client,
            &url,
            KEY_A,
            &record(&fixture, &parent, None, "mine"),
        )
        .await;
        let paths = [
            format!("/api/v1/conversations/{parent}"),
            "/api/v1/conversations?tag=team:a".to_owned(),
        ];
        let quiet = measure(&client, &url, &paths, rounds, requests).await;
        let large = "x".repeat(flood_mb * 1024 * 1024);
        for _ in 0..flood {
            let id = uuid::Uuid::new_v4().to_string();
            deliver(
                &client,
                &url,
                KEY_B,
                &record(&fixture, &id, Some(&parent), &large),
            )
            .await;
        }
        let flooded = measure(&client, &url, &paths, rounds, requests).await;
        for ((name, quiet), flooded) in ["its record", "`?tag=team:a`"]
            .iter()
            .zip(quiet)
            .zip(flooded)
        {
            println!(
                "| {backend} | {name} | {quiet:.2} | {flooded:.2} | {:.2}× |",
                flooded / quiet
            );
        }
        println!(
            "| {backend} | peak RSS of `sandgate serve` | | {:.0} MB | |",
            peak_rss_mb(child.id())
        );
    }
}
