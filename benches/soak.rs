//! The soak: webhook, admin and gateway traffic at fixed rates, for minutes, against one
//! `sandgate serve` on Redis, over loopback. Open loop: each traffic sends on its own
//! clock whatever the answers take, so a slowdown shows as latency, not as a lower rate.
//!
//! Every window prints each traffic's p99 and errors and the resident memory of Sandgate
//! (its highest reading, read every second) and of its Redis; the end prints each
//! traffic's p50/p99 after the warm-up and compares Sandgate's median RSS early and late
//! in the steady part. It fails (exit 1) on any error or on RSS growth above
//! `SOAK_MAX_GROWTH`.
//!
//! `scripts/soak` (or `cargo bench --bench soak`). Environment: `SOAK_SECONDS` (default
//! 300), `SOAK_WARMUP` (seconds, default 60), `SOAK_WINDOW` (seconds a row, default 15),
//! `SOAK_SCALE` (percent of the default rates, default 100), `SOAK_MAX_GROWTH` (percent,
//! default 10), `SOAK_SKIP` (traffics left out, by name, comma-separated).

#![expect(
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a benchmark: it fails loudly and prints its table"
)]

#[path = "harness/admin.rs"]
mod admin;
mod harness;
#[path = "soak/traffic.rs"]
mod traffic;
#[path = "harness/upstream.rs"]
#[expect(
    dead_code,
    reason = "the soak sends chat completions only, not the harness's other APIs"
)]
mod upstream;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use traffic::{Traffic, answer, ms};

const API_KEY: &str = "soak-api-key";
const SESSION_KEY: &str = "soak-session-key";
const MASTER_KEY: &str = "soak-master-key";
const PASSWORD: &str = "soak admin password";
/// Conversations the webhook traffic cycles through: each delivery updates one of them,
/// so the store stays the same size however long the soak runs.
const CONVERSATIONS: u64 = 1000;
/// The resident set of process `pid`, in MiB (0 when it cannot be read).
fn rss_mib(pid: Option<u32>) -> f64 {
    let status = pid
        .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| {
            value
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

fn median(readings: &[f64]) -> f64 {
    let mut sorted = readings.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(0.0)
}

fn conversation_id(n: u64) -> String {
    format!("50a50a50-0000-4000-8000-{:012}", n % CONVERSATIONS)
}

/// The n-th webhook delivery: conversation `n % CONVERSATIONS`, one status further
/// through running → paused → idle than its last delivery, and `n` ms newer than the first.
fn delivery(template: &Value, n: u64) -> Vec<u8> {
    let mut record = template.clone();
    let status = ["running", "paused", "idle"][(n / CONVERSATIONS % 3) as usize];
    let (seconds, millis) = (n / 1000, n % 1000);
    record["id"] = conversation_id(n).into();
    record["execution_status"] = status.into();
    record["updated_at"] = format!(
        "2026-03-02T{:02}:{:02}:{:02}.{millis:03}Z",
        seconds / 3600 % 24,
        seconds / 60 % 60,
        seconds % 60
    )
    .into();
    serde_json::to_vec(&record).expect("record")
}

fn pool_config(n: u64) -> Value {
    json!({
        "image": format!("ghcr.io/acme/agent:{}", n % 2),
        "command": ["/usr/local/bin/agent-server", "--port", "8000"],
        "working_dir": "/workspace",
        "environment": {"LOG_LEVEL": "info"},
        "count": 4,
    })
}

struct Soak {
    client: reqwest::Client,
    base: String,
    token: Mutex<String>,
    template: Value,
}

impl Soak {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The n-th webhook delivery (see [`delivery`]), which must answer 200.
    async fn deliver(&self, n: u64) -> Result<(), String> {
        let sent = self
            .client
            .post(self.url("/api/v1/webhooks/conversations"))
            .header("x-session-api-key", SESSION_KEY)
            .header("content-type", "application/json")
            .body(delivery(&self.template, n))
            .send()
            .await;
        answer(sent, 200).await.map(drop)
    }

    /// A GET with the credential `key: value` that must answer 200.
    async fn get(&self, path: &str, key: &str, value: &str) -> Result<(), String> {
        let sent = self
            .client
            .get(self.url(path))
            .header(key, value)
            .send()
            .await;
        answer(sent, 200).await.map(drop)
    }

    fn traffics(self: &Arc<Self>, scale: f64) -> Vec<Arc<Traffic>> {
        let soak = self.clone();
        let webhook = Traffic::new("webhook delivery", 150.0 * scale, move |n| {
            let soak = soak.clone();
            Box::pin(async move { soak.deliver(CONVERSATIONS + n).await })
        });
        let soak = self.clone();
        let read = Traffic::new("conversation read", 40.0 * scale, move |n| {
            let soak = soak.clone();
            Box::pin(async move {
                let path = format!("/api/v1/conversations/{}", conversation_id(n * 7));
                soak.get(&path, "x-session-api-key", SESSION_KEY).await
            })
        });
        let soak = self.clone();
        let configs = Traffic::new("config list", 20.0 * scale, move |_| {
            let soak = soak.clone();
            Box::pin(async move {
                soak.get("/api/warm-runtime-configs", "x-api-key", API_KEY)
                    .await
            })
        });
        let soak = self.clone();
        let save = Traffic::new("config save", 0.5 * scale, move |n| {
            let soak = soak.clone();
            Box::pin(async move {
                let token = soak.token.lock().expect("token").clone();
                let sent = soak
                    .client
                    .put(soak.url("/api/admin/warm-runtime-configs/soak"))
                    .bearer_auth(token)
                    .json(&pool_config(n))
                    .send()
                    .await;
                answer(sent, 200).await.map(drop)
            })
        });
        let soak = self.clone();
        // Below the default login rate limit (10 a minute per client).
        let login = Traffic::new("admin login", 0.1 * scale.min(1.0), move |_| {
            let soak = soak.clone();
            Box::pin(async move {
                let token = admin::try_login(&soak.client, &soak.base, PASSWORD).await?;
                *soak.token.lock().expect("token") = token;
                Ok(())
            })
        });
        let soak = self.clone();
        let sandbox = Traffic::new("sandbox start + stop", 2.0 * scale, move |n| {
            let soak = soak.clone();
            Box::pin(async move {
                let mut spec = pool_config(n);
                spec["session_id"] = format!("soak-{n}").into();
                let sent = soak
                    .client
                    .post(soak.url("/start"))
                    .header("x-api-key", API_KEY)
                    .json(&spec)
                    .send()
                    .await;
                let runtime = answer(sent, 200).await?;
                let sent = soak
                    .client
                    .post(soak.url("/stop"))
                    .header("x-api-key", API_KEY)
                    .json(&json!({"runtime_id": runtime["runtime_id"]}))
                    .send()
                    .await;
                answer(sent, 200).await.map(drop)
            })
        });
        let soak = self.clone();
        let chat = Traffic::new("chat completion", 150.0 * scale, move |n| {
            let soak = soak.clone();
            Box::pin(async move { soak.chat(n, false).await })
        });
        let soak = self.clone();
        let stream = Traffic::new("chat stream", 15.0 * scale, move |n| {
            let soak = soak.clone();
            Box::pin(async move { soak.chat(n, true).await })
        });
        vec![webhook, read, configs, save, login, sandbox, chat, stream]
    }

    async fn chat(&self, n: u64, stream: bool) -> Result<(), String> {
        let response = self
            .client
            .post(self.url("/v1/chat/completions"))
            .bearer_auth(MASTER_KEY)
            .header("content-type", "application/json")
            .header(
                "x-gateway-session-id",
                conversation_id(n).replace("50a50a50", "5e551011"),
            )
            .body(upstream::numbered(&upstream::chat("claude", stream), n))
            .send()
            .await
            .map_err(|error| error.to_string())?;
        let status = response.status();
        let body = response.bytes().await.map_err(|error| error.to_string())?;
        let complete = if stream {
            body.ends_with(b"data: [DONE]\n\n")
        } else {
            body.starts_with(b"{")
        };
        if status != 200 || !complete {
            return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
        }
        Ok(())
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let seconds = harness::env_number("SOAK_SECONDS", 300);
    let warmup = harness::env_number("SOAK_WARMUP", 60).min(seconds);
    let window = harness::env_number("SOAK_WINDOW", 15).max(1);
    let scale = harness::env_number("SOAK_SCALE", 100) as f64 / 100.0;
    let max_growth = harness::env_number("SOAK_MAX_GROWTH", 10) as f64;

    let provider = upstream::start().await;
    let config = upstream::gateway_config(&provider);
    let (redis_process, redis) = harness::redis().await;
    let (sandgate_process, base) = harness::sandgate(
        env!("CARGO_BIN_EXE_sandgate"),
        &[
            "--log".into(),
            "warn,sandgate=info".into(),
            "--redis".into(),
            redis,
            "--gateway-config".into(),
            config.path().display().to_string(),
        ],
        &[
            ("SANDGATE_WEBHOOK_API_KEYS", SESSION_KEY),
            ("DEFAULT_API_KEY", API_KEY),
            ("ADMIN_PASSWORD", PASSWORD),
            ("JWT_SECRET", "soak JWT secret, at least 32 bytes long"),
            ("PROXY_MASTER_KEY", MASTER_KEY),
        ],
    )
    .await;
    let client = reqwest::Client::new();
    let token = admin::login(&client, &base, PASSWORD).await;
    let soak = Arc::new(Soak {
        client,
        base,
        token: Mutex::new(token),
        template: serde_json::from_slice(include_bytes!(
            "../../shared/fixtures/webhook/accept/sdk158_stats_metrics.json"
        ))
        .expect("fixture"),
    });
    // Every conversation exists before the soak, so every read finds one.
    for n in 0..CONVERSATIONS {
        soak.deliver(n).await.expect("seed delivery");
    }

    let skipped = std::env::var("SOAK_SKIP").unwrap_or_default();
    let traffics: Vec<_> = soak
        .traffics(scale)
        .into_iter()
        .filter(|traffic| !skipped.split(',').any(|name| name.trim() == traffic.name))
        .collect();
    let total: f64 = traffics.iter().map(|traffic| traffic.per_second).sum();
    println!(
        "Soak: {seconds} s, {total:.0} requests/s over {} traffics, warm-up {warmup} s\n",
        traffics.len()
    );
    for traffic in &traffics {
        println!("- {}: {} /s", traffic.name, traffic.per_second);
    }
    let names: Vec<_> = traffics.iter().map(|traffic| traffic.name).collect();
    println!(
        "\n| t s | requests | errors | {} | Sandgate RSS MiB | Redis RSS MiB |",
        names.join(" p99 ms | ") + " p99 ms"
    );
    println!("|---:|---:|---:|{}---:|---:|", "---:|".repeat(names.len()));

    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let senders: Vec<_> = traffics
        .iter()
        .map(|traffic| tokio::spawn(traffic.clone().run(until)))
        .collect();
    let (sandgate_pid, redis_pid) = (sandgate_process.id(), redis_process.id());
    // Sandgate's RSS, read every second: a window reports its highest reading, and the
    // growth compares the medians of the first and the last fifth of the steady readings
    // (an allocator's momentary peaks would make any two single readings disagree).
    let mut steady_rss = Vec::new();
    let mut window_rss: f64 = 0.0;
    let mut redis_rss;
    let mut every_second = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_secs(1),
        Duration::from_secs(1),
    );
    loop {
        every_second.tick().await;
        let elapsed = started.elapsed().as_secs();
        let steady = elapsed > warmup;
        let rss = rss_mib(sandgate_pid);
        window_rss = window_rss.max(rss);
        redis_rss = rss_mib(redis_pid);
        if steady {
            steady_rss.push(rss);
        }
        if !elapsed.is_multiple_of(window) && elapsed < seconds {
            continue;
        }
        let (mut requests, mut errors, mut p99s) = (0, 0, Vec::new());
        for traffic in &traffics {
            let (sent, failed, p99) = traffic.close_window(steady);
            requests += sent;
            errors += failed;
            p99s.push(format!("{p99:.2}"));
        }
        println!(
            "| {elapsed} | {requests} | {errors} | {} | {window_rss:.1} | {redis_rss:.1} |",
            p99s.join(" | "),
        );
        window_rss = 0.0;
        if elapsed >= seconds {
            break;
        }
    }
    for sender in senders {
        sender.await.expect("sender");
    }

    println!("\nAfter the warm-up\n");
    println!("| traffic | requests | errors | p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|---:|");
    let mut errors = 0;
    for traffic in &traffics {
        let stats = traffic.stats.lock().expect("stats");
        errors += stats.errors;
        println!(
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} |",
            traffic.name,
            stats.steady.len(),
            stats.errors,
            ms(&stats.steady, 0.5),
            ms(&stats.steady, 0.99),
            stats.steady.max() as f64 / 1000.0
        );
        if let Some(error) = &stats.first_error {
            println!("  first error of {}: {error}", traffic.name);
        }
    }
    let fifth = (steady_rss.len() / 5).max(1);
    let baseline = median(&steady_rss[..fifth.min(steady_rss.len())]);
    let end = median(&steady_rss[steady_rss.len().saturating_sub(fifth)..]);
    let peak = steady_rss.iter().copied().fold(0.0, f64::max);
    let growth = (end - baseline) / baseline * 100.0;
    println!(
        "\nSandgate RSS (median of the first and the last fifth of the steady readings): \
         {baseline:.1} MiB → {end:.1} MiB ({growth:+.1} %), peak {peak:.1} MiB; Redis \
         {redis_rss:.1} MiB at the end"
    );
    let failed = errors > 0 || growth > max_growth;
    println!(
        "{}",
        if failed {
            format!("FAILED: {errors} errors, RSS growth {growth:+.1} % (limit {max_growth} %)")
        } else {
            format!("passed: no errors, RSS growth {growth:+.1} % (limit {max_growth} %)")
        }
    );
    // `exit` runs no destructors: the children are stopped here, not left running.
    for mut child in [sandgate_process, redis_process] {
        drop(child.kill().await);
    }
    if failed {
        std::process::exit(1);
    }
}
