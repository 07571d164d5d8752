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
    sandgate_webhook_gw::describe_metrics();
    sandgate_runtime_api::describe_metrics();
    sandgate_model_gw::describe_metrics();
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

/// `GET /metrics`.
pub fn routes(handle: PrometheusHandle) -> Router {
    Router::new()
        .route("/metrics", get(render))
        .with_state(handle)
}

async fn render(State(handle): State<PrometheusHandle>) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
}
