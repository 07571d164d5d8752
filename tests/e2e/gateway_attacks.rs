//! The model gateway from the hostile side: an entry pointing back at the gateway, at
//! internal addresses or at a name the operator routes; an upstream whose answer never
//! ends, announces gigabytes, or streams one endless line; bookkeeping a client can
//! inflate. Each ends in a clear error, and the gateway keeps answering meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::{Backend, Sandgate, SandgateProcess, file_with, serve_args};
use crate::gateway_keys::{chat, post, send};
use crate::model_gateway::{FakeUpstream, MASTER_KEY};

/// `/health` answers within a second: the gateway is not taken down.
async fn healthy(url: &str) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .expect("client");
    let status = client
        .get(format!("{url}/health"))
        .send()
        .await
        .expect("/health answers within a second")
        .status();
    assert_eq!(status, 200);
}

/// `serve` with the master key, whose added models may reach loopback (the tests' own
/// upstreams), and `extra` flags.
async fn allowing_loopback(backend: &Backend, extra: &[&str]) -> Sandgate {
    let mut args = vec![
        "--proxy-master-key",
        MASTER_KEY,
        "--gateway-allowed-upstream-hosts",
        "127.0.0.1",
    ];
    args.extend_from_slice(extra);
    Sandgate::start_with(backend, &args).await
}

async fn add(sandgate: &Sandgate, body: &Value) -> (reqwest::StatusCode, Value) {
    send(post(sandgate, "/model/new", MASTER_KEY, body)).await
}

fn model(name: &str, api_base: &str) -> Value {
    json!({"model_name": name, "gateway_params": {"model": "openai/some-model", "api_base": api_base, "api_key": "k"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_pointing_at_the_gateway_itself_ends_in_an_error_not_a_loop() {
    let backend = Backend::embedded();
    // An operator who allows loopback (a local upstream) still cannot make a loop.
    let sandgate = allowing_loopback(&backend, &[]).await;
    let own = sandgate.url("/v1");
    let (status, body) = add(&sandgate, &model("itself", &own)).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = chat(&sandgate, MASTER_KEY, "itself", None).await;
    assert_eq!(status, 502, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("came back to the gateway"), "{body}");
    healthy(&sandgate.url("")).await;

    // The same from the configuration file, with the master key as the entry's key: a
    // gateway_proxy entry at the gateway's own port (the file is read again once
    // changed, so it names the port the gateway got).
    let config = file_with("model_list: []\n");
    let path = config.path().display().to_string();
    let backend = Backend::embedded();
    let server = Sandgate::start_with(
        &backend,
        &["--gateway-config", &path, "--proxy-master-key", MASTER_KEY],
    )
    .await;
    std::fs::write(
        config.path(),
        format!(
            "model_list:\n  - model_name: loop\n    litellm_params: {{model: gateway_proxy/loop, api_base: \"{}\", api_key: {MASTER_KEY}}}\n",
            server.url("")
        ),
    )
    .expect("write config");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let body = loop {
        let (status, body) = chat(&server, MASTER_KEY, "loop", None).await;
        if status != 404 || tokio::time::Instant::now() > deadline {
            assert_eq!(status, 502, "{body}");
            break body;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("came back"),
        "{body}"
    );
    healthy(&server.url("")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_models_may_not_reach_this_machine_or_the_cloud_metadata_service() {
    let backend = Backend::embedded();
    let sandgate = Sandgate::start_with(&backend, &["--proxy-master-key", MASTER_KEY]).await;
    for api_base in [
        "http://127.0.0.1:8080/v1",
        "http://localhost:8080",
        "http://0.0.0.0:80",
        "http://169.254.169.254/latest",
        "http://metadata.google.internal/computeMetadata/v1",
        "http://10.0.0.1/v1",
        "http://192.168.1.10/v1",
    ] {
        let (status, body) = add(&sandgate, &model("inside", api_base)).await;
        assert_eq!(status, 403, "{api_base}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("refused"),
            "{body}"
        );
    }
    // A name that resolves to loopback passes the check of its text, and is refused
    // where it is connected to: this machine's own name resolves so (/etc/hosts).
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    let hostname = hostname.trim();
    let resolved: Vec<std::net::SocketAddr> = tokio::net::lookup_host((hostname, 80))
        .await
        .map(Iterator::collect)
        .unwrap_or_default();
    assert!(
        resolved.iter().any(|address| address.ip().is_loopback()),
        "this machine's name ({hostname}) should resolve to loopback for this test: {resolved:?}"
    );
    let upstream = FakeUpstream::start().await;
    let port = upstream
        .base()
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_owned();
    let (status, body) = add(
        &sandgate,
        &model("named", &format!("http://{hostname}:{port}/v1")),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = chat(&sandgate, MASTER_KEY, "named", None).await;
    assert_eq!(status, 502, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("loopback"),
        "{body}"
    );
    assert_eq!(upstream.count(), 0, "the loopback upstream was reached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_addition_does_not_take_over_what_the_configuration_routes() {
    let backend = Backend::embedded();
    let upstream = FakeUpstream::start().await;
    let base = upstream.base();
    let config = file_with(&format!(
        "model_list:\n  - model_name: gpt\n    litellm_params: {{model: openai/gpt, api_base: \"{base}/v1\", api_key: k}}\n  - model_name: \"*\"\n    litellm_params: {{model: \"openai/*\", api_base: \"{base}/any/v1\", api_key: k}}\n"
    ));
    let path = config.path().display().to_string();
    let sandgate = allowing_loopback(&backend, &["--gateway-config", &path]).await;
    let elsewhere = format!("{base}/elsewhere/v1");
    // Others reach `anthropic/claude` through the wildcard: an addition may not take it.
    let (status, body) = add(&sandgate, &model("anthropic/claude", &elsewhere)).await;
    assert_eq!(status, 409, "{body}");
    let (status, body) = add(&sandgate, &model("gpt", &elsewhere)).await;
    assert_eq!(status, 409, "{body}");
    let (status, _) = chat(&sandgate, MASTER_KEY, "anthropic/claude", None).await;
    assert_eq!(status, 200);
    assert_eq!(upstream.last().path, "/any/v1/chat/completions");
    // Unless the request says so.
    let mut meant = model("anthropic/claude", &elsewhere);
    meant["replace_configured"] = json!(true);
    let (status, body) = add(&sandgate, &meant).await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = chat(&sandgate, MASTER_KEY, "anthropic/claude", None).await;
    assert_eq!(status, 200);
    assert_eq!(upstream.last().path, "/elsewhere/v1/chat/completions");
}

/// An upstream that answers every request with `answer`'s bytes: a head, then a body
/// written until the gateway closes the connection (or `limit` bytes). Counts what it
/// wrote, and tells when a connection was closed under it.
struct HostileUpstream {
    address: std::net::SocketAddr,
    written: Arc<AtomicU64>,
    closed: Arc<AtomicBool>,
}

#[derive(Clone, Copy)]
enum Hostile {
    /// A JSON body of whitespace, chunked, without end.
    EndlessBody,
    /// A `content-length` of 5 GiB.
    Huge,
    /// A stream whose one event's line never ends.
    EndlessLine,
    /// A stream of small events, one every 20 ms, without end.
    SlowStream,
}

impl HostileUpstream {
    async fn start(kind: Hostile) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let written = Arc::new(AtomicU64::new(0));
        let closed = Arc::new(AtomicBool::new(false));
        let (count, gone) = (written.clone(), closed.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (count, gone) = (count.clone(), gone.clone());
                tokio::spawn(async move {
                    serve_hostile(stream, kind, &count).await;
                    gone.store(true, Ordering::SeqCst);
                });
            }
        });
        Self {
            address,
            written,
            closed,
        }
    }

    fn base(&self) -> String {
        format!("http://{}/v1", self.address)
    }
}

/// At most this much is written to one connection: the test's own bound.
const HOSTILE_LIMIT: u64 = 1 << 30;

async fn serve_hostile(mut stream: TcpStream, kind: Hostile, written: &AtomicU64) {
    // The request's head and body: read until the body's length is in.
    let mut request = Vec::new();
    let mut buffer = [0_u8; 8192];
    loop {
        let Ok(read) = stream.read(&mut buffer).await else {
            return;
        };
        if read == 0 {
            return;
        }
        request.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&request);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|line| {
                    line.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|value| value.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            if request.len() >= end + 4 + length {
                break;
            }
        }
    }
    let (head, piece): (&str, Vec<u8>) = match kind {
        Hostile::EndlessBody => (
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
            chunk(&vec![b' '; 64 * 1024]),
        ),
        Hostile::Huge => (
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 5368709120\r\n\r\n",
            vec![b' '; 64 * 1024],
        ),
        Hostile::EndlessLine => (
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
            chunk(&vec![b'x'; 64 * 1024]),
        ),
        Hostile::SlowStream => (
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
            chunk(b"data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"),
        ),
    };
    if stream.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    if matches!(kind, Hostile::EndlessLine)
        && stream.write_all(&chunk(b"data: {\"x\":\"")).await.is_err()
    {
        return;
    }
    while written.load(Ordering::SeqCst) < HOSTILE_LIMIT {
        if stream.write_all(&piece).await.is_err() {
            return;
        }
        written.fetch_add(piece.len() as u64, Ordering::SeqCst);
        if matches!(kind, Hostile::SlowStream) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn chunk(data: &[u8]) -> Vec<u8> {
    let mut framed = format!("{:x}\r\n", data.len()).into_bytes();
    framed.extend_from_slice(data);
    framed.extend_from_slice(b"\r\n");
    framed
}

/// The resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| {
            value
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kb| kb * 1024)
}

const MAX_ANSWER: u64 = 4 * 1024 * 1024;
const MAX_EVENT: u64 = 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_and_oversized_answers_are_cut_and_memory_returns() {
    let upstreams = [
        (
            "endless",
            HostileUpstream::start(Hostile::EndlessBody).await,
        ),
        ("huge", HostileUpstream::start(Hostile::Huge).await),
        ("line", HostileUpstream::start(Hostile::EndlessLine).await),
    ];
    let fine = FakeUpstream::start().await;
    let mut models = format!(
        "model_list:\n  - model_name: fine\n    litellm_params: {{model: openai/fine, api_base: \"{}/v1\", api_key: k}}\n",
        fine.base()
    );
    for (name, upstream) in &upstreams {
        models.push_str(&format!(
            "  - model_name: {name}\n    litellm_params: {{model: openai/{name}, api_base: \"{}\", api_key: k}}\n",
            upstream.base()
        ));
    }
    let config = file_with(&models);
    let mut args = serve_args(&Backend::embedded());
    args.extend([
        "--gateway-config".to_owned(),
        config.path().display().to_string(),
        "--proxy-master-key".to_owned(),
        MASTER_KEY.to_owned(),
        "--gateway-max-answer-bytes".to_owned(),
        MAX_ANSWER.to_string(),
        "--gateway-max-event-bytes".to_owned(),
        MAX_EVENT.to_string(),
    ]);
    let server = SandgateProcess::spawn(&args, &[]).await;
    let pid = server.pid();
    let client = reqwest::Client::new();
    // What any first call sets up (connection pools, TLS roots, threads) is in before the
    // figure the others are held to: a well-behaved call of each kind first.
    for stream in [false, true] {
        let status = client
            .post(server.url("/v1/chat/completions"))
            .bearer_auth(MASTER_KEY)
            .json(&json!({"model": "fine", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .expect("an answer")
            .status();
        assert_eq!(status, 200);
    }
    let before = rss(pid);
    // Sampled while the calls run: the peak.
    let peak = Arc::new(AtomicU64::new(before));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        tokio::spawn(async move {
            while sampling.load(Ordering::SeqCst) {
                peak.fetch_max(rss(pid), Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    for (name, stream) in [
        ("endless", false),
        ("huge", false),
        ("line", true),
        ("endless", true),
    ] {
        let response = client
            .post(server.url("/v1/chat/completions"))
            .bearer_auth(MASTER_KEY)
            .json(&json!({"model": name, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .expect("an answer");
        let status = response.status();
        let text = response.text().await.expect("the body ends");
        if stream && status == 200 {
            // A stream ends with the error event.
            assert!(
                text.contains("\"code\":\"502\""),
                "{name}: {}",
                &text[text.len().saturating_sub(300)..]
            );
        } else {
            assert_eq!(status, 502, "{name}: {text}");
            assert!(
                text.contains("larger than") || text.contains("longer than"),
                "{name}: {text}"
            );
        }
        healthy(&server.url("")).await;
    }
    sampling.store(false, Ordering::SeqCst);
    sampler.await.expect("sampler");
    let peak = peak.load(Ordering::SeqCst);
    // Freed memory may take the allocator a moment to give back.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut after = rss(pid);
    while after >= before + 64 * 1024 * 1024 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        after = rss(pid);
    }
    eprintln!(
        "RSS before {} MiB, peak {} MiB, after {} MiB; the upstreams wrote {} MiB",
        before >> 20,
        peak >> 20,
        after >> 20,
        upstreams
            .iter()
            .map(|(_, upstream)| upstream.written.load(Ordering::SeqCst))
            .sum::<u64>()
            >> 20
    );
    // The limits bound what is held: a few times the largest, never the gigabytes an
    // upstream sends (2.36 GB for one call before the limits). What the allocator keeps of
    // freed memory afterwards stays within the same bound.
    assert!(
        peak < before + 96 * 1024 * 1024,
        "peak {peak} over {before}"
    );
    assert!(
        after < before + 64 * 1024 * 1024,
        "after {after} over {before}"
    );
    for (name, upstream) in &upstreams {
        let written = upstream.written.load(Ordering::SeqCst);
        assert!(
            written < HOSTILE_LIMIT,
            "{name}: the gateway read {written} bytes"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_ends_the_upstream_call_and_a_deadline_ends_a_long_one() {
    let upstream = HostileUpstream::start(Hostile::SlowStream).await;
    let config = file_with(&format!(
        "model_list:\n  - model_name: slow\n    litellm_params: {{model: openai/slow, api_base: \"{}\", api_key: k}}\n",
        upstream.base()
    ));
    let path = config.path().display().to_string();
    let backend = Backend::embedded();
    let sandgate = Sandgate::start_with(
        &backend,
        &[
            "--gateway-config",
            &path,
            "--proxy-master-key",
            MASTER_KEY,
            "--gateway-call-deadline",
            "0.5",
        ],
    )
    .await;
    let mut response = post(
        &sandgate,
        "/v1/chat/completions",
        MASTER_KEY,
        &json!({"model": "slow", "stream": true, "messages": []}),
    )
    .send()
    .await
    .expect("a stream");
    assert_eq!(response.status(), 200);
    assert!(response.chunk().await.expect("an event").is_some());
    drop(response);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !upstream.closed.load(Ordering::SeqCst) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the upstream call went on after the client left"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // A client that stays: the call's deadline ends the endless stream with an error.
    let response = post(
        &sandgate,
        "/v1/chat/completions",
        MASTER_KEY,
        &json!({"model": "slow", "stream": true, "messages": []}),
    )
    .send()
    .await
    .expect("a stream");
    let text = response.text().await.expect("the stream ends");
    assert!(
        text.contains("deadline") && text.contains("\"code\":\"504\""),
        "{}",
        &text[text.len().saturating_sub(300)..]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookkeeping_a_client_can_inflate_is_bounded() {
    let backend = Backend::embedded();
    let upstream = FakeUpstream::start().await;
    let config = file_with(&format!(
        "model_list:\n  - model_name: gpt\n    litellm_params: {{model: openai/gpt, api_base: \"{}/v1\", api_key: k}}\n",
        upstream.base()
    ));
    let path = config.path().display().to_string();
    let sandgate = allowing_loopback(
        &backend,
        &[
            "--gateway-config",
            &path,
            "--spend-log-max-entries",
            "5",
            "--metrics-api-key",
            "sk-metrics-key-for-tests",
        ],
    )
    .await;
    // A 1 MB `user` and session id are kept cut.
    let long = "u".repeat(1 << 20);
    let (status, _) = send(
        post(
            &sandgate,
            "/v1/chat/completions",
            MASTER_KEY,
            &json!({"model": "gpt", "user": long, "messages": []}),
        )
        .header("x-gateway-session-id", "s".repeat(4096)),
    )
    .await;
    assert_eq!(status, 200);
    // Models added at runtime share one metrics label, however many.
    for index in 0..20 {
        let (status, body) = add(
            &sandgate,
            &model(
                &format!("added-{index}"),
                &format!("{}/v1", upstream.base()),
            ),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let (status, _) = chat(&sandgate, MASTER_KEY, &format!("added-{index}"), None).await;
        assert_eq!(status, 200);
    }
    // Oversized added entries are refused.
    let (status, _) = add(
        &sandgate,
        &model(&"n".repeat(4096), &format!("{}/v1", upstream.base())),
    )
    .await;
    assert_eq!(status, 400);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let logs = loop {
        let (_, logs) = send(
            sandgate
                .client
                .get(sandgate.url("/spend/logs?limit=100"))
                .bearer_auth(MASTER_KEY),
        )
        .await;
        let logs = logs.as_array().cloned().unwrap_or_default();
        if logs.iter().any(|entry| entry["model"] == "added-19")
            || tokio::time::Instant::now() > deadline
        {
            break logs;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(
        logs.len() <= 5,
        "the spend log keeps {} entries",
        logs.len()
    );
    for entry in &logs {
        assert!(entry.to_string().len() < 4096, "{entry}");
    }

    // `/metrics` asks for its key, and counts the added models under one label.
    let open = sandgate
        .client
        .get(sandgate.url("/metrics"))
        .send()
        .await
        .expect("metrics");
    assert_eq!(open.status(), 401);
    let metrics = sandgate
        .client
        .get(sandgate.url("/metrics"))
        .bearer_auth("sk-metrics-key-for-tests")
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(metrics.contains("model=\"(added)\""), "{metrics}");
    assert!(
        !metrics.contains("added-7"),
        "an added name made its own series"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_model_costs_one_lookup_not_a_read_of_every_added_entry() {
    let backend = Backend::redis().await;
    let upstream = FakeUpstream::start().await;
    let sandgate = allowing_loopback(&backend, &[]).await;
    for index in 0..5 {
        let (status, body) = add(
            &sandgate,
            &model(
                &format!("added-{index}"),
                &format!("{}/v1", upstream.base()),
            ),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    // The added entries are read once and kept.
    let (status, _) = chat(&sandgate, MASTER_KEY, "added-0", None).await;
    assert_eq!(status, 200);
    let reads = crate::model_gateway::hgetall_calls(&backend).await;
    for _ in 0..20 {
        let (status, _) = chat(&sandgate, MASTER_KEY, "nobody-routes-this", None).await;
        assert_eq!(status, 404);
    }
    let more = crate::model_gateway::hgetall_calls(&backend).await - reads;
    assert!(
        more < 5,
        "20 unknown names read every added entry {more} times"
    );
}
