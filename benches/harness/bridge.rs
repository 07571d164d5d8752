//! The Responses bridge's cost (issue 41): through one `openai/` entry that serves chat
//! completions only (`gpt-bridge`, `responses_api: chat`), a bridged `/v1/responses`
//! beside a plain `/v1/chat/completions`, each against the direct chat completion both
//! become; at concurrency 1, whole and streamed (time to the first event). The bridge is
//! within its budget when its added p50 is at most 1.5 times the chat call's.

use bytes::Bytes;

use crate::{closed_loop, request_to, timed_streams, upstream};

/// Prints the two tables and each case's ratio of added p50s.
pub async fn responses_bridge(
    direct: &str,
    gateways: &[(String, tokio::process::Child, String)],
    seconds: u64,
    streams: usize,
    rounds: u64,
) {
    println!(
        "\nThe Responses bridge at concurrency 1: added p50 over the direct chat completion, through one chat-only entry\n"
    );
    println!("| call | target | p50 ms | added p50 ms | bridged / chat |");
    println!("|---|---|---:|---:|---:|");
    for _ in 0..rounds {
        for stream in [false, true] {
            let direct_body = upstream::chat("gpt-up", stream);
            let chat_body = upstream::chat("gpt-bridge", stream);
            let responses_body = upstream::responses_request("gpt-bridge", stream);
            let kind = if stream {
                "streamed, first event"
            } else {
                "whole"
            };
            let baseline = p50(
                direct,
                "/v1/chat/completions",
                &direct_body,
                stream,
                seconds,
                streams,
            )
            .await;
            println!("| {kind} | direct chat completion | {baseline:.3} | — | — |");
            for (target, _, url) in gateways {
                let chat = p50(
                    url,
                    "/v1/chat/completions",
                    &chat_body,
                    stream,
                    seconds,
                    streams,
                )
                .await;
                let bridged = p50(
                    url,
                    "/v1/responses",
                    &responses_body,
                    stream,
                    seconds,
                    streams,
                )
                .await;
                let (chat_added, bridged_added) = (chat - baseline, bridged - baseline);
                println!(
                    "| {kind} | {target}: /v1/chat/completions | {chat:.3} | {chat_added:.3} | — |"
                );
                println!(
                    "| {kind} | {target}: /v1/responses, bridged | {bridged:.3} | {bridged_added:.3} | {:.2} |",
                    bridged_added / chat_added
                );
            }
        }
    }
}

/// The p50 in ms of calls to `path` with `body`, one at a time: whole calls for `seconds`,
/// or the first event of `streams` streams.
async fn p50(
    base: &str,
    path: &str,
    body: &Bytes,
    stream: bool,
    seconds: u64,
    streams: usize,
) -> f64 {
    if stream {
        let (times, _) = timed_streams(base, path, body, streams, None).await;
        return times.value_at_quantile(0.5) as f64 / 1000.0;
    }
    let (path, body) = (path.to_owned(), body.clone());
    let next = move || request_to(&path, &body);
    closed_loop::load(base, 1, 1, next.clone()).await;
    closed_loop::load(base, 1, seconds, next).await.ms(0.5)
}
