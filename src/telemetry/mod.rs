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

/// Writes each log record as exactly one line. A field can hold text a client chose (a
/// profile name, a model name): its newlines and other control characters are escaped
/// (`\n`, `\x07`), so no client forges a log line. The text format writes a record in
/// one `write`, ending in its own newline; the JSON format escapes them already.
struct OneLine<W> {
    inner: W,
    /// Colours are on: the escape character starts them, so it is let through.
    ansi: bool,
}

impl<W: std::io::Write> OneLine<W> {
    fn is_unsafe(&self, byte: u8) -> bool {
        (byte < 0x20 && byte != b'\t' && !(self.ansi && byte == 0x1b)) || byte == 0x7f
    }
}

impl<W: std::io::Write> std::io::Write for OneLine<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let (record, newline) = match buf.strip_suffix(b"\n") {
            Some(record) => (record, true),
            None => (buf, false),
        };
        if !record.iter().any(|&byte| self.is_unsafe(byte)) {
            self.inner.write_all(buf)?;
            return Ok(buf.len());
        }
        let mut line = Vec::with_capacity(buf.len() + 16);
        for &byte in record {
            match byte {
                b'\n' => line.extend_from_slice(b"\\n"),
                b'\r' => line.extend_from_slice(b"\\r"),
                byte if self.is_unsafe(byte) => {
                    line.extend_from_slice(format!("\\x{byte:02x}").as_bytes());
                }
                byte => line.push(byte),
            }
        }
        if newline {
            line.push(b'\n');
        }
        self.inner.write_all(&line)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// What must outlive the process's work: the span exporter, flushed by [`Self::shutdown`].
pub struct Telemetry {
    traces: traces::Traces,
}

/// Installs logging and tracing for the process named `service` (OpenTelemetry's
/// `service.name` unless `OTEL_SERVICE_NAME` says otherwise).
pub fn init(args: &LogArgs, service: &str) -> anyhow::Result<Telemetry> {
    let filter = EnvFilter::try_new(&args.log)
        .map_err(|err| anyhow::anyhow!("invalid --log filter {:?}: {err}", args.log))?;
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(move || OneLine {
            inner: std::io::stderr(),
            ansi,
        })
        .with_ansi(ansi);
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

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::OneLine;

    fn written(ansi: bool, record: &[u8]) -> String {
        let mut line = OneLine {
            inner: Vec::new(),
            ansi,
        };
        line.write_all(record).unwrap();
        String::from_utf8(line.inner).unwrap()
    }

    #[test]
    fn a_record_is_one_line_whatever_its_fields_hold() {
        assert_eq!(
            written(false, b"INFO profile saved profile=a\nERROR forged\r\x07\n"),
            "INFO profile saved profile=a\\nERROR forged\\r\\x07\n"
        );
        assert_eq!(written(false, b"INFO\tplain\n"), "INFO\tplain\n");
        assert_eq!(
            written(true, b"\x1b[32mINFO\x1b[0m x\n"),
            "\x1b[32mINFO\x1b[0m x\n"
        );
        assert_eq!(written(false, b"\x1b[2J\n"), "\\x1b[2J\n");
    }
}
