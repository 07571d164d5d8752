//! The real OpenHands app server (openhands-ai 1.11.0) on Sandgate: the seconds from a
//! new conversation to its first answer, cold (the pool empty) against warm (a sandbox of
//! the pool claimed and personalised at `/init`), and Sandgate's share of a warm start
//! (its `/start`: the claim and the personalisation).
//!
//! Sandgate runs each sandbox on its `process` driver: a real agent-server (the app
//! server's own release) on this machine, the LLM a fake one behind Sandgate's gateway.
//! `tests/real_clients/app_server_drive.py --bench N` drives the app server through its
//! REST API, as in the end-to-end test (`tests/e2e/app_server.rs`), one cold and one warm
//! conversation a round.
//!
//! `cargo bench --bench app_server` (needs what `scripts/install-real-clients` installs,
//! and Chromium: `scripts/test` installs both). Environment: `BENCH_ROUNDS` (default 3).

#![expect(clippy::expect_used, reason = "a benchmark fails loudly")]
#![expect(clippy::print_stdout, reason = "a benchmark prints its table")]

#[expect(dead_code, reason = "the shared harness: this bench uses part of it")]
mod harness;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

const API_KEY: &str = "bench-runtime-api-key-0123456789abcdef";
const MASTER_KEY: &str = "sk-bench-master-key-0123456789abcdef";
const POOL: &str = "v1_current";

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

#[tokio::main]
async fn main() {
    let rounds = harness::env_number("BENCH_ROUNDS", 3).max(1);
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = repository.join(".tools/app-server/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/install-real-clients",
        python.display()
    );
    let data = tempfile::tempdir().expect("data dir");
    let warm_file = data.path().join("warm-runtimes.json");
    // Empty: the driver, as the operator, defines the pool (Sandgate reloads the file).
    std::fs::write(&warm_file, json!({"count": 0, "configs": []}).to_string()).expect("write");
    let args: Vec<String> = [
        "--data-dir",
        &data.path().display().to_string(),
        "--default-api-key",
        API_KEY,
        "--sandbox-driver",
        "process",
        "--sandbox-port",
        "60000",
        "--warm-runtimes-file",
        &warm_file.display().to_string(),
        "--reconcile-interval",
        "0.5",
        "--proxy-master-key",
        MASTER_KEY,
        "--gateway-allowed-upstream-hosts",
        "127.0.0.1",
    ]
    .map(str::to_owned)
    .to_vec();
    // The interpreter of the venvs (pyenv's, under /root on a new machine): every
    // sandbox may read it, as an operator would grant (SANDBOX_READ_ONLY_PATHS).
    let mut args = args;
    if let Some(prefix) = std::fs::canonicalize(&python)
        .ok()
        .and_then(|real| Some(real.parent()?.parent()?.to_path_buf()))
    {
        args.extend([
            "--sandbox-read-only-paths".to_owned(),
            prefix.display().to_string(),
        ]);
    }
    let (mut sandgate, url) = harness::sandgate(env!("CARGO_BIN_EXE_sandgate"), &args, &[]).await;

    let output = tokio::process::Command::new(&python)
        .arg(repository.join("tests/real_clients/app_server_drive.py"))
        .args([
            "--url",
            &url,
            "--api-key",
            API_KEY,
            "--master-key",
            MASTER_KEY,
        ])
        .arg("--warm-runtimes-file")
        .arg(&warm_file)
        .args(["--pool", POOL, "--bench", &rounds.to_string()])
        .output()
        .await
        .expect("run the driver");
    // Its sandboxes stop with it: a SIGTERM, not the SIGKILL of a drop.
    if let Some(pid) = sandgate.id() {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        let _ = tokio::time::timeout(Duration::from_secs(30), sandgate.wait()).await;
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the driver failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rounds: Vec<Value> = stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|step| step["step"] == "round")
        .collect();
    let figure = |launch: &str, field: &str| -> Vec<f64> {
        rounds
            .iter()
            .map(|round| round[launch][field].as_f64().expect("a figure"))
            .collect()
    };
    println!(
        "| round | cold: first answer | warm: first answer | warm / cold | warm: Sandgate's /start | its share of the warm start |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for round in &rounds {
        let cold = round["cold"]["first_answer_s"].as_f64().expect("cold");
        let warm = round["warm"]["first_answer_s"].as_f64().expect("warm");
        let start = round["warm"]["sandgate_start_s"].as_f64().expect("start");
        assert_eq!(round["warm_pool"], POOL, "the warm start claimed: {round}");
        println!(
            "| {} | {cold:.2} s | {warm:.2} s | {:.2} | {:.1} ms | {:.1} % |",
            round["index"],
            warm / cold,
            start * 1000.0,
            100.0 * start / warm
        );
    }
    let (cold, warm, start) = (
        median(figure("cold", "first_answer_s")),
        median(figure("warm", "first_answer_s")),
        median(figure("warm", "sandgate_start_s")),
    );
    println!(
        "| median of {} | {cold:.2} s | {warm:.2} s | {:.2} | {:.1} ms | {:.1} % |",
        rounds.len(),
        warm / cold,
        start * 1000.0,
        100.0 * start / warm
    );
}
