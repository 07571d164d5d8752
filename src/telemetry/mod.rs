//! Logs, traces and metrics.
//!
//! Logs: `tracing` to stderr, as text or JSON, filtered by `--log`. Nothing logged
//! carries a secret: keys, passwords, header values and record contents are never passed
//! to a log macro or a span field. Request spans carry a `trace_id` field, so every log
//! line inside a request names its trace.
//!
//! Traces: every process runs the `tracing-opentelemetry` layer, so spans have W3C trace
//! context and propagate it (edge → gRPC → upstream) whether or not anything is exported;
//! with OTLP configured (`OTEL_EXPORTER_OTLP_ENDPOINT`), spans are also exported. The
//! layer sees Sandgate's own spans at `info` whatever `--log` says: the log filter must
//! not cut a trace.

pub mod metrics;
mod traces;

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::cli::{LogArgs, LogFormat};

/// What must outlive the process's work: the span exporter, flushed by [`Self::shutdown`].
pub struct Telemetry {
    traces: traces::Traces,
}

/// Installs logging and tracing for the process named `service` (OpenTelemetry's
/// `service.name` unless `OTEL_SERVICE_NAME` says otherwise).
pub fn init(args: &LogArgs, service: &str) -> anyhow::Result<Telemetry> {
    let filter = EnvFilter::try_new(&args.log)
        .map_err(|err| anyhow::anyhow!("invalid --log filter {:?}: {err}", args.log))?;
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let logs = match args.log_format {
        LogFormat::Text => logs.with_filter(filter).boxed(),
        LogFormat::Json => logs.json().with_filter(filter).boxed(),
    };
    let traces = traces::Traces::new(service)?;
    let spans = tracing_opentelemetry::layer()
        .with_tracer(traces.tracer())
        // Fewer attributes and no clock reads on every poll: the spans' cost stays
        // negligible beside a request's.
        .with_tracked_inactivity(false)
        .with_threads(false)
        .with_location(false)
        .with_target(false)
        .with_level(false)
        // Parents come from the `tracing` span tree; nothing reads OpenTelemetry's
        // thread-local context, so entering a span need not set it.
        .with_context_activation(false)
        .with_filter(Targets::new().with_target("sandgate", tracing::Level::INFO));
    tracing_subscriber::registry()
        .with(logs)
        .with(spans)
        .try_init()
        .map_err(|err| anyhow::anyhow!("cannot install the logger: {err}"))?;
    traces.log_exporter();
    Ok(Telemetry { traces })
}

impl Telemetry {
    /// Exports the spans still buffered, for at most a few seconds.
    pub async fn shutdown(self) {
        self.traces.shutdown().await;
    }
}
