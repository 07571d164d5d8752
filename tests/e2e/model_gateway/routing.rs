//! Routing through the gateway: both path prefixes, the wildcard entry, unknown models, each
//! API's path on both kinds of upstream, large bodies arriving whole, and upstream
//! connections reused.

use serde_json::json;

use crate::common::Backend;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_prefixes_route_and_the_response_names_the_asked_model() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;

    let (status, body) = gateway.chat(&chat_body("claude")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "claude");
    assert_eq!(body["choices"][0]["message"]["content"], "Hello");
    let sent = gateway.upstream.last();
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.body["model"], "claude-sonnet");
    assert_eq!(sent.body["messages"][0]["content"], "hi");
    assert_eq!(
        sent.headers["authorization"],
        format!("Bearer {UPSTREAM_KEY}")
    );

    let (status, body) = json_of(
        gateway
            .post("/chat/completions", &chat_body("gpt"))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "gpt");
    let sent = gateway.upstream.last();
    assert_eq!(sent.path, "/openai/v1/chat/completions");
    assert_eq!(sent.body["model"], "azure/gpt-4o");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_forwards_provider_names_and_refuses_bare_ones() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;
    let (status, body) = gateway.chat(&chat_body("anthropic/claude-3-5")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "anthropic/claude-3-5");
    let sent = gateway.upstream.last();
    assert_eq!(sent.path, "/any/v1/chat/completions");
    assert_eq!(sent.body["model"], "anthropic/claude-3-5");
    assert_eq!(sent.headers["authorization"], "Bearer sk-wild");

    let requests = gateway.upstream.count();
    let (status, body) = gateway.chat(&chat_body("claude-3-5")).await;
    assert_eq!(status, 400, "{body}");
    assert_openai_error(&body);
    assert_eq!(gateway.upstream.count(), requests, "nothing was forwarded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_body_arrives_whole() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;
    let (status, body) = gateway.chat(&chat_body("test/big")).await;
    assert_eq!(status, 200);
    assert_eq!(body["model"], "test/big");
    assert_eq!(
        body["choices"][0]["message"]["content"]
            .as_str()
            .map(str::len),
        Some(3 << 20)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_models_are_404_without_a_wildcard() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, false).await;
    let (status, body) = gateway.chat(&chat_body("anthropic/claude-3-5")).await;
    assert_eq!(status, 404, "{body}");
    assert_openai_error(&body);
    assert_eq!(body["error"]["code"], "404");
    assert_eq!(gateway.upstream.count(), 0);
}

/// A whole answer is taken as soon as its announced length is in (without waiting for its
/// end-of-stream), and the upstream connection still goes back to the pool: calls one
/// after the other share their connections. (The connection's return races the next call,
/// which may then open another now and then, hence the bound rather than exactly one.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_one_after_the_other_reuse_upstream_connections() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, false).await;
    for _ in 0..10 {
        let (status, body) = gateway.chat(&chat_body("claude")).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["model"], "claude");
    }
    assert_eq!(gateway.upstream.count(), 10);
    let connections = gateway.upstream.connections();
    assert!(
        connections <= 5,
        "10 calls opened {connections} upstream connections"
    );
}

/// Every API goes to its own path on a gateway of the same kind (`claude`) and on an
/// OpenAI-compatible one (`gpt`), with `model` renamed both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_embeddings_and_completions_go_to_their_paths_on_both_kinds() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;
    for (model, prefix, upstream_model) in [
        ("claude", "/v1", "claude-sonnet"),
        ("gpt", "/openai/v1", "azure/gpt-4o"),
    ] {
        for (path, body, check) in [
            (
                "/v1/responses",
                json!({"model": model, "input": "hi"}),
                "output",
            ),
            (
                "/responses",
                json!({"model": model, "input": "hi"}),
                "output",
            ),
            (
                "/v1/embeddings",
                json!({"model": model, "input": "hi"}),
                "data",
            ),
            (
                "/embeddings",
                json!({"model": model, "input": "hi"}),
                "data",
            ),
            (
                "/v1/completions",
                json!({"model": model, "prompt": "hi"}),
                "choices",
            ),
        ] {
            let (status, answer) =
                json_of(gateway.post(path, &body).send().await.expect("request")).await;
            assert_eq!(status, 200, "{path} {model}: {answer}");
            assert_eq!(answer["model"], model, "{path}: {answer}");
            assert!(answer.get(check).is_some(), "{path}: {answer}");
            let sent = gateway.upstream.last();
            let upstream_path = path.trim_start_matches("/v1");
            assert_eq!(sent.path, format!("{prefix}{upstream_path}"));
            assert_eq!(sent.body["model"], upstream_model);
        }
    }
    let logs = gateway.spend_logs(10).await;
    let kinds: Vec<&str> = logs
        .iter()
        .filter_map(|log| log["call_type"].as_str())
        .collect();
    for kind in ["responses", "embedding", "text_completion"] {
        assert!(kinds.contains(&kind), "{kinds:?}");
    }
    let embedding = logs
        .iter()
        .find(|log| log["call_type"] == "embedding")
        .expect("an embedding");
    assert_eq!(embedding["prompt_tokens"], 3);
    let responses = logs
        .iter()
        .find(|log| log["call_type"] == "responses")
        .expect("a response");
    assert_eq!(
        responses["prompt_tokens"], 9,
        "input_tokens read as the prompt's"
    );
    assert_eq!(responses["completion_tokens"], 2);
}

/// An image inline (base64) makes bodies of megabytes: 9 MiB passes, as through LiteLLM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nine_mebibyte_image_request_reaches_the_upstream_whole() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;
    let image = "A".repeat(9 << 20);
    let body = json!({"model": "gpt", "user": "u", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{image}")}},
    ]}]});
    let (status, answer) = json_of(
        gateway
            .post("/v1/chat/completions", &body)
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let sent = gateway.upstream.last();
    let url = sent.body["messages"][0]["content"][0]["image_url"]["url"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(url.len(), image.len() + "data:image/png;base64,".len());
    assert!(sent.body.get("user").is_none());
    assert_eq!(sent.body["model"], "azure/gpt-4o");
}

/// A body of megabytes is read, and translated, away from the thread serving the call
/// (`model-gw/src/prepare.rs`): what the client gets is the same as for a small one. A
/// member named twice deep inside is refused and named; a Messages API body for an
/// OpenAI-compatible upstream arrives translated, its large text whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_are_refused_and_translated_as_small_ones_are() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;
    let text = "x".repeat(2 << 20);
    let forwarded = gateway.upstream.count();
    let twice = format!(
        r#"{{"model": "gpt", "messages": [{{"role": "user", "content": "{text}", "role": "system"}}]}}"#
    );
    let response = gateway
        .sandgate
        .client
        .post(gateway.sandgate.url("/v1/chat/completions"))
        .bearer_auth(MASTER_KEY)
        .header("content-type", "application/json")
        .body(twice)
        .send()
        .await
        .expect("request");
    let (status, answer) = json_of(response).await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("'messages[0].role'"), "{answer}");
    assert_eq!(gateway.upstream.count(), forwarded, "nothing was forwarded");

    let request = json!({
        "model": "gpt", "max_tokens": 100,
        "messages": [{"role": "user", "content": text}],
    });
    let (status, answer) = json_of(
        gateway
            .post("/v1/messages", &request)
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["type"], "message");
    let sent = gateway.upstream.last();
    assert_eq!(sent.path, "/openai/v1/chat/completions");
    assert_eq!(sent.body["model"], "azure/gpt-4o");
    assert_eq!(sent.body["messages"][0]["content"], text.as_str());
}
