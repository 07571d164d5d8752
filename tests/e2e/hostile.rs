//! Hostile bodies on every JSON endpoint of the edge: each is answered with a 4xx and a
//! JSON error, never a 500, a hang or a crash.

use std::time::Duration;

use serde_json::Value;

use crate::common::{
    ADMIN_PASSWORD, Backend, RUNTIME_KEY, SandgateProcess, WEBHOOK_KEY, admin_args, conversation,
    new_id, serve_args,
};
use crate::model_gateway::FakeUpstream;

const BODY_LIMIT: usize = 128 * 1024;
const MASTER_KEY: &str = "sk-master-key-for-hostile-tests";
const DEPTH: usize = 10_000;

/// A hostile body: what it is, its bytes, and whether to send it without a length.
struct Hostile {
    name: &'static str,
    bytes: Vec<u8>,
    chunked: bool,
}

fn hostile(name: &'static str, bytes: impl Into<Vec<u8>>) -> Hostile {
    Hostile {
        name,
        bytes: bytes.into(),
        chunked: false,
    }
}

/// Nested `DEPTH` levels deep: `[[[…]]]`.
fn deep_arrays() -> Vec<u8> {
    let mut body = "[".repeat(DEPTH);
    body.push_str(&"]".repeat(DEPTH));
    body.into_bytes()
}

/// An object that routes (`model` names a configured entry) with a value `DEPTH` levels
/// deep: `{"model": "fake", "messages": {"a": {"a": … 1 …}}}`.
fn deep_inside_an_object() -> Vec<u8> {
    let mut body = r#"{"model": "fake", "messages": "#.to_owned();
    body.push_str(&r#"{"a": "#.repeat(DEPTH));
    body.push('1');
    body.push_str(&"}".repeat(DEPTH));
    body.push('}');
    body.into_bytes()
}

/// Valid JSON (an object with one long string) just past the limit.
fn oversized() -> Vec<u8> {
    format!(
        r#"{{"model": "fake", "padding": "{}"}}"#,
        "x".repeat(BODY_LIMIT)
    )
    .into_bytes()
}

fn bodies() -> Vec<Hostile> {
    vec![
        hostile("oversized, with a length", oversized()),
        Hostile {
            chunked: true,
            ..hostile("oversized, chunked", oversized())
        },
        hostile("arrays 10,000 deep", deep_arrays()),
        hostile("10,000 deep inside an object", deep_inside_an_object()),
        hostile(
            "invalid UTF-8 in a string",
            b"{\"model\": \"\xff\xfe\xfd\"}".to_vec(),
        ),
        hostile("invalid UTF-8 in a key", b"{\"\xc3\x28\": 1}".to_vec()),
        hostile("truncated UTF-8", b"{\"model\": \"\xe2\x82".to_vec()),
        hostile("a lone surrogate escape", r#"{"model": "\ud800"}"#),
        hostile("empty", ""),
        hostile("whitespace", "  \n\t "),
        hostile("not JSON", "{model: fake"),
        hostile("an array", r#"[{"model": "fake"}]"#),
        hostile("a string", r#""fake""#),
        hostile("a number", "42"),
        hostile("a huge number", "1e999999"),
        hostile("null", "null"),
        hostile("true", "true"),
        hostile("NUL bytes", b"{\"model\": \"fa\0ke\"}\0".to_vec()),
    ]
}

/// One JSON endpoint with the credentials that get past its authentication.
struct Endpoint {
    method: reqwest::Method,
    path: String,
    headers: Vec<(&'static str, String)>,
    /// Bodies that would be valid with the fields' values given positionally (an array
    /// instead of an object, at the top or in a nested object), which serde's derive
    /// accepts unless told otherwise.
    positional: Vec<&'static str>,
    /// What they get: 422 on the REST contracts, 400 on the OpenAI-shaped gateway.
    positional_status: u16,
}

fn endpoint(method: reqwest::Method, path: &str, headers: &[(&'static str, &str)]) -> Endpoint {
    Endpoint {
        method,
        path: path.to_owned(),
        headers: headers
            .iter()
            .map(|(name, value)| (*name, (*value).to_owned()))
            .collect(),
        positional: Vec::new(),
        positional_status: 422,
    }
}

impl Endpoint {
    fn positional(mut self, status: u16, bodies: &[&'static str]) -> Self {
        self.positional = bodies.to_vec();
        self.positional_status = status;
        self
    }
}

/// The fake upstream's gateway configuration: one model, `fake`.
fn gateway_config(upstream: &FakeUpstream) -> tempfile::NamedTempFile {
    crate::common::file_with(&format!(
        "model_list:\n  - model_name: fake\n    gateway_params: {{model: gateway_proxy/fake, api_base: \"{}\", api_key: sk-upstream}}\n",
        upstream.base()
    ))
}

async fn send(
    client: &reqwest::Client,
    server: &SandgateProcess,
    endpoint: &Endpoint,
    body: &Hostile,
) -> Result<(u16, String, String), reqwest::Error> {
    let mut request = client
        .request(endpoint.method.clone(), server.url(&endpoint.path))
        .header("content-type", "application/json");
    for (name, value) in &endpoint.headers {
        request = request.header(*name, value);
    }
    if body.chunked {
        return Ok(send_chunked(server, endpoint, &body.bytes).await);
    }
    request = request.body(body.bytes.clone());
    let response = request.send().await?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    Ok((status, content_type, response.text().await?))
}

/// Sends `body` with `Transfer-Encoding: chunked` (no length for the edge to refuse up
/// front) over a plain socket: the status, content type and body of the answer.
async fn send_chunked(
    server: &SandgateProcess,
    endpoint: &Endpoint,
    body: &[u8],
) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(&server.address)
        .await
        .expect("connect");
    let mut head = format!(
        "{} {} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n",
        endpoint.method, endpoint.path, server.address
    );
    for (name, value) in &endpoint.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut request = head.into_bytes();
    for chunk in body.chunks(8192) {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    // The edge may answer and close before it has read everything: a failed write is
    // not the test's concern, the answer is.
    drop(stream.write_all(&request).await);
    let mut answer = Vec::new();
    drop(tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer)).await);
    let answer = String::from_utf8_lossy(&answer);
    let (head, text) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or(0);
    let content_type = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_default();
    (status, content_type, text.to_owned())
}

/// Every hostile body on every JSON endpoint: 413 past the limit, another 4xx otherwise,
/// always with a JSON error body; the server keeps serving throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_bodies_get_a_4xx_on_every_json_endpoint() {
    let backend = Backend::embedded();
    let upstream = FakeUpstream::start().await;
    let config = gateway_config(&upstream);
    let mut args = serve_args(&backend);
    args.extend(admin_args());
    let limit = BODY_LIMIT.to_string();
    let config_path = config.path().display().to_string();
    args.extend(
        [
            "--body-limit",
            &limit,
            "--gateway-body-limit",
            &limit,
            "--gateway-config",
            &config_path,
            "--proxy-master-key",
            MASTER_KEY,
        ]
        .map(str::to_owned),
    );
    let server = SandgateProcess::spawn(&args, &[]).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    // A conversation to PATCH and an admin token, so the bodies are what gets judged.
    let id = new_id();
    assert_eq!(
        server
            .deliver(&client, &conversation(&id, "2026-03-01T12:00:00Z", "idle"))
            .await,
        200
    );
    let token = format!(
        "Bearer {}",
        server.admin_token(&client, ADMIN_PASSWORD).await
    );
    let master = format!("Bearer {MASTER_KEY}");
    use reqwest::Method;
    let endpoints = [
        endpoint(
            Method::POST,
            "/api/v1/webhooks/conversations",
            &[("x-session-api-key", WEBHOOK_KEY)],
        )
        .positional(422, &[r#"[{"kind": "LocalWorkspace"}]"#]),
        endpoint(
            Method::PATCH,
            &format!("/api/v1/conversations/{id}"),
            &[("x-api-key", RUNTIME_KEY)],
        )
        .positional(422, &[r#"[{"team": "a"}]"#]),
        endpoint(
            Method::POST,
            "/api/v1/settings/profiles/hostile",
            &[("x-session-api-key", WEBHOOK_KEY)],
        )
        .positional(
            422,
            &[r#"[false, {"model": "gpt-4o"}]"#, r#"{"llm": ["gpt-4o"]}"#],
        ),
        endpoint(Method::POST, "/api/admin/login", &[]).positional(422, &[r#"["c", "h"]"#]),
        endpoint(
            Method::PUT,
            "/api/admin/warm-runtime-configs/hostile",
            &[("authorization", &token)],
        )
        .positional(422, &[r#"["img:x", "/workspace", ["/bin/agent"], {}]"#]),
        endpoint(Method::POST, "/start", &[("x-api-key", RUNTIME_KEY)])
            .positional(422, &[r#"["img:x", ["/bin/agent"], "/workspace"]"#]),
        endpoint(Method::POST, "/pause", &[("x-api-key", RUNTIME_KEY)])
            .positional(422, &[r#"["runtime-id"]"#]),
        endpoint(Method::POST, "/model/new", &[("authorization", &master)]).positional(
            400,
            &[
                r#"["m", ["gateway_proxy/x", "http://127.0.0.1:9", "k"]]"#,
                r#"{"model_name": "m", "gateway_params": ["gateway_proxy/x", "http://127.0.0.1:9", "k"]}"#,
            ],
        ),
        endpoint(
            Method::POST,
            "/v1/chat/completions",
            &[("authorization", &master)],
        )
        .positional(400, &[r#"["fake", []]"#]),
    ];

    let mut failures = Vec::new();
    let mut answered = 0;
    for endpoint in &endpoints {
        let positional = endpoint
            .positional
            .iter()
            .map(|body| hostile("the fields given positionally", *body));
        for body in bodies().into_iter().chain(positional) {
            let case = format!("{} {} ← {}", endpoint.method, endpoint.path, body.name);
            match send(&client, &server, endpoint, &body).await {
                Err(err) => failures.push(format!("{case}: no answer ({err})")),
                Ok((status, content_type, text)) => {
                    answered += 1;
                    let status_ok = if body.name.starts_with("oversized") {
                        status == 413
                    } else if body.name.ends_with("positionally") {
                        status == endpoint.positional_status
                    } else {
                        (400..500).contains(&status)
                    };
                    let json_ok = content_type.starts_with("application/json")
                        && serde_json::from_str::<Value>(&text).is_ok();
                    if !status_ok || !json_ok {
                        let shown: String = text.chars().take(200).collect();
                        failures.push(format!("{case}: {status} {content_type} {shown}"));
                    }
                }
            }
        }
    }
    let health = client
        .get(server.url("/health"))
        .send()
        .await
        .map(|response| response.status().as_u16());
    assert!(
        failures.is_empty() && matches!(health, Ok(200)),
        "{} of {answered} answers were wrong (health after: {health:?}):\n{}\n\nlog:\n{}",
        failures.len(),
        failures.join("\n"),
        server.log()
    );
    assert!(
        !server.log().contains("panicked"),
        "a handler panicked:\n{}",
        server.log()
    );
}

/// A caller without credentials learns nothing of what it sent: a body or query that does
/// not decode is 401 to it, and the field's error only to a caller the service accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication_comes_before_any_body_or_query_is_judged() {
    let backend = Backend::embedded();
    let upstream = FakeUpstream::start().await;
    let config = gateway_config(&upstream);
    let path = config.path().display().to_string();
    let sandgate = crate::common::Sandgate::start_with(
        &backend,
        &["--gateway-config", &path, "--proxy-master-key", MASTER_KEY],
    )
    .await;
    let id = new_id();
    let cases: [(reqwest::Method, String, &str, &str, &str); 8] = [
        (
            reqwest::Method::POST,
            "/start".into(),
            "{\"image\": 7}",
            "x-api-key",
            RUNTIME_KEY,
        ),
        (
            reqwest::Method::POST,
            "/pause".into(),
            "[]",
            "x-api-key",
            RUNTIME_KEY,
        ),
        (
            reqwest::Method::POST,
            "/stop".into(),
            "{",
            "x-api-key",
            RUNTIME_KEY,
        ),
        (
            reqwest::Method::POST,
            "/resume".into(),
            "{\"runtime_id\": 1}",
            "x-api-key",
            RUNTIME_KEY,
        ),
        (
            reqwest::Method::PATCH,
            format!("/api/v1/conversations/{id}"),
            "{\"tags\": 5}",
            "x-api-key",
            RUNTIME_KEY,
        ),
        (
            reqwest::Method::GET,
            "/api/v1/conversations?tag=no-colon".into(),
            "",
            "x-api-key",
            RUNTIME_KEY,
        ),
        (
            reqwest::Method::GET,
            format!("/api/v1/conversations/{id}/events?limit=many"),
            "",
            "x-api-key",
            RUNTIME_KEY,
        ),
        (
            reqwest::Method::POST,
            "/model/new".into(),
            "{\"model_name\": []}",
            "authorization",
            &format!("Bearer {MASTER_KEY}"),
        ),
    ];
    for (method, path, body, header, key) in &cases {
        let send = |credentials: Option<(&str, &str)>| {
            let mut request = sandgate
                .client
                .request(method.clone(), sandgate.url(path))
                .header("content-type", "application/json");
            if !body.is_empty() {
                request = request.body(body.to_string());
            }
            if let Some((name, value)) = credentials {
                request = request.header(name, value);
            }
            request.send()
        };
        let anonymous = send(None).await.expect("request");
        assert_eq!(
            anonymous.status(),
            401,
            "{method} {path} without credentials"
        );
        let wrong = send(Some((header, "wrong-key"))).await.expect("request");
        assert_eq!(wrong.status(), 401, "{method} {path} with a wrong key");
        let accepted = send(Some((header, key))).await.expect("request");
        assert!(
            matches!(accepted.status().as_u16(), 400 | 422),
            "{method} {path} with its key: {}",
            accepted.status()
        );
    }
}
