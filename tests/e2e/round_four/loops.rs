//! Calls in flight bounded where `x-sandgate-hop` cannot help: an entry's
//! `max_parallel_requests` (LiteLLM's key), and a loop back to the gateway through a hop
//! that drops the header, as a LiteLLM proxy without header forwarding does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use serde_json::{Value, json};

use crate::common::{Backend, Sandgate, file_with};
use crate::gateway_keys::{post, send};
use crate::model_gateway::{FakeUpstream, MASTER_KEY};

/// Past this many calls the hop stops forwarding: the test fails rather than exhaust the
/// machine when the gateway does not stop the loop.
const HOP_GIVES_UP_AFTER: usize = 40;

#[derive(Clone)]
struct Hop {
    /// The gateway's base URL, known once it has started.
    gateway: Arc<OnceLock<String>>,
    calls: Arc<AtomicUsize>,
    client: reqwest::Client,
}

/// A hop that forwards each call back to the gateway with a key of its own and no
/// `x-sandgate-hop`, its body read and written again (a proxy parses what it forwards).
async fn forward(State(hop): State<Hop>, request: http::Request<Body>) -> Response {
    let call = hop.calls.fetch_add(1, Ordering::SeqCst) + 1;
    let body = axum::body::to_bytes(request.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    let answer = |status: u16, body: Vec<u8>| {
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .expect("response")
    };
    if call > HOP_GIVES_UP_AFTER {
        // 400: no level retries it, so the chain unwinds at once.
        return answer(400, br#"{"error":{"message":"the hop gave up"}}"#.to_vec());
    }
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let gateway = hop.gateway.get().cloned().unwrap_or_default();
    match hop
        .client
        .post(format!("{gateway}/v1/chat/completions"))
        .bearer_auth(MASTER_KEY)
        .json(&parsed)
        .send()
        .await
    {
        Ok(response) => {
            let status = response.status().as_u16();
            answer(status, response.bytes().await.unwrap_or_default().to_vec())
        }
        Err(_) => answer(502, br#"{"error":{"message":"unreachable"}}"#.to_vec()),
    }
}

/// The sockets this process has open with an end on one of `ports` (of this machine's
/// loopback): the connections of one test, where a count of every descriptor would count
/// those of the tests running beside it too.
fn sockets_on(ports: &[u16]) -> usize {
    // The inodes of the TCP sockets with either end on one of the ports.
    let mut inodes = std::collections::HashSet::new();
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let port = |field: Option<&&str>| {
                field
                    .and_then(|address| address.rsplit(':').next())
                    .and_then(|port| u16::from_str_radix(port, 16).ok())
            };
            let ends = [port(fields.get(1)), port(fields.get(2))];
            if ends.iter().flatten().any(|end| ports.contains(end))
                && let Some(inode) = fields.get(9)
            {
                inodes.insert(format!("socket:[{inode}]"));
            }
        }
    }
    std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| {
            std::fs::read_link(entry.path())
                .is_ok_and(|link| inodes.contains(link.to_string_lossy().as_ref()))
        })
        .count()
}

/// One call to a model whose entry goes to a hop that calls the gateway back without the
/// hop header: the loop is stopped within a few calls, with a clear error and no pile of
/// connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_loop_through_a_hop_that_drops_the_header_stops_within_a_few_calls() {
    let hop = Hop {
        gateway: Arc::new(OnceLock::new()),
        calls: Arc::new(AtomicUsize::new(0)),
        client: reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client"),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let hop_address = listener.local_addr().expect("address");
    let app = axum::Router::new()
        .fallback(forward)
        .with_state(hop.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let config = file_with(&format!(
        "model_list:\n  - model_name: looped\n    litellm_params: {{model: openai/looped, api_base: \"http://{hop_address}/v1\", api_key: k}}\n"
    ));
    let path = config.path().display().to_string();
    let backend = Backend::embedded();
    let sandgate = Sandgate::start_with(
        &backend,
        &["--gateway-config", &path, "--proxy-master-key", MASTER_KEY],
    )
    .await;
    hop.gateway.set(sandgate.url("")).expect("set once");
    let gateway_port = reqwest::Url::parse(&sandgate.url(""))
        .ok()
        .and_then(|url| url.port())
        .expect("the gateway's port");
    let ports = [hop_address.port(), gateway_port];
    let before = sockets_on(&ports);
    let (status, body) = send(post(
        &sandgate,
        "/v1/chat/completions",
        MASTER_KEY,
        &json!({"model": "looped", "messages": [{"role": "user", "content": "hi"}]}),
    ))
    .await;
    let calls = hop.calls.load(Ordering::SeqCst);
    assert!(calls <= 6, "{calls} calls through the hop: {status} {body}");
    assert_eq!(status, 400, "{body}");
    assert!(
        body.to_string().contains("in flight"),
        "the error says why: {body}"
    );
    let grown = sockets_on(&ports).saturating_sub(before);
    assert!(
        grown < 40,
        "{grown} more connections to the hop or the gateway"
    );
}

/// An entry's `max_parallel_requests` is the most of its calls in flight at once: past
/// it, 429 as LiteLLM answers, while another entry's calls go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_entry_takes_its_max_parallel_requests_at_once() {
    let upstream = FakeUpstream::start().await;
    let base = upstream.base();
    let config = file_with(&format!(
        "model_list:\n  - model_name: slow\n    litellm_params: {{model: openai/hang, api_base: \"{base}/v1\", api_key: k, max_parallel_requests: 2}}\n  - model_name: other\n    litellm_params: {{model: openai/other, api_base: \"{base}/v1\", api_key: k}}\n"
    ));
    let path = config.path().display().to_string();
    let backend = Backend::embedded();
    let sandgate = Arc::new(
        Sandgate::start_with(
            &backend,
            &["--gateway-config", &path, "--proxy-master-key", MASTER_KEY],
        )
        .await,
    );
    let chat = |model: &'static str, content: String| {
        let sandgate = sandgate.clone();
        async move {
            send(post(
                &sandgate,
                "/v1/chat/completions",
                MASTER_KEY,
                &json!({"model": model, "messages": [{"role": "user", "content": content}]}),
            ))
            .await
        }
    };
    // Two calls the upstream holds.
    let held: Vec<_> = (0..2)
        .map(|n| tokio::spawn(chat("slow", format!("held {n}"))))
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while upstream.count() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the upstream got {} calls",
            upstream.count()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, body) = chat("slow", "a third".to_owned()).await;
    assert_eq!(status, 429, "{body}");
    assert!(
        body.to_string()
            .contains("Max parallel request limit reached"),
        "{body}"
    );
    assert_eq!(upstream.count(), 2, "the third never went upstream");
    let (status, body) = chat("other", "another entry".to_owned()).await;
    assert_eq!(status, 200, "{body}");
    for call in held {
        call.abort();
    }
}
