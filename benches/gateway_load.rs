//! The model gateway's cost: the same fake upstream called directly, through a bare
//! forwarder and through `sandgate serve` (edge → ModelGateway → upstream), side by side
//! in one run; the bare forwarder (axum and reqwest, nothing else) is the floor of this
//! stack on the machine. Reports the added latency at concurrency 1 and 16, requests per
//! second at 64, and the added time to a stream's first chunk; then, at concurrency 1, the
//! added p50 of `/v1/responses`, `/v1/embeddings` and a translated `/v1/messages` (against
//! the chat completion it becomes, called directly), streamed first chunks included; and
//! the Responses bridge: a bridged `/v1/responses` beside a chat completion through the
//! same entry, each against the direct chat completion, plain and streamed. Beside
//! each figure of a stream or another API, the CPU time the forwarding process (Sandgate,
//! or the bare forwarder) used per call (a measure the machine's noise moves less than
//! latency) and how often its threads were woken.
//!
//! `cargo bench --bench gateway_load` (needs `redis-server`: the spend log goes to Redis).
//! Environment: `BENCH_SECONDS` (per run, default 5), `BENCH_CONCURRENCY` (default
//! `1,16,64`), `BENCH_STREAMS` (streams timed per target, default 2000), `BENCH_ROUNDS`
//! (how many times each cell runs, interleaved; default 1), `BENCH_SANDGATE`
//! (`label=path,…`: release binaries to compare side by side in one run; default the
//! current build) and `BENCH_PARTS` (which tables: `chat`, `streams`, `apis`, `bridge`;
//! default all).

#![expect(
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark: it fails loudly, prints its table, and its forwarder says where it listens"
)]

#[path = "harness/binaries.rs"]
mod binaries;
#[path = "harness/bridge.rs"]
mod bridge;
#[path = "harness/closed_loop.rs"]
mod closed_loop;
#[path = "harness/cpu.rs"]
mod cpu;
mod harness;
#[path = "gateway_load/other_apis.rs"]
mod other_apis;
#[path = "harness/upstream.rs"]
mod upstream;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use bytes::Bytes;
use cpu::cpu_use;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};

const MASTER_KEY: &str = "bench-master-key";

/// The tables `BENCH_PARTS` can pick, in the order they run.
const PARTS: [&str; 4] = ["chat", "streams", "apis", "bridge"];

fn request(body: &Bytes) -> http::Request<Full<Bytes>> {
    request_to("/v1/chat/completions", body)
}

fn request_to(path: &str, body: &Bytes) -> http::Request<Full<Bytes>> {
    http::Request::post(path)
        .header("host", "bench")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {MASTER_KEY}"))
        .header(
            "x-gateway-session-id",
            "0f0e0d0c-0b0a-4908-8706-050403020100",
        )
        .body(Full::new(body.clone()))
        .expect("request")
}

/// Time to the first body chunk of `count` streamed requests to `path`, one at a time,
/// in µs.
async fn first_chunks_of(base: &str, path: &str, body: &Bytes, count: usize) -> Histogram<u64> {
    let mut sender = closed_loop::connect(base).await;
    let mut times = closed_loop::histogram();
    for _ in 0..count {
        sender.ready().await.expect("connection ready");
        let sent = Instant::now();
        let response = sender
            .send_request(request_to(path, body))
            .await
            .expect("send");
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let first = body.frame().await.expect("a first chunk").expect("frame");
        times.saturating_record(sent.elapsed().as_micros() as u64);
        assert!(first.is_data());
        while let Some(frame) = body.frame().await {
            frame.expect("frame");
        }
    }
    times
}

/// `count` streams' first chunks, and what the process `pid` (a Sandgate or the bare
/// forwarder) used per stream to answer them whole: CPU time in µs, and thread runs (each
/// a wake-up, most often); `—` without a process.
async fn timed_streams(
    base: &str,
    path: &str,
    body: &Bytes,
    count: usize,
    pid: Option<u32>,
) -> (Histogram<u64>, String) {
    first_chunks_of(base, path, body, count / 10).await;
    let before = cpu_use(pid);
    let times = first_chunks_of(base, path, body, count).await;
    (times, used_per(before, cpu_use(pid), count as u64))
}

/// What a process used between two [`cpu_use`] readings, per one of `count` calls: CPU
/// time in µs and thread runs, as two table cells.
fn used_per(before: Option<[u64; 2]>, after: Option<[u64; 2]>, count: u64) -> String {
    match (before, after) {
        (Some([cpu, runs]), Some([cpu_after, runs_after])) if count > 0 => {
            let per_call = |before: u64, after: u64| (after - before) as f64 / count as f64;
            format!(
                "{:.0} | {:.1}",
                per_call(cpu, cpu_after) / 1000.0,
                per_call(runs, runs_after)
            )
        }
        _ => String::from("— | —"),
    }
}

/// The floor of any gateway on this stack: an axum server forwarding each request's body to
/// the same path on `upstream` over one pooled reqwest client and answering what comes
/// back (a stream as it comes); no authentication, routing, rewriting, headers, spans, metrics or spend log. It
/// runs as its own process, as Sandgate does: this bench started again with
/// `--bare-forwarder <upstream>`.
async fn bare_forwarder(upstream: String) {
    use axum::response::IntoResponse;
    let client = reqwest::Client::new();
    let forward = move |uri: http::Uri, body: Bytes| {
        let (client, url) = (client.clone(), format!("{upstream}{}", uri.path()));
        async move {
            let answer = client
                .post(url)
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(body)
                .send()
                .await
                .expect("upstream answers");
            let status = answer.status();
            let content_type = answer.headers().get(http::header::CONTENT_TYPE).cloned();
            let streamed = content_type
                .as_ref()
                .is_some_and(|value| value.as_bytes().starts_with(b"text/event-stream"));
            let body = if streamed {
                // Relayed chunk by chunk, as it arrives.
                axum::body::Body::from_stream(answer.bytes_stream())
            } else {
                axum::body::Body::from(answer.bytes().await.expect("upstream body"))
            };
            let mut response = (status, body).into_response();
            if let Some(content_type) = content_type {
                response
                    .headers_mut()
                    .insert(http::header::CONTENT_TYPE, content_type);
            }
            response
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let listener = axum::serve::ListenerExt::tap_io(listener, |stream| {
        stream.set_nodelay(true).expect("nodelay");
    });
    eprintln!("listening on http://{address}");
    axum::serve(listener, axum::Router::new().fallback(forward))
        .await
        .expect("serve");
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let mut args = std::env::args().skip_while(|arg| arg != "--bare-forwarder");
    if let (Some(_), Some(upstream)) = (args.next(), args.next()) {
        return bare_forwarder(upstream).await;
    }
    let seconds = harness::env_number("BENCH_SECONDS", 5);
    let streams = harness::env_number("BENCH_STREAMS", 2000) as usize;

    let rounds = harness::env_number("BENCH_ROUNDS", 1);
    let parts = std::env::var("BENCH_PARTS").unwrap_or_else(|_| PARTS.join(","));
    let parts: Vec<&str> = parts.split(',').map(str::trim).collect();
    if let Some(unknown) = parts.iter().find(|part| !PARTS.contains(part)) {
        panic!("BENCH_PARTS: no table {unknown:?}; the tables are {PARTS:?}");
    }

    let direct = upstream::start().await;
    let config = upstream::gateway_config(&direct);
    // Production's store: the spend log goes to Redis.
    let (_redis, redis) = harness::redis().await;
    let mut gateways = Vec::new();
    for (index, (label, binary)) in binaries::from_env(env!("CARGO_BIN_EXE_sandgate"))
        .into_iter()
        .enumerate()
    {
        let (child, url) = harness::sandgate(
            &binary,
            &[
                "--log".into(),
                "warn,sandgate=info".into(),
                "--redis".into(),
                // Each binary its own database.
                format!("{redis}{index}"),
                "--gateway-config".into(),
                config.path().display().to_string(),
            ],
            &[("PROXY_MASTER_KEY", MASTER_KEY)],
        )
        .await;
        gateways.push((format!("{label}through sandgate serve"), child, url));
    }

    let mut forwarder = tokio::process::Command::new(std::env::current_exe().expect("bench"));
    forwarder.args(["--bare-forwarder", &direct]);
    let (forwarder, bare) = harness::spawn_listening(forwarder, "listening on http://").await;
    let bare = format!("http://{bare}");
    let bare_pid = forwarder.id();

    if parts.contains(&"chat") {
        chat_completions(&direct, &bare, &gateways, seconds, rounds).await;
    }
    if parts.contains(&"streams") {
        chat_streams(&direct, (&bare, bare_pid), &gateways, streams, rounds).await;
    }
    if parts.contains(&"apis") {
        other_apis::other_apis(
            &direct,
            (&bare, bare_pid),
            &gateways,
            seconds,
            streams,
            rounds,
        )
        .await;
    }
    if parts.contains(&"bridge") {
        bridge::responses_bridge(&direct, &gateways, seconds, streams, rounds).await;
    }
}

/// Non-streaming chat completions at each concurrency: requests per second and latency.
async fn chat_completions(
    direct: &str,
    bare: &str,
    gateways: &[(String, tokio::process::Child, String)],
    seconds: u64,
    rounds: u64,
) {
    // The client asks the gateway for `claude`; the provider is asked for `claude-sonnet`.
    let through = upstream::chat("claude", false);
    let direct_body = upstream::chat("claude-sonnet", false);
    println!("Non-streaming chat completions, closed loop\n");
    println!("| target | concurrency | requests/s | p50 ms | p99 ms | errors |");
    println!("|---|---:|---:|---:|---:|---:|");
    for concurrency in closed_loop::concurrency_levels() {
        for _ in 0..rounds {
            let direct_target = ("direct to the fake upstream", direct, &direct_body);
            let bare_target = ("bare forwarder (axum + reqwest)", bare, &direct_body);
            let targets = gateways
                .iter()
                .map(|(target, _, url)| (target.as_str(), url.as_str(), &through));
            for (target, base, body) in [direct_target, bare_target].into_iter().chain(targets) {
                let (body, calls) = (body.clone(), Arc::new(AtomicU64::new(0)));
                let next = move || request(&upstream::numbered(&body, calls.fetch_add(1, Relaxed)));
                closed_loop::load(base, concurrency, 1, next.clone()).await;
                let outcome = closed_loop::load(base, concurrency, seconds, next).await;
                println!(
                    "| {target} | {concurrency} | {:.0} | {:.3} | {:.3} | {} |",
                    outcome.rate(),
                    outcome.ms(0.5),
                    outcome.ms(0.99),
                    outcome.errors
                );
            }
        }
    }
}

/// Chat streams one at a time: the time to the first chunk, and the forwarders' CPU.
async fn chat_streams(
    direct: &str,
    (bare, bare_pid): (&str, Option<u32>),
    gateways: &[(String, tokio::process::Child, String)],
    streams: usize,
    rounds: u64,
) {
    println!("\nStreaming: time to the first chunk, {streams} streams one at a time\n");
    println!(
        "| target | p50 ms | p99 ms | the forwarder's CPU µs per stream | its thread runs per stream |"
    );
    println!("|---|---:|---:|---:|---:|");
    for _ in 0..rounds {
        let direct_target = (
            "direct to the fake upstream",
            direct,
            upstream::chat("claude-sonnet", true),
            None,
        );
        let bare_target = (
            "bare forwarder (axum + reqwest)",
            bare,
            upstream::chat("claude-sonnet", true),
            bare_pid,
        );
        let targets = gateways.iter().map(|(target, child, url)| {
            (
                target.as_str(),
                url.as_str(),
                upstream::chat("claude", true),
                child.id(),
            )
        });
        for (target, base, body, pid) in [direct_target, bare_target].into_iter().chain(targets) {
            let (times, used) =
                timed_streams(base, "/v1/chat/completions", &body, streams, pid).await;
            println!(
                "| {target} | {:.3} | {:.3} | {used} |",
                times.value_at_quantile(0.5) as f64 / 1000.0,
                times.value_at_quantile(0.99) as f64 / 1000.0
            );
        }
    }
}
