//! Webhook deliveries per second through the real binary, side by side with a baseline in
//! the same run: a no-op HTTP server that reads the same bodies and answers `{"success":true}`
//! (the floor this machine and this load generator allow).
//!
//! `cargo bench --bench webhook_load` (needs `redis-server`; `scripts/test` installs it).
//! Each request carries a new conversation id, so every delivery is a real write.
//! Environment: `BENCH_SECONDS` (per run, default 5), `BENCH_CONCURRENCY` (default `1,16,64`),
//! `BENCH_BODIES` (`small`, `large`; default both), `BENCH_BACKENDS` (`redis`, `embedded`,
//! `replicated`: Redis with a replica and `--redis-min-replicas-ack 1`, and `cluster`: a
//! Redis Cluster of three masters; default the first two), `BENCH_ROUNDS` (how many times each cell runs, interleaved; default 1) and
//! `BENCH_SANDGATE` (`label=path,…`: release binaries to compare side by side in one run,
//! e.g. a copy of the previous build against the current one; default the current build).

#![expect(
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a benchmark: it fails loudly and prints its table"
)]

#[path = "harness/binaries.rs"]
mod binaries;
#[path = "harness/closed_loop.rs"]
mod closed_loop;
#[path = "harness/cluster.rs"]
mod cluster;
mod harness;
#[path = "harness/replica.rs"]
mod replica;

use std::sync::Arc;

use axum::Router;
use axum::routing::post;
use closed_loop::Outcome;
use serde_json::Value;

const PATH: &str = "/api/v1/webhooks/conversations";
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

/// A delivery of a new conversation per request, with the test key.
fn delivery(deliveries: &Arc<Deliveries>) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    http::Request::post(PATH)
        .header("host", "bench")
        .header("content-type", "application/json")
        .header("x-session-api-key", KEY)
        .body(http_body_util::Full::new(deliveries.next()))
        .expect("request")
}

async fn load(base: &str, template: &Value, concurrency: usize, seconds: u64) -> Outcome {
    let deliveries = Arc::new(Deliveries::new(template));
    closed_loop::load(base, concurrency, seconds, move || delivery(&deliveries)).await
}

async fn sandgate(binary: &str, store_args: &[String]) -> (tokio::process::Child, String) {
    let mut args = vec!["--log".to_owned(), "warn,sandgate=info".to_owned()];
    args.extend_from_slice(store_args);
    // Every delivery is a new conversation: the bound on a sender's new conversations
    // (which would answer most of them 429 within a second) is off.
    let env = [
        ("SANDGATE_WEBHOOK_API_KEYS", KEY),
        ("WEBHOOK_NEW_CONVERSATIONS_RATE", "0"),
    ];
    harness::sandgate(binary, &args, &env).await
}

async fn baseline() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("addr");
    let app = Router::new().route(
        PATH,
        post(|body: bytes::Bytes| async move {
            std::hint::black_box(body);
            axum::Json(serde_json::json!({"success": true}))
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

fn row(target: &str, body: &Body, concurrency: usize, outcome: &Outcome) -> String {
    format!(
        "| {target} | {} ({} B) | {concurrency} | {:.0} | {:.2} | {:.2} | {} |",
        body.name,
        body.bytes,
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
    let seconds = harness::env_number("BENCH_SECONDS", 5);
    let levels = closed_loop::concurrency_levels();

    let bodies_wanted = std::env::var("BENCH_BODIES").unwrap_or_else(|_| "small,large".into());
    let backends = std::env::var("BENCH_BACKENDS").unwrap_or_else(|_| "redis,embedded".into());
    let rounds = harness::env_number("BENCH_ROUNDS", 1);
    let binaries = binaries::from_env(env!("CARGO_BIN_EXE_sandgate"));

    let data = tempfile::tempdir().expect("temp dir");
    let (_redis, redis) = harness::redis().await;
    let _replica = if backends.contains("replicated") {
        Some(replica::redis_replica(&redis).await)
    } else {
        None
    };
    let baseline_url = baseline().await;
    let mut targets = vec![("baseline (no-op HTTP)".to_owned(), None, baseline_url)];
    // Kept running until the end.
    let mut clusters = Vec::new();
    for (index, (label, binary)) in binaries.iter().enumerate() {
        if backends.contains("redis") {
            // Each binary gets its own database, so one's records do not slow the other's.
            let redis_url = format!("{redis}{index}");
            let (child, url) = sandgate(binary, &["--redis".into(), redis_url]).await;
            targets.push((format!("{label}sandgate serve, Redis"), Some(child), url));
        }
        if backends.contains("replicated") {
            // Databases of their own again, past the plain Redis targets'.
            let redis_url = format!("{redis}{}", index + binaries.len());
            let args = [
                "--redis".into(),
                redis_url,
                "--redis-min-replicas-ack".into(),
                "1".into(),
            ];
            let (child, url) = sandgate(binary, &args).await;
            targets.push((
                format!("{label}sandgate serve, Redis + replica, min-replicas-ack 1"),
                Some(child),
                url,
            ));
        }
        if backends.contains("cluster") {
            // A cluster has one database: one cluster per binary.
            let (nodes, redis_url) = cluster::redis_cluster(3).await;
            clusters.push(nodes);
            let (child, url) = sandgate(binary, &["--redis".into(), redis_url]).await;
            targets.push((
                format!("{label}sandgate serve, Redis Cluster (3 masters)"),
                Some(child),
                url,
            ));
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
