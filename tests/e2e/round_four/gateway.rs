//! The model gateway's bounds a master key, a virtual key or a stranger could pass: an
//! egress proxy in Sandgate's environment, IANA's special-purpose address blocks, the
//! number of added models, a chosen key that is the master's, and `/spend/logs` answering
//! 400 to a caller it has not judged. No test sends anything past loopback: the special
//! blocks are refused when the model is added, before any connection.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{Backend, Sandgate, SandgateProcess};
use crate::gateway_keys::{generate, post, send};
use crate::model_gateway::{FakeUpstream, MASTER_KEY};

fn model(name: &str, api_base: &str) -> Value {
    json!({"model_name": name, "gateway_params": {"model": "openai/some-model", "api_base": api_base, "api_key": "k"}})
}

/// A "proxy" on loopback that counts the connections it gets and answers each 502.
async fn counting_proxy() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buffer = [0; 4096];
                let _ = socket.read(&mut buffer).await;
                let _ = socket
                    .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    (format!("http://{address}"), connections)
}

/// With `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` set (as behind an egress proxy), an
/// added model's call goes to its upstream directly, judged by the guarded resolver, and
/// never to the proxy, which would resolve the name itself past that check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_models_never_go_through_the_environments_proxy() {
    let (proxy, connections) = counting_proxy().await;
    let upstream = FakeUpstream::start().await;
    let data = tempfile::tempdir().expect("temp dir");
    let data_dir = data.path().display().to_string();
    let server = SandgateProcess::spawn(
        &["serve", "--listen", "127.0.0.1:0"].map(str::to_owned),
        &[
            ("SANDGATE_DATA_DIR", data_dir.as_str()),
            ("PROXY_MASTER_KEY", MASTER_KEY),
            ("GATEWAY_ALLOWED_UPSTREAM_HOSTS", "127.0.0.1"),
            ("HTTP_PROXY", proxy.as_str()),
            ("HTTPS_PROXY", proxy.as_str()),
            ("ALL_PROXY", proxy.as_str()),
            ("http_proxy", proxy.as_str()),
            ("https_proxy", proxy.as_str()),
            ("all_proxy", proxy.as_str()),
            ("NO_PROXY", ""),
            ("no_proxy", ""),
        ],
    )
    .await;
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let added = client
        .post(server.url("/model/new"))
        .bearer_auth(MASTER_KEY)
        .json(&model("added", &format!("{}/v1", upstream.base())))
        .send()
        .await
        .expect("add");
    assert_eq!(added.status(), 200);
    let answer = client
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(MASTER_KEY)
        .json(&json!({"model": "added", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .expect("chat");
    let status = answer.status();
    assert_eq!(status, 200, "{}", answer.text().await.unwrap_or_default());
    assert_eq!(upstream.count(), 1, "the upstream got the call itself");
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "nothing went to the proxy"
    );
}

/// IANA's IPv4 special-purpose blocks are refused as loopback and private addresses are,
/// when the model is added (an IPv6 literal is refused whatever it is; the IPv6 blocks,
/// which a name may resolve to, are `egress`'s unit tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_purpose_addresses_are_refused_as_upstreams() {
    let backend = Backend::embedded();
    let sandgate = Sandgate::start_with(&backend, &["--proxy-master-key", MASTER_KEY]).await;
    for address in [
        "240.0.0.1",
        "255.255.255.255",
        "198.18.0.1",
        "192.0.0.170",
        "100.64.0.1",
        "192.0.2.1",
        "198.51.100.1",
        "203.0.113.1",
        "0.1.2.3",
        "224.0.0.251",
    ] {
        let (status, body) = send(post(
            &sandgate,
            "/model/new",
            MASTER_KEY,
            &model("special", &format!("http://{address}/v1")),
        ))
        .await;
        assert_eq!(status, 403, "{address}: {body}");
        assert!(
            body.to_string().contains("api_base refused"),
            "{address}: {body}"
        );
    }
    let (status, models) = send(
        sandgate
            .client
            .get(sandgate.url("/v1/models"))
            .bearer_auth(MASTER_KEY),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(models["data"], json!([]), "nothing was added: {models}");
}

/// `--gateway-max-added-models` bounds the added models: past it a new name is refused
/// (409), an added name may still be replaced, and the model list stays that long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_models_are_bounded() {
    let backend = Backend::embedded();
    let upstream = FakeUpstream::start().await;
    let sandgate = Sandgate::start_with(
        &backend,
        &[
            "--proxy-master-key",
            MASTER_KEY,
            "--gateway-allowed-upstream-hosts",
            "127.0.0.1",
            "--gateway-max-added-models",
            "3",
        ],
    )
    .await;
    let base = format!("{}/v1", upstream.base());
    for name in ["m1", "m2", "m3"] {
        let (status, body) = send(post(
            &sandgate,
            "/model/new",
            MASTER_KEY,
            &model(name, &base),
        ))
        .await;
        assert_eq!(status, 200, "{name}: {body}");
    }
    let (status, body) = send(post(
        &sandgate,
        "/model/new",
        MASTER_KEY,
        &model("m4", &base),
    ))
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body.to_string().contains("--gateway-max-added-models"),
        "{body}"
    );
    let (status, body) = send(post(
        &sandgate,
        "/model/new",
        MASTER_KEY,
        &model("m2", &base),
    ))
    .await;
    assert_eq!(status, 200, "an added name is replaced: {body}");
    let (_, models) = send(
        sandgate
            .client
            .get(sandgate.url("/v1/models"))
            .bearer_auth(MASTER_KEY),
    )
    .await;
    assert_eq!(models["data"].as_array().map(Vec::len), Some(3), "{models}");
}

/// `/key/generate` with `"key"` never makes a virtual key of an existing key's value, the
/// master key's included; a virtual key asking the same learns nothing (403, as for any
/// management call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chosen_key_is_never_an_existing_one() {
    let backend = Backend::embedded();
    let sandgate = Sandgate::start_with(&backend, &["--proxy-master-key", MASTER_KEY]).await;
    let (virtual_key, _) = generate(&sandgate, &json!({"key_alias": "agent"})).await;
    for chosen in [MASTER_KEY, virtual_key.as_str()] {
        let (status, body) = send(post(
            &sandgate,
            "/key/generate",
            MASTER_KEY,
            &json!({"key": chosen}),
        ))
        .await;
        assert_eq!(status, 409, "{body}");
        assert!(!body.to_string().contains(chosen), "{body}");
    }
    let (status, body) = send(post(
        &sandgate,
        "/key/generate",
        &virtual_key,
        &json!({"key": MASTER_KEY}),
    ))
    .await;
    assert_eq!(status, 403, "{body}");
    let (_, list) = send(
        sandgate
            .client
            .get(sandgate.url("/key/list"))
            .bearer_auth(MASTER_KEY),
    )
    .await;
    assert_eq!(list["total_count"], 1, "{list}");
}

/// `/spend/logs` judges the caller before its query: `?limit=abc` without a key, or with
/// a wrong one, is 401; with a virtual key 403; only the master key learns of the 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spend_logs_judge_the_caller_before_the_query() {
    let backend = Backend::embedded();
    let sandgate = Sandgate::start_with(&backend, &["--proxy-master-key", MASTER_KEY]).await;
    let (virtual_key, _) = generate(&sandgate, &json!({})).await;
    let url = sandgate.url("/spend/logs?limit=abc");
    let (status, body) = send(sandgate.client.get(&url)).await;
    assert_eq!(status, 401, "no key: {body}");
    let (status, body) = send(sandgate.client.get(&url).bearer_auth("sk-wrong-key")).await;
    assert_eq!(status, 401, "a wrong key: {body}");
    let (status, body) = send(sandgate.client.get(&url).bearer_auth(&virtual_key)).await;
    assert_eq!(status, 403, "a virtual key: {body}");
    let (status, body) = send(sandgate.client.get(&url).bearer_auth(MASTER_KEY)).await;
    assert_eq!(status, 400, "the master key: {body}");
    // An empty date is not none (schemathesis found it answered 200), judged alike.
    for query in ["start_date=", "end_date="] {
        let url = sandgate.url(&format!("/spend/logs?{query}"));
        let (status, body) = send(sandgate.client.get(&url)).await;
        assert_eq!(status, 401, "{query} without a key: {body}");
        let (status, body) = send(sandgate.client.get(&url).bearer_auth(MASTER_KEY)).await;
        assert_eq!(status, 400, "{query}: {body}");
    }
}
