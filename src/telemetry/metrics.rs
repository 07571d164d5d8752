//! Prometheus metrics: one recorder per process, installed on first use, rendered in the
//! text exposition format at `/metrics` — on the edge's own port (`serve`, `edge`) or on
//! the listener of `--metrics-listen` (`runtime-api`, `model-gw`). The libraries record
//! through the `metrics` facade where the work happens; without a recorder that costs
//! nothing, so a service run without `--metrics-listen` keeps no metrics.

use std::sync::OnceLock;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use sha2::Digest;

/// Bucket bounds of every histogram (all are durations in seconds): from a fast REST
/// answer (a millisecond) to a long LLM generation (minutes).
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];

/// How often histogram samples are folded into their buckets between scrapes, so that
/// memory stays flat when nobody scrapes.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

static RECORDER: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process's recorder, installed (with every metric's description) on first call.
pub fn recorder() -> PrometheusHandle {
    RECORDER.get_or_init(install).clone()
}

fn install() -> PrometheusHandle {
    let builder = PrometheusBuilder::new();
    let recorder = match builder.set_buckets(BUCKETS) {
        Ok(builder) => builder,
        Err(err) => {
            tracing::warn!(error = %err, "metrics: default buckets");
            PrometheusBuilder::new()
        }
    }
    .build_recorder();
    let handle = recorder.handle();
    if let Err(err) = metrics::set_global_recorder(recorder) {
        tracing::warn!(error = %err, "metrics: another recorder is installed; /metrics stays empty");
    }
    sandgate_edge::describe_metrics();
    sandgate_runtime_api::describe_metrics();
    sandgate_model_gw::describe_metrics();
    sandgate_store::timeline::describe_metrics();
    let upkeep = handle.clone();
    let spawned = std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(UPKEEP_INTERVAL);
                upkeep.run_upkeep();
            }
        });
    if let Err(err) = spawned {
        tracing::warn!(error = %err, "metrics: no upkeep thread; histograms fold at scrapes only");
    }
    handle
}

/// `GET /metrics`; with `key`, only for a scraper that presents it as a bearer token.
pub fn routes(handle: PrometheusHandle, key: Option<String>) -> Router {
    let key = key
        .filter(|key| !key.is_empty())
        .map(|key| sha2::Sha256::digest(key.as_bytes()).into());
    Router::new()
        .route("/metrics", get(render))
        .with_state(Scrape { handle, key })
}

#[derive(Clone)]
struct Scrape {
    handle: PrometheusHandle,
    /// sha256 of the key a scraper must present, compared in constant time.
    key: Option<[u8; 32]>,
}

async fn render(
    State(Scrape { handle, key }): State<Scrape>,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    if let Some(expected) = key {
        let presented = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(sandgate_proto::bearer_token)
            .map(|token| -> [u8; 32] { sha2::Sha256::digest(token.as_bytes()).into() });
        let valid = presented.is_some_and(|digest| {
            bool::from(subtle::ConstantTimeEq::ct_eq(&digest[..], &expected[..]))
        });
        if !valid {
            return (
                axum::http::StatusCode::UNAUTHORIZED,
                [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
                "/metrics needs the metrics key (Authorization: Bearer <METRICS_API_KEY>)\n",
            )
                .into_response();
        }
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
        .into_response()
}
