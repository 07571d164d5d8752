//! What virtual keys cost a call: chat completions through `sandgate serve` with the
//! master key against the same build with a virtual key whose budgets (the key's, the
//! session's, its user's, its team's and its membership's) are enforced, each call
//! admitted with a hold of its largest possible cost on all five and settled when it
//! ends (against this replica's shares of the five budgets: a store round trip for a new
//! share, not per call; the settlement is written as the answer's last event leaves,
//! summed with those of the calls that end meanwhile; the key, its user and its team are
//! kept between calls), on Redis and on the embedded store, in one run.
//!
//! Each round runs the two keys' cells back to back, the one that goes first alternating.
//! Reports each round's requests per second and p50, then per store and concurrency the
//! medians of the rounds' ratios and added p50s, which the issue holds to ≥ 0.9× the
//! master key's rate at concurrency 64 and ≤ +0.05 ms at concurrency 1, and of Sandgate's
//! CPU time per call (the scheduler's count for its process: what neighbours on a shared
//! machine move least); and fails unless
//! the spend of each virtual key, its user, its team and its membership is exactly its
//! calls at the configuration's prices.
//!
//! `cargo bench --bench gateway_keys` (needs `redis-server`). Environment:
//! `BENCH_SECONDS` (per cell, default 5), `BENCH_ROUNDS` (default 5), `BENCH_KEY_ONLY`
//! (set: a virtual key of no user or team).

#![expect(
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a benchmark: it fails loudly and prints its table"
)]

#[path = "harness/closed_loop.rs"]
#[expect(dead_code, reason = "the shared harness: this bench uses part of it")]
mod closed_loop;
#[path = "harness/cpu.rs"]
mod cpu;
mod harness;
#[path = "harness/medians.rs"]
mod medians;
#[path = "harness/upstream.rs"]
#[expect(dead_code, reason = "the shared harness: this bench uses part of it")]
mod upstream;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bytes::Bytes;
use http_body_util::Full;

const MASTER_KEY: &str = "bench-master-key";

fn request(body: &Bytes, key: &str) -> http::Request<Full<Bytes>> {
    http::Request::post("/v1/chat/completions")
        .header("host", "bench")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {key}"))
        .header(
            "x-gateway-session-id",
            "0f0e0d0c-0b0a-4908-8706-050403020100",
        )
        .body(Full::new(body.clone()))
        .expect("request")
}

const TEAM: &str = "bench-team";
const USER: &str = "bench-user";

/// `POST {base}{path}` with the master key; its answer.
async fn managed(base: &str, path: &str, body: serde_json::Value) -> serde_json::Value {
    let response = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .bearer_auth(MASTER_KEY)
        .json(&body)
        .send()
        .await
        .expect(path);
    assert!(
        response.status().is_success(),
        "{path}: {}",
        response.status()
    );
    response.json().await.expect("JSON")
}

/// A virtual key of `base` with budgets it never reaches, of a user and a team
/// with budgets too (and a budget of the user in the team), so that each call is admitted
/// against the five scopes (key, session, user, team, membership: held) and settled.
async fn virtual_key(base: &str, orgs: bool) -> String {
    if !orgs {
        let generated = managed(base, "/key/generate", key_budgets(None)).await;
        return generated["key"].as_str().expect("a key").to_owned();
    }
    managed(
        base,
        "/team/new",
        serde_json::json!({"team_id": TEAM, "max_budget": 1e12}),
    )
    .await;
    managed(
        base,
        "/user/new",
        serde_json::json!({"user_id": USER, "max_budget": 1e12, "auto_create_key": false}),
    )
    .await;
    managed(
        base,
        "/team/member_add",
        serde_json::json!({"team_id": TEAM, "member": {"user_id": USER, "role": "user"},
                           "max_budget_in_team": 1e12}),
    )
    .await;
    let generated = managed(base, "/key/generate", key_budgets(Some((TEAM, USER)))).await;
    generated["key"].as_str().expect("a key").to_owned()
}

/// A `/key/generate` body with budgets never reached, of `owners` (a team and a user) when
/// given. No rate limit: a call counted per call (`max_parallel_requests`, `rpm_limit`,
/// `tpm_limit`) still makes the store's admission on its path.
fn key_budgets(owners: Option<(&str, &str)>) -> serde_json::Value {
    let mut body = serde_json::json!({
        "models": ["claude"],
        "max_budget": 1e12,
        "budget_duration": "30d",
        "max_budget_per_session": 1e12,
    });
    if let Some((team, user)) = owners {
        body["team_id"] = team.into();
        body["user_id"] = user.into();
    }
    body
}

/// What one call costs the key: the upstream's usage (11 prompt and 7 completion tokens)
/// at the configuration's prices.
const CALL_COST: f64 = 11.0 * 0.000_003 + 7.0 * 0.000_015;

/// The spend `path`'s answer shows at `pointer` (the key's at `/key/info`, the team's
/// at `/team/info`), once it stops changing (spend is written in batches after the
/// answers).
async fn settled_spend(base: &str, path: &str, pointer: &str) -> f64 {
    let client = reqwest::Client::new();
    let mut last = f64::NAN;
    loop {
        let info: serde_json::Value = client
            .get(format!("{base}{path}"))
            .bearer_auth(MASTER_KEY)
            .send()
            .await
            .expect(path)
            .json()
            .await
            .expect("JSON");
        let spend = info
            .pointer(pointer)
            .and_then(serde_json::Value::as_f64)
            .expect("spend");
        if spend == last {
            return spend;
        }
        last = spend;
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let seconds = harness::env_number("BENCH_SECONDS", 5);
    // `BENCH_KEY_ONLY=1`: the virtual key alone, of no user or team (two fewer record
    // reads and three fewer scopes a call).
    let orgs = std::env::var_os("BENCH_KEY_ONLY").is_none();
    let rounds = harness::env_number("BENCH_ROUNDS", 5);
    let direct = upstream::start().await;
    let config = upstream::gateway_config(&direct);
    let (_redis, redis) = harness::redis().await;
    let data = tempfile::tempdir().expect("data dir");
    let mut gateways = Vec::new();
    for (store, args) in [
        ("Redis", vec!["--redis".to_owned(), redis]),
        (
            "embedded",
            vec!["--data-dir".to_owned(), data.path().display().to_string()],
        ),
    ] {
        let mut args = args;
        args.extend([
            "--log".to_owned(),
            "warn,sandgate=info".to_owned(),
            "--gateway-config".to_owned(),
            config.path().display().to_string(),
        ]);
        let (child, url) = harness::sandgate(
            env!("CARGO_BIN_EXE_sandgate"),
            &args,
            &[("PROXY_MASTER_KEY", MASTER_KEY)],
        )
        .await;
        let key = virtual_key(&url, orgs).await;
        gateways.push((store, child, url, key));
    }
    let body = upstream::chat("claude", false);
    println!("Chat completions with the master key and with a budgeted virtual key\n");
    println!(
        "| store | concurrency | round | master key req/s | virtual key req/s | ratio | master p50 ms | virtual p50 ms | added p50 ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    // The calls each virtual key made, warm-ups included: what it must have been charged.
    let mut charged = vec![0_u64; gateways.len()];
    // Per store and concurrency, each round's ratio, added p50 and ratio of Sandgate's CPU
    // time per call.
    let mut summary = Vec::new();
    for concurrency in [1, 64] {
        for (index, (store, child, url, key)) in gateways.iter().enumerate() {
            let (mut ratios, mut added, mut cpu_ratios) = (Vec::new(), Vec::new(), Vec::new());
            for round in 1..=rounds {
                // Which key goes first alternates from round to round, so that the order
                // (a store warmed by the cell before, a neighbour arriving) favours neither.
                let mut keys = [MASTER_KEY, key.as_str()];
                if round % 2 == 0 {
                    keys.reverse();
                }
                let mut outcomes = Vec::new();
                for key in keys {
                    let (body, key) = (body.clone(), key.to_owned());
                    let virtual_key = key != MASTER_KEY;
                    let calls = Arc::new(AtomicU64::new(0));
                    let next = move || {
                        request(
                            &upstream::numbered(&body, calls.fetch_add(1, Relaxed)),
                            &key,
                        )
                    };
                    let warm = closed_loop::load(url, concurrency, 1, next.clone()).await;
                    let before = cpu::cpu_use(child.id());
                    let outcome = closed_loop::load(url, concurrency, seconds, next).await;
                    let used = cpu::cpu_use(child.id())
                        .zip(before)
                        .map_or(f64::NAN, |(after, before)| (after[0] - before[0]) as f64);
                    assert_eq!(warm.errors + outcome.errors, 0, "{store}: errors");
                    if virtual_key {
                        charged[index] += warm.requests + outcome.requests;
                    }
                    let per_call = used / outcome.requests as f64;
                    outcomes.push((virtual_key, outcome, per_call));
                }
                outcomes.sort_by_key(|(virtual_key, ..)| *virtual_key);
                let [(_, master, master_cpu), (_, by_key, key_cpu)] = &outcomes[..] else {
                    unreachable!("two outcomes")
                };
                ratios.push(by_key.rate() / master.rate());
                added.push(by_key.ms(0.5) - master.ms(0.5));
                cpu_ratios.push(key_cpu / master_cpu);
                println!(
                    "| {store} | {concurrency} | {round} | {:.0} | {:.0} | {:.3} | {:.3} | {:.3} | {:+.3} | {:.1} / {:.1} ({:.3}) |",
                    master.rate(),
                    by_key.rate(),
                    by_key.rate() / master.rate(),
                    master.ms(0.5),
                    by_key.ms(0.5),
                    by_key.ms(0.5) - master.ms(0.5),
                    master_cpu / 1e3,
                    key_cpu / 1e3,
                    key_cpu / master_cpu,
                );
            }
            summary.push((*store, concurrency, ratios, added, cpu_ratios));
        }
    }
    println!("\nMedians of the {rounds} rounds (range)\n");
    println!(
        "| store | concurrency | virtual / master req/s | added p50 ms | virtual / master CPU per call |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (store, concurrency, ratios, added, cpu_ratios) in &summary {
        println!(
            "| {store} | {concurrency} | {:.3} ({}) | {:+.3} ({}) | {:.3} ({}) |",
            medians::median(ratios),
            medians::range(ratios, 3),
            medians::median(added),
            medians::range(added, 3),
            medians::median(cpu_ratios),
            medians::range(cpu_ratios, 3),
        );
    }
    // The virtual key, its user and its team were charged every call it made: the load
    // measured is the real one.
    println!();
    for ((store, _, url, key), calls) in gateways.iter().zip(charged) {
        let expected = calls as f64 * CALL_COST;
        let owners = [
            ("key", format!("/key/info?key={key}"), "/info/spend"),
            (
                "user",
                format!("/user/info?user_id={USER}"),
                "/user_info/spend",
            ),
            (
                "team",
                format!("/team/info?team_id={TEAM}"),
                "/team_info/spend",
            ),
            (
                "membership",
                format!("/team/info?team_id={TEAM}"),
                "/team_memberships/0/spend",
            ),
        ];
        let checked = if orgs { owners.len() } else { 1 };
        for (owner, path, pointer) in &owners[..checked] {
            let spend = settled_spend(url, path, pointer).await;
            println!(
                "{store}: {calls} calls with the virtual key, its {owner}'s spend {spend:.6} (expected {expected:.6})"
            );
            assert!(
                (spend - expected).abs() <= expected * 1e-9,
                "{store}: the {owner} was charged {spend}, not {expected} for {calls} calls"
            );
        }
    }
}
