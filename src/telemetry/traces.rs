//! The OpenTelemetry tracer: spans always get W3C trace context; they are exported over
//! OTLP/HTTP (protobuf) by a batch span processor when OTLP is configured through the
//! standard variables (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`, `OTEL_BSP_*`, `OTEL_TRACES_SAMPLER`).

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

/// How long buffered spans may take to leave at shutdown.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Traces {
    provider: SdkTracerProvider,
    /// Where spans go, for the log; `None`: nowhere.
    endpoint: Option<String>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .filter(|value| !value.trim().is_empty())
}

/// The configured OTLP endpoint, unless the standard switches turn exporting off.
fn otlp_endpoint() -> Option<String> {
    if env("OTEL_SDK_DISABLED").is_some_and(|value| value.eq_ignore_ascii_case("true"))
        || env("OTEL_TRACES_EXPORTER").is_some_and(|value| value.eq_ignore_ascii_case("none"))
    {
        return None;
    }
    env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"))
}

/// The resource: `OTEL_SERVICE_NAME` (or `service.name` in `OTEL_RESOURCE_ATTRIBUTES`),
/// else `service`.
fn resource(service: &str) -> Resource {
    let detected = Resource::builder().build();
    let named = detected
        .get(&opentelemetry::Key::new("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    if named {
        detected
    } else {
        Resource::builder()
            .with_service_name(service.to_owned())
            .build()
    }
}

impl Traces {
    pub fn new(service: &str) -> anyhow::Result<Self> {
        let mut builder = SdkTracerProvider::builder().with_resource(resource(service));
        let endpoint = otlp_endpoint();
        if endpoint.is_some() {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .build()
                .map_err(|err| anyhow::anyhow!("cannot set up the OTLP exporter: {err}"))?;
            builder = builder.with_batch_exporter(exporter);
        }
        Ok(Self {
            provider: builder.build(),
            endpoint,
        })
    }

    /// Whether spans leave the process (an OTLP endpoint is set and exporting is on).
    pub fn exported(&self) -> bool {
        self.endpoint.is_some()
    }

    pub fn tracer(&self) -> SdkTracer {
        self.provider.tracer("sandgate")
    }

    /// Says where spans go (once logging is up).
    pub fn log_exporter(&self) {
        let protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .filter(|protocol| protocol != "http/protobuf");
        if let Some(protocol) = protocol {
            tracing::warn!(%protocol, "only the http/protobuf OTLP protocol is built in; using it");
        }
        if let Some(endpoint) = &self.endpoint {
            let endpoint = sandgate_store::redact_url(endpoint);
            tracing::info!(%endpoint, "traces: exported over OTLP/HTTP");
        }
    }

    /// Flushes and stops the exporter (a blocking call: off the async threads).
    pub async fn shutdown(self) {
        if self.endpoint.is_none() {
            return;
        }
        let provider = self.provider;
        let flushed =
            tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(FLUSH_TIMEOUT))
                .await;
        match flushed {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "traces: the last spans were not exported")
            }
            Err(err) => tracing::warn!(error = %err, "traces: the exporter's shutdown failed"),
        }
    }
}
