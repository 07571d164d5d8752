//! Traces of the real binary, exported over OTLP/HTTP to a fake collector: one chat
//! completion is one trace across the edge, the gateway's gRPC service and the upstream,
//! in separate processes or in-process, and a streamed answer's span covers its end.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use futures::StreamExt;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::PATIENCE;
use crate::common::{Backend, RUNTIME_KEY, SandgateProcess, serve_args};
use crate::model_gateway::FakeUpstream;

/// One exported span, as the test reads it.
#[derive(Clone, Debug)]
struct Exported {
    service: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    end_unix_nano: u64,
    /// Its attributes whose values are strings or integers, as text.
    attributes: Vec<(String, String)>,
}

impl Exported {
    fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }
}

/// An OTLP/HTTP collector on port 0: every span it is sent goes down `spans`.
async fn collector(spans: mpsc::UnboundedSender<Exported>) -> String {
    async fn export(
        State(spans): State<mpsc::UnboundedSender<Exported>>,
        body: Bytes,
    ) -> ([(&'static str, &'static str); 1], Vec<u8>) {
        let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf body");
        for resource_spans in request.resource_spans {
            let service = resource_spans
                .resource
                .iter()
                .flat_map(|resource| &resource.attributes)
                .find(|attribute| attribute.key == "service.name")
                .and_then(
                    |attribute| match attribute.value.as_ref()?.value.as_ref()? {
                        AnyValue::StringValue(name) => Some(name.clone()),
                        _ => None,
                    },
                )
                .unwrap_or_default();
            for span in resource_spans
                .scope_spans
                .into_iter()
                .flat_map(|scope| scope.spans)
            {
                drop(
                    spans.send(Exported {
                        service: service.clone(),
                        name: span.name,
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent_span_id: hex(&span.parent_span_id),
                        end_unix_nano: span.end_time_unix_nano,
                        attributes: span
                            .attributes
                            .iter()
                            .filter_map(|attribute| {
                                let value = match attribute.value.as_ref()?.value.as_ref()? {
                                    AnyValue::StringValue(text) => text.clone(),
                                    AnyValue::IntValue(number) => number.to_string(),
                                    _ => return None,
                                };
                                Some((attribute.key.clone(), value))
                            })
                            .collect(),
                    }),
                );
            }
        }
        ([("content-type", "application/x-protobuf")], Vec::new())
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let app = Router::new()
        .route("/v1/traces", post(export))
        .with_state(spans);
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

const MASTER_KEY: &str = "sk-master-key-for-traces";
const UPSTREAM_KEY: &str = "sk-upstream-key-for-traces";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// A gateway config of one entry, `model_name`, sent to `upstream` as the same-kind
/// gateway's `upstream_model` with the upstream's key.
fn proxy_config(
    model_name: &str,
    upstream_model: &str,
    upstream: &FakeUpstream,
) -> tempfile::NamedTempFile {
    crate::common::file_with(&format!(
        "model_list:\n  - model_name: {model_name}\n    gateway_params: {{model: gateway_proxy/{upstream_model}, api_base: \"{}\", api_key: {UPSTREAM_KEY}}}\n",
        upstream.base()
    ))
}

/// `sandgate model-gw` and `sandgate edge` as processes exporting to `collector`: the
/// client's trace continues through the edge's span, the gRPC call's and the upstream
/// call's, and the upstream sees the last as its parent.
#[tokio::test]
async fn one_trace_spans_the_edge_the_grpc_service_and_the_upstream() {
    let (sent, mut spans) = mpsc::unbounded_channel();
    let collector = collector(sent).await;
    let upstream = FakeUpstream::start().await;
    let data = tempfile::tempdir().expect("temp dir");
    let config = proxy_config("claude", "claude-sonnet", &upstream);
    let otel = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "20"),
        ("PROXY_MASTER_KEY", MASTER_KEY),
        // The test's upstream is on loopback, where added models may go only so.
        ("GATEWAY_ALLOWED_UPSTREAM_HOSTS", "127.0.0.1"),
    ];
    let gateway_args = [
        "model-gw",
        "--grpc-listen",
        "127.0.0.1:0",
        "--log-format",
        "json",
        "--data-dir",
        &data.path().display().to_string(),
        "--gateway-config",
        &config.path().display().to_string(),
    ]
    .map(str::to_owned);
    let model_gw = SandgateProcess::spawn(&gateway_args, &otel).await;
    let edge_args = [
        "edge".to_owned(),
        "--listen".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--runtime-api".to_owned(),
        format!("http://{}", model_gw.address),
        "--model-gw".to_owned(),
        format!("http://{}", model_gw.address),
    ];
    let edge = SandgateProcess::spawn(&edge_args, &otel).await;

    let client = reqwest::Client::new();
    let response = client
        .post(edge.url("/v1/chat/completions"))
        .bearer_auth(MASTER_KEY)
        .header("traceparent", format!("00-{TRACE_ID}-{CLIENT_SPAN}-01"))
        .body(
            json!({"model": "claude", "messages": [{"role": "user", "content": "hi"}]}).to_string(),
        )
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    response.bytes().await.expect("body");

    let sent = upstream.last().headers["traceparent"]
        .to_str()
        .expect("ASCII")
        .to_owned();
    let parts: Vec<&str> = sent.split('-').collect();
    assert_eq!(parts.len(), 4, "{sent}");
    assert_eq!(
        parts[1], TRACE_ID,
        "the upstream continues the client's trace"
    );
    let upstream_parent = parts[2].to_owned();
    assert_ne!(upstream_parent, CLIENT_SPAN);

    // Spans arrive as their processes export them; follow the chain from the client's.
    let mut seen: Vec<Exported> = Vec::new();
    let child_of = |seen: &[Exported], parent: &str, service: &str| {
        seen.iter()
            .find(|span| {
                span.trace_id == TRACE_ID
                    && span.parent_span_id == parent
                    && span.service == service
            })
            .cloned()
    };
    let chain = tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some(edge_span) = child_of(&seen, CLIENT_SPAN, "sandgate-edge")
                && let Some(grpc_span) = child_of(&seen, &edge_span.span_id, "sandgate-model-gw")
                && let Some(upstream_span) =
                    child_of(&seen, &grpc_span.span_id, "sandgate-model-gw")
            {
                return (edge_span, grpc_span, upstream_span);
            }
            seen.push(spans.recv().await.expect("the collector runs"));
        }
    })
    .await;
    let Ok((edge_span, grpc_span, upstream_span)) = chain else {
        panic!("the trace is not whole; spans exported: {seen:#?}");
    };
    assert_eq!(edge_span.name, "POST /v1/chat/completions");
    assert_eq!(grpc_span.name, "sandgate.models.v1.ModelGateway/Call");
    // Exported spans carry their attributes (built only when spans are exported).
    assert_eq!(
        (
            edge_span.attribute("http.route"),
            edge_span.attribute("http.response.status_code")
        ),
        (Some("/v1/chat/completions"), Some("200")),
        "{edge_span:?}"
    );
    assert_eq!(
        grpc_span.attribute("rpc.service"),
        Some("sandgate.models.v1.ModelGateway"),
        "{grpc_span:?}"
    );
    assert_eq!(
        upstream_span.attribute("sandgate.model_entry"),
        Some("claude"),
        "{upstream_span:?}"
    );
    assert_eq!(
        upstream_span.span_id, upstream_parent,
        "the upstream's parent is the gateway's upstream span"
    );

    // A log line inside a request names its trace (JSON logs); no secret is logged.
    let added = client
        .post(edge.url("/model/new"))
        .bearer_auth(MASTER_KEY)
        .header(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )
        .body(
            json!({"model_name": "added", "gateway_params": {
                "model": "gateway_proxy/other", "api_base": upstream.base(), "api_key": "sk-added-secret",
            }})
            .to_string(),
        )
        .send()
        .await
        .expect("request");
    assert_eq!(added.status(), 200);
    let line = json_line(&model_gw, "model added").await;
    let log = model_gw.log();
    assert_eq!(
        line["span"]["trace_id"], "0af7651916cd43dd8448eb211c80319c",
        "{line}"
    );
    for secret in [MASTER_KEY, UPSTREAM_KEY, "sk-added-secret", RUNTIME_KEY] {
        assert!(!log.contains(secret), "{secret} was logged");
        assert!(!edge.log().contains(secret), "{secret} was logged");
    }
}

/// The first line `process` logs that contains `needle`, as JSON.
async fn json_line(process: &SandgateProcess, needle: &str) -> Value {
    let line = process.logged_line(needle, PATIENCE).await;
    serde_json::from_str(&line).unwrap_or_else(|err| panic!("not a JSON log line ({err}): {line}"))
}

/// Delivers a new conversation to `server` as a caller in the trace `TRACE_ID`.
async fn deliver_in_trace(server: &SandgateProcess) {
    let answer = reqwest::Client::new()
        .post(server.url("/api/v1/webhooks/conversations"))
        .header("x-session-api-key", crate::common::WEBHOOK_KEY)
        .header("traceparent", format!("00-{TRACE_ID}-{CLIENT_SPAN}-01"))
        .json(&crate::common::conversation(
            &crate::common::new_id(),
            "2026-01-01T00:00:00Z",
            "idle",
        ))
        .send()
        .await
        .expect("request");
    assert_eq!(answer.status(), 200);
}

/// The edge's span in the trace `trace_id` (the child of the client's span) and the span
/// it parents, as the collector gets them.
async fn edge_span_and_child(
    spans: &mut mpsc::UnboundedReceiver<Exported>,
    trace_id: &str,
) -> (Exported, Exported) {
    let mut seen: Vec<Exported> = Vec::new();
    let chain = tokio::time::timeout(PATIENCE, async {
        loop {
            let edge = seen
                .iter()
                .find(|span| span.trace_id == trace_id && span.parent_span_id == CLIENT_SPAN);
            if let Some(edge) = edge
                && let Some(child) = seen
                    .iter()
                    .find(|span| span.trace_id == trace_id && span.parent_span_id == edge.span_id)
            {
                return (edge.clone(), child.clone());
            }
            seen.push(spans.recv().await.expect("the collector runs"));
        }
    })
    .await;
    chain.unwrap_or_else(|_| panic!("the trace is not whole; spans exported: {seen:#?}"))
}

/// `sandgate serve` calls its gRPC services in-process, without the metadata that carries
/// a trace across a socket: a delivery is still one trace, the service's span the edge
/// span's child, and a log line inside it names the trace in each span (JSON readers take
/// the innermost's), without the exporter's span fields.
#[tokio::test]
async fn an_in_process_grpc_call_is_the_edge_spans_child() {
    let (sent, mut spans) = mpsc::unbounded_channel();
    let collector = collector(sent).await;
    let otel = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "20"),
    ];
    let server = SandgateProcess::spawn(&serve_args(&Backend::embedded()), &otel).await;
    deliver_in_trace(&server).await;

    let (edge, grpc) = edge_span_and_child(&mut spans, TRACE_ID).await;
    assert_eq!(edge.name, "POST /api/v1/webhooks/conversations");
    assert_eq!(grpc.name, "sandgate.conversations.v1.Conversations/Upsert");

    let line = server.logged_line("conversation recorded", PATIENCE).await;
    assert!(
        line.contains(&format!(
            "request{{trace_id={TRACE_ID}}}:grpc{{trace_id={TRACE_ID}}}: "
        )),
        "{line}"
    );
    assert!(!line.contains("otel."), "{line}");

    // JSON lines: the innermost span, the service's, names the trace too.
    let mut args = serve_args(&Backend::embedded());
    args.extend(["--log-format".to_owned(), "json".to_owned()]);
    let server = SandgateProcess::spawn(&args, &[]).await;
    deliver_in_trace(&server).await;
    let line = json_line(&server, "conversation recorded").await;
    assert_eq!(line["span"]["name"], "grpc", "{line}");
    assert_eq!(line["span"]["trace_id"], TRACE_ID, "{line}");
}

/// In `sandgate serve` a streamed completion's trace is the edge's span and the upstream
/// call's, its child. The request's span covers the whole answer: it ends after the
/// stream's last event has left, so after the upstream call's span, not at the head.
#[tokio::test]
async fn a_streamed_answers_span_ends_after_its_last_event() {
    const STREAM_TRACE_ID: &str = "5cf92f3577b34da6a3ce929d0e0e4737";
    let (sent, mut spans) = mpsc::unbounded_channel();
    let collector = collector(sent).await;
    let upstream = FakeUpstream::start().await;
    let config = proxy_config("gated", "gated", &upstream);
    let mut args = serve_args(&Backend::embedded());
    args.extend([
        "--gateway-config".to_owned(),
        config.path().display().to_string(),
    ]);
    let otel = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "20"),
        ("PROXY_MASTER_KEY", MASTER_KEY),
    ];
    let server = SandgateProcess::spawn(&args, &otel).await;

    let response = reqwest::Client::new()
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(MASTER_KEY)
        .header(
            "traceparent",
            format!("00-{STREAM_TRACE_ID}-{CLIENT_SPAN}-01"),
        )
        .body(
            json!({"model": "gated", "stream": true, "messages": [{"role": "user", "content": "hi"}]})
                .to_string(),
        )
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let first = body.next().await.expect("a first chunk").expect("chunk");
    assert!(String::from_utf8_lossy(&first).contains("Hel"), "{first:?}");
    // The rest of the stream leaves the upstream only now, long after the answer's head.
    upstream.release.notify_one();
    while let Some(chunk) = body.next().await {
        chunk.expect("chunk");
    }

    let (edge, call) = edge_span_and_child(&mut spans, STREAM_TRACE_ID).await;
    assert_eq!(edge.name, "POST /v1/chat/completions");
    assert_eq!(call.name, "POST chat completion");
    assert!(
        edge.end_unix_nano >= call.end_unix_nano,
        "the request's span ended {} ns before its upstream call's",
        call.end_unix_nano - edge.end_unix_nano
    );

    // Held the same way, a whole answer keeps its length: one body, not a chunked one.
    let whole = reqwest::Client::new()
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(MASTER_KEY)
        .body(
            json!({"model": "gated", "messages": [{"role": "user", "content": "hi"}]}).to_string(),
        )
        .send()
        .await
        .expect("request");
    assert_eq!(whole.status(), 200);
    assert!(
        whole.headers().get("transfer-encoding").is_none(),
        "{:?}",
        whole.headers()
    );
    let length = whole.content_length().expect("a content-length");
    assert_eq!(whole.bytes().await.expect("body").len() as u64, length);
}
