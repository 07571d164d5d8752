//! The models: added ones listed and routed at once (and by every replica), the list's
//! order, a changed configuration file read again, and `/model/info`, the health probes and
//! the answers' headers.

use std::time::Duration;

use serde_json::json;

use crate::common::{Backend, Sandgate};

use super::*;

async fn an_added_model_is_listed_and_routed_at_once(backend: Backend) {
    let gateway = start(&backend, false, false).await;
    let (status, body) = json_of(
        gateway
            .post(
                "/model/new",
                &json!({"model_name": "added", "gateway_params": {
                    "model": "gateway_proxy/added-upstream",
                    "api_base": gateway.upstream.base(),
                    "api_key": "sk-added",
                }}),
            )
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model_name"], "added");
    assert!(!body.to_string().contains("sk-added"), "{body}");

    let (_, models) = gateway.get("/v1/models").await;
    let ids: Vec<_> = models["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|model| model["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        ids,
        [
            "claude", "gpt", "denied", "slow", "gated", "broken", "added"
        ]
    );

    let (status, body) = gateway.chat(&chat_body("added")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "added");
    let sent = gateway.upstream.last();
    assert_eq!(sent.body["model"], "added-upstream");
    assert_eq!(sent.headers["authorization"], "Bearer sk-added");

    let (status, body) = json_of(
        gateway
            .post("/model/new", &json!({"model_name": "x", "gateway_params": {"model": "gpt-4o", "api_base": "http://g"}}))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_openai_error(&body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_list_has_configured_entries_first_then_the_registry() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;
    for path in ["/v1/models", "/models"] {
        let (status, body) = gateway.get(path).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["object"], "list");
        let data = body["data"].as_array().expect("data");
        assert!(data.len() >= 200, "{} entries", data.len());
        let ids: Vec<_> = data
            .iter()
            .map(|model| model["id"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(
            ids[..7],
            ["claude", "gpt", "denied", "slow", "gated", "broken", "*"]
        );
        assert!(ids.contains(&"gpt-4o"));
        assert_eq!(data[0]["object"], "model");
        assert!(data[0]["created"].is_i64());
        assert!(data[0]["owned_by"].is_string());
    }
    let (status, body) = gateway.get("/v1/models/claude").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["id"], "claude");
    let (status, body) = gateway.get("/v1/models/azure/gpt-4o").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["id"], "azure/gpt-4o");
    let (status, body) = gateway.get("/v1/models/nope").await;
    assert_eq!(status, 404, "{body}");
    assert_openai_error(&body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_config_is_read_again_and_a_broken_one_ignored() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, false).await;
    let text = format!(
        "model_list:\n  - model_name: fresh\n    gateway_params: {{model: gateway_proxy/fresh-up, api_base: \"{}\", api_key: k}}\n",
        gateway.upstream.base()
    );
    std::fs::write(gateway.config.path(), &text).expect("rewrite config");
    // The file is looked at once a second at most (`LOOK_EVERY`).
    let models = until_models(&gateway, |models| models["data"][0]["id"] == "fresh").await;
    assert_eq!(models["data"].as_array().map(Vec::len), Some(1), "{models}");

    std::fs::write(gateway.config.path(), "model_list: [this is: not valid").expect("break");
    // Past the next look at the file, the last good config is still in effect.
    let broken_at = tokio::time::Instant::now();
    let mut models = serde_json::Value::Null;
    while broken_at.elapsed() < 2 * sandgate_model_gw::config::LOOK_EVERY {
        let (status, seen) = gateway.get("/v1/models").await;
        assert_eq!(status, 200, "{seen}");
        models = seen;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        models["data"][0]["id"], "fresh",
        "the last good config stays"
    );
    let (status, body) = gateway.chat(&chat_body("fresh")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(gateway.upstream.last().body["model"], "fresh-up");
}

/// Two replicas on one Redis with one configuration: a model added through one is routed
/// by the other at once, though the other keeps the model entries between calls (no store
/// read before each upstream call); one added again with other parameters is routed anew
/// as soon as the other hears of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_added_model_is_seen_by_every_replica() {
    let backend = Backend::redis().await;
    let first = start(&backend, false, false).await;
    let path = first.config.path().display().to_string();
    let second = Sandgate::start_with(
        &backend,
        &[
            "--gateway-config",
            &path,
            "--proxy-master-key",
            MASTER_KEY,
            "--gateway-allowed-upstream-hosts",
            "127.0.0.1",
        ],
    )
    .await;
    let chat_on_second = |model: &'static str| {
        let request = second
            .client
            .post(second.url("/v1/chat/completions"))
            .bearer_auth(MASTER_KEY)
            .body(chat_body(model).to_string());
        async move { json_of(request.send().await.expect("request")).await }
    };
    let add = |upstream_model: &str| {
        first
            .post(
                "/model/new",
                &json!({"model_name": "shared", "gateway_params": {
                    "model": format!("gateway_proxy/{upstream_model}"),
                    "api_base": first.upstream.base(), "api_key": "k",
                }}),
            )
            .send()
    };

    // The second replica routes, and keeps what it read.
    let (status, body) = chat_on_second("claude").await;
    assert_eq!(status, 200, "{body}");
    let reads = hgetall_calls(&backend).await;
    for _ in 0..10 {
        assert_eq!(chat_on_second("claude").await.0, 200);
    }
    assert!(
        hgetall_calls(&backend).await < reads + 10,
        "the added models are not read from the store for every call"
    );

    assert_eq!(add("shared-up").await.expect("request").status(), 200);
    let (status, body) = chat_on_second("shared").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "shared");
    assert_eq!(first.upstream.last().body["model"], "shared-up");

    assert_eq!(add("shared-up-2").await.expect("request").status(), 200);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (status, body) = chat_on_second("shared").await;
        assert_eq!(status, 200, "{body}");
        if first.upstream.last().body["model"] == "shared-up-2" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the second replica still routes the model as first added"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_info_health_probes_and_answer_headers() {
    let backend = Backend::embedded();
    let upstream = FakeUpstream::start().await;
    let base = upstream.base();
    let config = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(
        config.path(),
        format!(
            r#"model_list:
  - model_name: claude
    litellm_params: {{model: gateway_proxy/claude-sonnet, api_base: "{base}", api_key: k}}
    model_info: {{max_input_tokens: 200000, max_output_tokens: 8192, supports_vision: true, supports_function_calling: true}}
  - model_name: gpt
    litellm_params: {{model: openai/azure/gpt-4o, api_base: "{base}/v1", api_key: k}}
litellm_settings: {{drop_params: true}}
"#
        ),
    )
    .expect("write config");
    let path = config.path().display().to_string();
    let sandgate = Sandgate::start_with(
        &backend,
        &["--gateway-config", &path, "--proxy-master-key", MASTER_KEY],
    )
    .await;
    let get = |path: &str| {
        sandgate
            .client
            .get(sandgate.url(path))
            .bearer_auth(MASTER_KEY)
            .send()
    };
    let (status, info) = json_of(get("/v1/model/info").await.expect("request")).await;
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["data"][0]["model_name"], "claude");
    assert_eq!(info["data"][0]["model_info"]["max_input_tokens"], 200000);
    assert_eq!(info["data"][0]["model_info"]["supports_vision"], true);
    assert_eq!(
        info["data"][0]["litellm_params"]["model"],
        "gateway_proxy/claude-sonnet"
    );
    assert!(
        !info.to_string().contains("\"k\""),
        "the key is never listed: {info}"
    );
    assert_eq!(info["data"][1]["model_info"], json!({}));
    let (_, same) = json_of(get("/model/info").await.expect("request")).await;
    assert_eq!(same, info);
    let (status, groups) = json_of(get("/model_group/info").await.expect("request")).await;
    assert_eq!(status, 200, "{groups}");
    assert_eq!(groups["data"][0]["model_group"], "claude");
    assert_eq!(groups["data"][0]["max_output_tokens"], 8192);
    assert_eq!(groups["data"][0]["providers"], json!(["litellm_proxy"]));
    let unauthenticated = sandgate
        .client
        .get(sandgate.url("/v1/model/info"))
        .send()
        .await
        .expect("request");
    assert_eq!(unauthenticated.status(), 401);

    for probe in ["/health/liveliness", "/health/readiness"] {
        let response = sandgate
            .client
            .get(sandgate.url(probe))
            .send()
            .await
            .expect("probe");
        assert_eq!(response.status(), 200, "{probe}");
    }

    // The upstream's request id, rate limits and chained cost headers reach the client;
    // its cookies do not.
    let response = sandgate
        .client
        .post(sandgate.url("/v1/chat/completions"))
        .bearer_auth(MASTER_KEY)
        .json(&chat_body("gpt"))
        .send()
        .await
        .expect("request");
    let headers = response.headers();
    assert_eq!(headers["llm_provider-x-request-id"], "req-upstream-1");
    assert_eq!(headers["x-ratelimit-remaining-requests"], "99");
    assert_eq!(headers["x-litellm-response-cost"], "0.00042");
    assert!(headers.get("set-cookie").is_none());
    assert_eq!(
        headers["x-request-id"].len(),
        36,
        "the gateway's own request id"
    );
    assert!(headers.get("x-accel-buffering").is_none(), "a whole answer");
}

crate::on_both_backends!(an_added_model_is_listed_and_routed_at_once);

/// `/v1/models` once it satisfies `wanted`, within ten seconds.
async fn until_models(
    gateway: &Gateway,
    wanted: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let models = crate::common::until(
        Duration::from_secs(10),
        || async { gateway.get("/v1/models").await.1 },
        &wanted,
    )
    .await;
    assert!(wanted(&models), "{models}");
    models
}
