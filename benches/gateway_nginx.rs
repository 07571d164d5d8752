//! The model gateway against a plain proxy, measured as an operator choosing a gateway
//! would: `wrk` (one thread, a warm-up, then the cell) against the upstream alone, nginx
//! from Debian proxying to it (a keep-alive upstream pool, buffering off) and
//! `sandgate serve` calling it with a virtual key carrying a budget (the realistic call:
//! the key checked, the call admitted against its budget with a hold, settled, its spend
//! counted and logged), on Redis. Non-streamed chat completions at concurrency 1 (p50) and
//! 64 (requests/s); a streamed answer of 30 chunks at concurrency 1, the time to its
//! first chunk and to its last (p50, by this bench's own client: `wrk` times whole
//! answers). Beside them, each target's own CPU per call and its threads' wake-ups per
//! call over each measured cell (the scheduler's counts: what a proxy costs the machine,
//! steadier than a rate on a shared one). Rounds interleaved; the figures are medians
//! of the rounds.
//!
//! `cargo bench --bench gateway_nginx` (needs `wrk`, `nginx` and `redis-server`:
//! `apt-get install wrk nginx redis-server`). Environment: `BENCH_SECONDS` (per cell,
//! default 6), `BENCH_WARMUP` (seconds before each cell, default 2), `BENCH_ROUNDS`
//! (default 3), `BENCH_STREAMS` (streamed calls per cell, default 1000),
//! `BENCH_STORE` (`redis`, the default, or `embedded`), `BENCH_KEY` (`virtual`, the
//! default, or `master`: the master key, no budget), `BENCH_LEDGER` (`on`, the default,
//! or `off`: Sandgate with `--ledger off`, what the ledger's upkeep costs).
//!
//! With `BENCH_CALLGRIND=N` it counts instead the instructions Sandgate executes per call
//! (callgrind, stable where time is not): `sandgate serve` under valgrind, N calls of
//! each kind (a non-streamed call, a streamed one in a burst, a streamed one paced, a
//! webhook delivery) after a warm-up,
//! the counters zeroed before and dumped after each kind (see `gateway_nginx/callgrind.rs`).
//!
//! With `BENCH_HOLD=1` it measures nothing: it starts the three targets, prints their
//! addresses, processes and the key, and keeps them up until it is stopped, for a profiler
//! attached by hand (`perf record -p`, `perf stat -e 'syscalls:sys_enter_*' -p`) while
//! `wrk` loads one of them.

#![expect(
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a benchmark: it fails loudly and prints its table"
)]

#[path = "gateway_nginx/callgrind.rs"]
mod callgrind;
#[path = "harness/closed_loop.rs"]
#[expect(dead_code, reason = "the shared harness: this bench uses part of it")]
mod closed_loop;
#[path = "harness/cpu.rs"]
mod cpu;
mod harness;
#[path = "gateway_nginx/proxies.rs"]
mod proxies;

use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};

const MASTER_KEY: &str = "bench-master-key";

/// What each target is, and where it listens.
struct Target {
    name: &'static str,
    base: String,
    /// The path of chat completions there.
    path: &'static str,
    /// The process that serves it.
    pid: u32,
    /// Whether its children serve too (nginx's workers).
    children: bool,
}

impl Target {
    /// The processes whose CPU a call uses.
    fn pids(&self) -> Vec<u32> {
        let mut pids = if self.children {
            proxies::children(self.pid)
        } else {
            Vec::new()
        };
        pids.push(self.pid);
        pids
    }
}

/// One round's figures of a target.
#[derive(Clone, Copy, Default)]
struct Figures {
    p50_c1_ms: f64,
    rate_c64: f64,
    /// CPU per call (µs) of the target's processes, and their threads' wake-ups per call.
    cpu_c1_us: f64,
    cpu_c64_us: f64,
    runs_c1: f64,
    first_chunk_ms: f64,
    last_chunk_ms: f64,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Streams `count` calls one after the other on one connection: the p50 times to the
/// first chunk of each answer and to its last, in milliseconds.
async fn streamed(target: &Target, key: &str, count: u64) -> (f64, f64) {
    let mut sender = closed_loop::connect(&target.base).await;
    let mut first = closed_loop::histogram();
    let mut last = closed_loop::histogram();
    for n in 0..count {
        let request = http::Request::post(target.path)
            .header("host", "bench")
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {key}"))
            .body(Full::new(proxies::chat_body(true, n)))
            .expect("request");
        let started = Instant::now();
        sender.ready().await.expect("the connection");
        let response = sender.send_request(request).await.expect("a streamed call");
        assert_eq!(response.status(), 200, "{}: a streamed call", target.name);
        let mut body = response.into_body();
        let mut seen_first = None;
        let mut bytes = 0;
        while let Some(frame) = body.frame().await {
            let frame = frame.expect("a chunk");
            if let Some(data) = frame.data_ref().filter(|data| !data.is_empty()) {
                seen_first.get_or_insert_with(|| started.elapsed());
                bytes += data.len();
            }
        }
        let ended = started.elapsed();
        assert!(
            bytes >= proxies::STREAM_BYTES,
            "{}: a stream of {bytes} bytes",
            target.name
        );
        let micros = |elapsed: Duration| elapsed.as_micros().max(1) as u64;
        first
            .record(micros(seen_first.expect("a chunk")))
            .expect("record");
        last.record(micros(ended)).expect("record");
    }
    let p50 =
        |histogram: &hdrhistogram::Histogram<u64>| histogram.value_at_quantile(0.5) as f64 / 1000.0;
    (p50(&first), p50(&last))
}

/// One round of every cell against `target`.
async fn round(target: &Target, key: &str, seconds: u64, warmup: u64, streams: u64) -> Figures {
    let c1 = proxies::wrk(target, key, 1, warmup, seconds).await;
    let c64 = proxies::wrk(target, key, 64, warmup, seconds).await;
    let (first_chunk_ms, last_chunk_ms) = streamed(target, key, streams).await;
    Figures {
        p50_c1_ms: c1.p50_ms,
        rate_c64: c64.rate,
        cpu_c1_us: c1.cpu_us,
        cpu_c64_us: c64.cpu_us,
        runs_c1: c1.runs,
        first_chunk_ms,
        last_chunk_ms,
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let seconds = harness::env_number("BENCH_SECONDS", 6);
    let warmup = harness::env_number("BENCH_WARMUP", 2);
    let rounds = harness::env_number("BENCH_ROUNDS", 3) as usize;
    let streams = harness::env_number("BENCH_STREAMS", 1000);
    let embedded = std::env::var("BENCH_STORE").is_ok_and(|store| store == "embedded");
    let master = std::env::var("BENCH_KEY").is_ok_and(|key| key == "master");
    let upstream = proxies::upstream().await;
    let config = proxies::gateway_config(&upstream);
    let (_redis, redis) = harness::redis().await;
    let data = tempfile::tempdir().expect("data dir");
    let mut store_args = if embedded {
        vec!["--data-dir".to_owned(), data.path().display().to_string()]
    } else {
        vec!["--redis".to_owned(), redis]
    };
    if std::env::var("BENCH_LEDGER").is_ok_and(|ledger| ledger == "off") {
        store_args.extend(["--ledger".to_owned(), "off".to_owned()]);
    }
    if let Some(calls) = std::env::var("BENCH_CALLGRIND")
        .ok()
        .and_then(|calls| calls.parse().ok())
    {
        callgrind::count(&config, &store_args, calls).await;
        return;
    }
    let (nginx_process, nginx) = proxies::nginx(&upstream).await;
    let mut args = store_args;
    args.extend([
        "--log".to_owned(),
        "warn,sandgate=info".to_owned(),
        "--gateway-config".to_owned(),
        config.path().display().to_string(),
    ]);
    let (sandgate_process, sandgate) = harness::sandgate(
        env!("CARGO_BIN_EXE_sandgate"),
        &args,
        &[("PROXY_MASTER_KEY", MASTER_KEY)],
    )
    .await;
    let key = if master {
        MASTER_KEY.to_owned()
    } else {
        proxies::budgeted_key(&sandgate, MASTER_KEY).await
    };
    let targets = [
        Target {
            name: "upstream alone",
            base: upstream,
            path: proxies::UPSTREAM_PATH,
            // This process: the upstream is its server.
            pid: std::process::id(),
            children: false,
        },
        Target {
            name: "nginx",
            base: nginx,
            path: proxies::UPSTREAM_PATH,
            pid: nginx_process.id(),
            children: true,
        },
        Target {
            name: "Sandgate",
            base: sandgate,
            path: "/v1/chat/completions",
            pid: sandgate_process.id().expect("Sandgate runs"),
            children: false,
        },
    ];
    if std::env::var("BENCH_HOLD").is_ok_and(|hold| hold == "1") {
        hold(&targets, &key).await;
        return;
    }
    let mut figures = vec![Vec::new(); targets.len()];
    println!(
        "| round | target | c1 p50 ms | c64 requests/s | stream: first chunk p50 ms | last chunk p50 ms | CPU per call µs, c1 / c64 | wake-ups per call, c1 |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    for number in 1..=rounds {
        for (target, kept) in targets.iter().zip(&mut figures) {
            let found = round(target, &key, seconds, warmup, streams).await;
            println!(
                "| {number} | {} | {:.3} | {:.0} | {:.3} | {:.3} | {:.0} / {:.0} | {:.1} |",
                target.name,
                found.p50_c1_ms,
                found.rate_c64,
                found.first_chunk_ms,
                found.last_chunk_ms,
                found.cpu_c1_us,
                found.cpu_c64_us,
                found.runs_c1,
            );
            kept.push(found);
        }
    }
    report(&targets, &figures);
}

/// Prints where each target serves, then keeps them up until the bench is stopped.
async fn hold(targets: &[Target], key: &str) {
    println!("key: {key}");
    for target in targets {
        println!(
            "{}: {}{} (pids {:?})",
            target.name,
            target.base,
            target.path,
            target.pids()
        );
    }
    println!("held until stopped (Ctrl-C or SIGTERM)");
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    // Returning drops the children's guards: Sandgate, Redis and nginx stop with the bench.
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}

/// The medians, and each bound of the issue as a ratio to nginx's.
fn report(targets: &[Target], figures: &[Vec<Figures>]) {
    let of =
        |index: usize, pick: fn(&Figures) -> f64| median(figures[index].iter().map(pick).collect());
    let (upstream, nginx, sandgate) = (0, 1, 2);
    println!("\nMedians of {} rounds:\n", figures[0].len());
    println!(
        "| target | c1 p50 ms | added | c64 requests/s | ratio to upstream | first chunk ms | added | last chunk ms | added |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (index, target) in targets.iter().enumerate() {
        println!(
            "| {} | {:.3} | {:+.3} | {:.0} | {:.2} | {:.3} | {:+.3} | {:.3} | {:+.3} |",
            target.name,
            of(index, |f| f.p50_c1_ms),
            of(index, |f| f.p50_c1_ms) - of(upstream, |f| f.p50_c1_ms),
            of(index, |f| f.rate_c64),
            of(index, |f| f.rate_c64) / of(upstream, |f| f.rate_c64),
            of(index, |f| f.first_chunk_ms),
            of(index, |f| f.first_chunk_ms) - of(upstream, |f| f.first_chunk_ms),
            of(index, |f| f.last_chunk_ms),
            of(index, |f| f.last_chunk_ms) - of(upstream, |f| f.last_chunk_ms),
        );
    }
    // Each round's ratio, then their median: rounds share their neighbours' noise.
    let ratio = |pick: fn(&Figures) -> f64, added: bool| {
        median(
            (0..figures[0].len())
                .map(|round| {
                    let value = |index: usize| pick(&figures[index][round]);
                    if added {
                        (value(sandgate) - value(upstream)) / (value(nginx) - value(upstream))
                    } else {
                        value(sandgate) / value(nginx)
                    }
                })
                .collect(),
        )
    };
    println!(
        "\nThe target's own processes (not the upstream it calls), from the scheduler's counts:\n"
    );
    println!("| target | CPU per call at c1, µs | at c64, µs | wake-ups per call at c1 |");
    println!("|---|---:|---:|---:|");
    for (index, target) in targets.iter().enumerate() {
        println!(
            "| {} | {:.0} | {:.0} | {:.1} |",
            target.name,
            of(index, |f| f.cpu_c1_us),
            of(index, |f| f.cpu_c64_us),
            of(index, |f| f.runs_c1),
        );
    }
    println!("\n| bound (Sandgate against nginx) | ratio, median of rounds | target |");
    println!("|---|---:|---|");
    println!(
        "| added p50 at c1 | {:.2}× | at most 2× |",
        ratio(|f| f.p50_c1_ms, true)
    );
    println!(
        "| requests/s at c64 | {:.2}× | at least 0.7× |",
        ratio(|f| f.rate_c64, false)
    );
    // A proxy can make a stream's last chunk arrive sooner than the upstream alone's: the
    // upstream writes each chunk on its own and the bench's client reads each, where a
    // proxy that reads a burst at once passes it on in fewer writes. nginx's added time
    // is then negative and a ratio to it means nothing; the difference to nginx's does.
    for (name, pick) in [
        ("first", (|f| f.first_chunk_ms) as fn(&Figures) -> f64),
        ("last", |f| f.last_chunk_ms),
    ] {
        let nginx_added: Vec<f64> = figures[nginx]
            .iter()
            .zip(&figures[upstream])
            .map(|(proxy, alone)| pick(proxy) - pick(alone))
            .collect();
        let beyond = median(
            figures[sandgate]
                .iter()
                .zip(&figures[nginx])
                .map(|(ours, theirs)| pick(ours) - pick(theirs))
                .collect(),
        );
        let ratio = if nginx_added.iter().all(|added| *added > 0.0) {
            format!("{:.2}×", ratio(pick, true))
        } else {
            format!(
                "none: nginx adds {:+.3} ms in a round",
                nginx_added.iter().copied().fold(f64::INFINITY, f64::min)
            )
        };
        println!(
            "| added time to the {name} chunk | {ratio} (Sandgate's {beyond:+.3} ms after nginx's) | at most 2× |"
        );
    }
}
