//! The master key: every call needs it, in any of the carriers LiteLLM reads.

use crate::common::Backend;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_needs_the_master_key() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;
    let client = &gateway.sandgate.client;
    for request in [
        client.get(gateway.sandgate.url("/v1/models")),
        client
            .get(gateway.sandgate.url("/v1/models"))
            .bearer_auth("wrong"),
        client
            .post(gateway.sandgate.url("/v1/chat/completions"))
            .body(chat_body("claude").to_string()),
        client
            .post(gateway.sandgate.url("/v1/chat/completions"))
            .header("authorization", format!("Basic {MASTER_KEY}"))
            .body(chat_body("claude").to_string()),
        client.get(gateway.sandgate.url("/spend/logs")),
        client
            .post(gateway.sandgate.url("/model/new"))
            .bearer_auth("wrong")
            .body("{}"),
    ] {
        let (status, body) = json_of(request.send().await.expect("request")).await;
        assert_eq!(status, 401, "{body}");
        assert_openai_error(&body);
        assert!(!body.to_string().contains(MASTER_KEY));
    }
    assert_eq!(gateway.upstream.count(), 0);
}

/// The master key where LiteLLM's proxy takes it: the Anthropic SDK and Claude Code send
/// `x-api-key`, Azure OpenAI clients `api-key`, LiteLLM's own `x-litellm-api-key`. Each
/// carrier with a wrong key is refused, and none is passed on to the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_master_key_is_taken_from_every_carrier_litellm_reads() {
    let backend = Backend::embedded();
    let gateway = start(&backend, false, true).await;
    let client = &gateway.sandgate.client;
    for (header, value) in [
        ("x-api-key", MASTER_KEY.to_owned()),
        ("api-key", MASTER_KEY.to_owned()),
        ("x-litellm-api-key", MASTER_KEY.to_owned()),
        ("x-litellm-api-key", format!("Bearer {MASTER_KEY}")),
    ] {
        let (status, body) = json_of(
            client
                .get(gateway.sandgate.url("/v1/models"))
                .header(header, &value)
                .send()
                .await
                .expect("request"),
        )
        .await;
        assert_eq!(status, 200, "{header}: {body}");
        let (status, body) = json_of(
            client
                .get(gateway.sandgate.url("/v1/models"))
                .header(header, "sk-wrong")
                .send()
                .await
                .expect("request"),
        )
        .await;
        assert_eq!(status, 401, "{header}: {body}");

        let response = client
            .post(gateway.sandgate.url("/v1/chat/completions"))
            .header(header, &value)
            .json(&chat_body("claude"))
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), 200, "{header}");
        response.bytes().await.expect("body");
        let sent = gateway.upstream.last().headers;
        assert!(sent.get(header).is_none(), "{header} went upstream");
        assert!(
            !format!("{sent:?}").contains(MASTER_KEY),
            "the master key went upstream"
        );
    }
}
