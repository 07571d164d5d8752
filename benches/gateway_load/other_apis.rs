//! The other APIs' part of the gateway's bench (`apis` in `BENCH_PARTS`): at concurrency
//! 1, the added p50 of `/v1/responses`, `/v1/embeddings` and a translated `/v1/messages`,
//! each through Sandgate beside the upstream call it becomes, made directly.

use bytes::Bytes;

use crate::{closed_loop, cpu_use, request_to, timed_streams, upstream, used_per};

/// The added p50 of each other API at concurrency 1: each through Sandgate beside the
/// upstream call it becomes, made directly.
pub(crate) async fn other_apis(
    direct: &str,
    (bare, bare_pid): (&str, Option<u32>),
    gateways: &[(String, tokio::process::Child, String)],
    seconds: u64,
    streams: usize,
    rounds: u64,
) {
    let responses = |model: &str| {
        Bytes::from(
            serde_json::json!({"model": model, "input": "Write a function that adds two numbers."})
                .to_string(),
        )
    };
    let embeddings = |model: &str| {
        Bytes::from(
            serde_json::json!({"model": model, "input": "Write a function that adds two numbers."})
                .to_string(),
        )
    };
    // (API, path through Sandgate, its body; path direct, its body)
    let cases = [
        (
            "/v1/responses",
            "/v1/responses",
            responses("claude"),
            "/v1/responses",
            responses("claude-sonnet"),
        ),
        (
            "/v1/embeddings",
            "/v1/embeddings",
            embeddings("claude"),
            "/v1/embeddings",
            embeddings("claude-sonnet"),
        ),
        (
            "/v1/messages, translated",
            "/v1/messages",
            upstream::message("gpt", false),
            "/v1/chat/completions",
            upstream::chat("gpt-up", false),
        ),
    ];
    println!("\nOther APIs at concurrency 1: p50 and the p50 added to the direct call\n");
    println!(
        "| API | target | requests/s | p50 ms | p99 ms | added p50 ms | the forwarder's CPU µs per call | its thread runs per call | errors |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for (api, path, body, direct_path, direct_body) in &cases {
        for _ in 0..rounds {
            let mut baseline = None;
            let direct_target = ("direct", direct, *direct_path, direct_body, None);
            let bare_target = (
                "bare forwarder (axum + reqwest)",
                bare,
                *direct_path,
                direct_body,
                bare_pid,
            );
            let targets = gateways.iter().map(|(target, child, url)| {
                (target.as_str(), url.as_str(), *path, body, child.id())
            });
            let all = [direct_target, bare_target].into_iter().chain(targets);
            for (target, base, path, body, pid) in all {
                let (path, body) = (path.to_owned(), body.clone());
                let next = move || request_to(&path, &body);
                closed_loop::load(base, 1, 1, next.clone()).await;
                let before = cpu_use(pid);
                let outcome = closed_loop::load(base, 1, seconds, next).await;
                let used = used_per(before, cpu_use(pid), outcome.requests);
                let p50 = outcome.ms(0.5);
                let added = baseline.map_or(String::from("—"), |direct: f64| {
                    format!("{:.3}", p50 - direct)
                });
                baseline.get_or_insert(p50);
                println!(
                    "| {api} | {target} | {:.0} | {p50:.3} | {:.3} | {added} | {used} | {} |",
                    outcome.rate(),
                    outcome.ms(0.99),
                    outcome.errors
                );
            }
        }
    }

    println!(
        "\nStreamed, time to the first chunk: a translated /v1/messages against the chat stream it becomes\n"
    );
    println!(
        "| target | p50 ms | p99 ms | added p50 ms | the forwarder's CPU µs per stream | its thread runs per stream |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for _ in 0..rounds {
        let direct_body = upstream::chat("gpt-up", true);
        let through_body = upstream::message("gpt", true);
        let mut baseline = None;
        let direct_target = (
            "direct (chat stream)",
            direct,
            "/v1/chat/completions",
            &direct_body,
            None,
        );
        let bare_target = (
            "bare forwarder (axum + reqwest, the chat stream)",
            bare,
            "/v1/chat/completions",
            &direct_body,
            bare_pid,
        );
        let targets = gateways.iter().map(|(target, child, url)| {
            (
                target.as_str(),
                url.as_str(),
                "/v1/messages",
                &through_body,
                child.id(),
            )
        });
        for (target, base, path, body, pid) in
            [direct_target, bare_target].into_iter().chain(targets)
        {
            let (times, used) = timed_streams(base, path, body, streams, pid).await;
            let p50 = times.value_at_quantile(0.5) as f64 / 1000.0;
            let added = baseline.map_or(String::from("—"), |direct: f64| {
                format!("{:.3}", p50 - direct)
            });
            baseline.get_or_insert(p50);
            println!(
                "| {target} | {p50:.3} | {:.3} | {added} | {used} |",
                times.value_at_quantile(0.99) as f64 / 1000.0
            );
        }
    }
}
