//! The ledger's reads at scale (issue 52): the conversations page (`GET /api/ledger/rollup
//! ?by=conversation`, 50 rows) and the rollup by team, over 100,000 conversations counted
//! in the last 30 days, each beside a conversation's own ledger read in the same run (one
//! conversation's rows: what a page's read would cost if it did not grow with the days'
//! conversations). Redis and the embedded store.
//!
//! The counts are written through the store, as the gateway and the runtime API write
//! them (each conversation: its calls, tokens, spend and sandbox time; its team, user, key
//! and model), before the server reads them.
//!
//! `cargo bench --bench ledger_load`. Environment: `BENCH_CONVERSATIONS` (default
//! 100000), `BENCH_REQUESTS` (per cell, default 200).

#![expect(clippy::expect_used, reason = "a benchmark fails loudly")]
#![expect(clippy::print_stdout, reason = "a benchmark prints its table")]

#[path = "harness/admin.rs"]
mod admin;
mod harness;

use std::time::Instant;

use sandgate_store::{LedgerCount, LedgerScope, Measure, Store};
use tokio::process::Child;

const PASSWORD: &str = "bench admin password";
const DAYS: u32 = 30;
const TEAMS: usize = 100;

async fn sandgate(store_args: &[String]) -> (Child, String) {
    let mut args = vec!["--log".to_owned(), "warn,sandgate=info".to_owned()];
    args.extend_from_slice(store_args);
    harness::sandgate(
        env!("CARGO_BIN_EXE_sandgate"),
        &args,
        &[
            ("ADMIN_PASSWORD", PASSWORD),
            ("JWT_SECRET", "bench JWT secret, at least 32 bytes long"),
            ("PBKDF2_ITERATIONS", "1000"),
        ],
    )
    .await
}

fn today() -> u32 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    sandgate_store::day_of(now)
}

/// Conversation `n`'s counts, on a day of the last 30: what its calls and its sandbox
/// added to it and to its team, user, key and model.
fn counts(n: usize, today: u32) -> Vec<LedgerCount> {
    let day = today - (n as u32 % DAYS);
    let count = |scope, id: String, measure, amount| LedgerCount {
        day,
        scope,
        id,
        measure,
        amount,
    };
    let conversation = format!("{:032x}", n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let calls = [
        (Measure::Calls, 12.0),
        (Measure::PromptTokens, 48_000.0),
        (Measure::CompletionTokens, 3_600.0),
        (Measure::Spend, 0.42),
    ];
    let mut all = Vec::new();
    for (measure, amount) in calls {
        all.push(count(
            LedgerScope::Conversation,
            conversation.clone(),
            measure,
            amount,
        ));
        all.push(count(
            LedgerScope::Team,
            format!("team-{}", n % TEAMS),
            measure,
            amount,
        ));
        all.push(count(
            LedgerScope::User,
            format!("user-{}", n % 5_000),
            measure,
            amount,
        ));
        all.push(count(
            LedgerScope::Key,
            format!("key-{}", n % 5_000),
            measure,
            amount,
        ));
        all.push(count(
            LedgerScope::Model,
            format!("model-{}", n % 4),
            measure,
            amount,
        ));
    }
    all.push(count(
        LedgerScope::Conversation,
        conversation.clone(),
        Measure::RunningMs,
        600_000.0,
    ));
    all.push(count(
        LedgerScope::Conversation,
        conversation.clone(),
        Measure::Webhooks,
        40.0,
    ));
    all.push(count(
        LedgerScope::Conversation,
        conversation,
        Measure::Events,
        300.0,
    ));
    all
}

async fn fill(store: &Store, conversations: usize, batch: usize) {
    let today = today();
    for start in (0..conversations).step_by(batch) {
        let counts: Vec<_> = (start..(start + batch).min(conversations))
            .flat_map(|n| counts(n, today))
            .collect();
        store.ledger.add_ledger(&counts).await.expect("add");
    }
}

/// The median and 90th percentile, in milliseconds, of `requests` sequential GETs of `path`.
async fn latency(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    path: &str,
    requests: u64,
) -> (f64, f64) {
    let mut times = Vec::new();
    for round in 0..requests + 5 {
        let started = Instant::now();
        let response = client
            .get(format!("{base}{path}"))
            .bearer_auth(token)
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), 200, "{path}");
        response.bytes().await.expect("body");
        if round >= 5 {
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.9))
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let conversations = harness::env_number("BENCH_CONVERSATIONS", 100_000) as usize;
    let requests = harness::env_number("BENCH_REQUESTS", 200);
    // `--fill-embedded <dir>`: this process fills the embedded store there, and exits,
    // letting go of the database for the server.
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|arg| arg == "--fill-embedded") {
        let data_dir = std::path::PathBuf::from(&args[at + 1]);
        let store = Store::open(&sandgate_store::Backend::Embedded { data_dir })
            .await
            .expect("store");
        fill(&store, conversations, 10_000).await;
        return;
    }

    let (_redis, redis) = harness::redis().await;
    let data = tempfile::tempdir().expect("temp dir");
    let started = Instant::now();
    let store = Store::open(&sandgate_store::Backend::Redis {
        url: redis.clone(),
        tls: Default::default(),
        min_replicas_ack: 0,
    })
    .await
    .expect("store");
    fill(&store, conversations, 500).await;
    let filled = tokio::process::Command::new(std::env::current_exe().expect("bench"))
        .arg("--fill-embedded")
        .arg(data.path())
        .status()
        .await
        .expect("fill");
    assert!(filled.success(), "the embedded store's fill failed");
    println!(
        "{conversations} conversations over {DAYS} days written to both stores in {:.1} s\n",
        started.elapsed().as_secs_f64()
    );
    let (_embedded, embedded) =
        sandgate(&["--data-dir".into(), data.path().display().to_string()]).await;
    let (_redis_backed, redis_backed) = sandgate(&["--redis".into(), redis]).await;
    let client = reqwest::Client::new();
    let middle = format!(
        "{:032x}",
        (conversations / 2).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    );
    let one = format!("{:032x}", 7usize.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let cells = [
        (
            "a conversation's ledger (reference)",
            format!("/api/ledger/conversations/{one}"),
        ),
        (
            "conversations page, first",
            "/api/ledger/rollup?by=conversation&limit=50".to_owned(),
        ),
        (
            "conversations page, after an id",
            format!("/api/ledger/rollup?by=conversation&limit=50&after={middle}"),
        ),
        ("rollup by team", "/api/ledger/rollup?by=team".to_owned()),
        (
            "rollup by user, first page",
            "/api/ledger/rollup?by=user&limit=100".to_owned(),
        ),
    ];
    println!("| store | read | p50 ms | p90 ms |");
    println!("|---|---|---:|---:|");
    for (store, base) in [("Redis", &redis_backed), ("embedded", &embedded)] {
        let token = admin::login(&client, base, PASSWORD).await;
        let page = client
            .get(format!("{base}/api/ledger/rollup?by=conversation&limit=50"))
            .bearer_auth(&token)
            .send()
            .await
            .expect("page")
            .json::<serde_json::Value>()
            .await
            .expect("JSON");
        assert_eq!(page["total_rows"], conversations as u64, "{store}");
        for (read, path) in &cells {
            let (p50, p90) = latency(&client, base, &token, path, requests).await;
            println!("| {store} | {read} | {p50:.2} | {p90:.2} |");
        }
    }
}
