//! Instructions Sandgate executes per call, counted by callgrind: stable on a machine
//! whose neighbours move every timing by ×2. `sandgate serve` runs under
//! `valgrind --tool=callgrind`; for each kind of call (a non-streamed chat completion, a
//! streamed one of 30 chunks sent as fast as the upstream can (a burst), the same paced
//! 10 ms apart (a model generating: under callgrind Sandgate relays an event in about a
//! millisecond, so that each is relayed before the next comes), a webhook delivery of a
//! new conversation) this bench makes
//! a warm-up, zeroes the counters (`callgrind_control --zero`), makes the calls one after
//! the other, waits for what they leave behind (the spend log's batch, the ledger's),
//! and dumps the counters (`callgrind_control --dump`): their total over the calls.
//! `BENCH_CALLGRIND_DIR=dir` keeps the dumps there, one per kind in that order, for
//! `callgrind_annotate --inclusive=yes dir/callgrind.out.<pid>.<n>`.

use std::path::Path;
use std::time::Duration;

use http_body_util::BodyExt;
use serde_json::Value;
use tokio::process::Command;

use super::{MASTER_KEY, harness, proxies};

const WEBHOOK_KEY: &str = "bench-webhook-key";
const WARMUP: u64 = 50;

/// A webhook delivery of a new conversation.
fn delivery() -> bytes::Bytes {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/webhook/accept/status_idle.json");
    let mut record: Value =
        serde_json::from_slice(&std::fs::read(&fixture).expect("the fixture")).expect("JSON");
    record["id"] = uuid::Uuid::new_v4().to_string().into();
    bytes::Bytes::from(record.to_string())
}

type Sender = hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>;

/// One call of `kind` on `sender`'s connection, read to its end.
async fn call(sender: &mut Sender, key: &str, kind: &str, n: u64) {
    let request = match kind {
        "webhook delivery" => http::Request::post("/api/v1/webhooks/conversations")
            .header("x-session-api-key", WEBHOOK_KEY)
            .body(http_body_util::Full::new(delivery())),
        "paced streamed chat completion" => http::Request::post("/v1/chat/completions")
            .header("authorization", format!("Bearer {key}"))
            .body(http_body_util::Full::new(proxies::paced_chat_body(n))),
        _ => http::Request::post("/v1/chat/completions")
            .header("authorization", format!("Bearer {key}"))
            .body(http_body_util::Full::new(proxies::chat_body(
                kind == "streamed chat completion",
                n,
            ))),
    };
    let request = {
        let mut request = request.expect("request");
        request
            .headers_mut()
            .insert("content-type", "application/json".parse().expect("header"));
        request
            .headers_mut()
            .insert("host", "bench".parse().expect("header"));
        request
    };
    sender.ready().await.expect("the connection");
    let response = sender.send_request(request).await.expect("a call");
    assert!(
        response.status().is_success(),
        "{kind}: {}",
        response.status()
    );
    response.into_body().collect().await.expect("the answer");
}

/// The total of the last dump's counters (`summary:` or `totals:`), in instructions.
fn dumped_total(dir: &Path, before: &[std::path::PathBuf]) -> u64 {
    let dump = std::fs::read_dir(dir)
        .expect("the dumps")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| !before.contains(path))
        .find(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("callgrind.out"))
        })
        .expect("a new dump");
    let text = std::fs::read_to_string(&dump).expect("the dump");
    text.lines()
        .find_map(|line| {
            line.strip_prefix("summary:")
                .or_else(|| line.strip_prefix("totals:"))
        })
        .and_then(|total| total.split_whitespace().next()?.parse().ok())
        .expect("the dump's total")
}

async fn control(pid: u32, what: &str) {
    let status = Command::new("callgrind_control")
        .arg(what)
        .arg(pid.to_string())
        .stdout(std::process::Stdio::null())
        .status()
        .await
        .expect("callgrind_control");
    assert!(status.success(), "callgrind_control {what}");
}

/// Counts, for each kind of call, the instructions of `calls` calls, and prints them
/// per call.
pub async fn count(config: &tempfile::NamedTempFile, store_args: &[String], calls: u64) {
    // `BENCH_CALLGRIND_DIR`: where the dumps stay, for `callgrind_annotate`.
    let temp = tempfile::tempdir().expect("dumps dir");
    let dir = std::env::var_os("BENCH_CALLGRIND_DIR")
        .map_or_else(|| temp.path().to_path_buf(), std::path::PathBuf::from);
    let mut command = Command::new("valgrind");
    command
        .args(["--tool=callgrind", "--dump-instr=no"])
        .arg(format!(
            "--callgrind-out-file={}/callgrind.out.%p",
            dir.display()
        ))
        .arg(env!("CARGO_BIN_EXE_sandgate"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--log",
            "warn,sandgate=info",
        ])
        .args(store_args)
        .arg("--gateway-config")
        .arg(config.path())
        .env("PROXY_MASTER_KEY", MASTER_KEY)
        .env("SANDGATE_WEBHOOK_API_KEYS", WEBHOOK_KEY);
    let (child, address) = harness::spawn_listening(command, "listening on http://").await;
    let pid = child.id().expect("valgrind's pid");
    let base = format!("http://{address}");
    let key = proxies::budgeted_key(&base, MASTER_KEY).await;
    println!("| call | instructions per call ({calls} calls, after {WARMUP}) |");
    println!("|---|---:|");
    let mut n = 0;
    for kind in [
        "chat completion",
        "streamed chat completion",
        "paced streamed chat completion",
        "webhook delivery",
    ] {
        // One connection, kept alive, as clients do.
        let mut sender = super::closed_loop::connect(&base).await;
        for _ in 0..WARMUP {
            n += 1;
            call(&mut sender, &key, kind, n).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        control(pid, "--zero").await;
        for _ in 0..calls {
            n += 1;
            call(&mut sender, &key, kind, n).await;
        }
        // What the calls leave to batches written just after them.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let before: Vec<_> = std::fs::read_dir(&dir)
            .expect("dumps")
            .map(|entry| entry.expect("entry").path())
            .collect();
        control(pid, "--dump").await;
        let total = dumped_total(&dir, &before);
        println!("| {kind} | {:.0} |", total as f64 / calls as f64);
    }
    drop(child);
}
