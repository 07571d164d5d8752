//! Logs, traces and metrics.
//!
//! Logs: `tracing` to stderr, as text or JSON, filtered by `--log`. Nothing logged
//! carries a secret: keys, passwords, header values and record contents are never passed
//! to a log macro or a span field. Request spans carry a `trace_id` field, so every log
//! line inside a request names its trace.
//!
//! Recent warnings and errors: a copy of each, whatever `--log` says, in a bounded ring
//! the support bundle reads (`recent`).
//!
//! Traces: every process runs the `tracing-opentelemetry` layer, so spans have W3C trace
//! context and propagate it (edge → gRPC → upstream) whether or not anything is exported;
//! with OTLP configured (`OTEL_EXPORTER_OTLP_ENDPOINT`), spans are also exported. The
//! layer sees Sandgate's own spans at `info` whatever `--log` says: the log filter must
//! not cut a trace.

mod fields;
mod gathered;
mod line;
pub mod metrics;
pub mod recent;
mod traces;

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::filter::{FilterExt, Targets};
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};
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

/// The text format's fields: `tracing-subscriber`'s, without the `otel.*` ones, which
/// name and classify spans for the trace exporter and would repeat on every log line of
/// a request (the span's name and the line's message say the same). Without colours (a
/// log read by a collector, not a terminal) they are written by [`fields::Plain`], the same
/// text for less.
struct TextFields;

impl<'writer> FormatFields<'writer> for TextFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        if writer.has_ansi_escapes() {
            without_otel(fields, DefaultVisitor::new(writer, true))
        } else {
            without_otel(fields, fields::Plain::new(writer))
        }
    }
}

/// Writes `fields` but the `otel.*` ones with `visitor`.
fn without_otel(fields: impl RecordFields, visitor: impl VisitOutput<fmt::Result>) -> fmt::Result {
    let mut visitor = WithoutOtel(visitor);
    fields.record(&mut visitor);
    visitor.0.finish()
}

struct WithoutOtel<V>(V);

fn is_otel(field: &Field) -> bool {
    field.name().starts_with("otel.")
}

impl<V: Visit> Visit for WithoutOtel<V> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if !is_otel(field) {
            self.0.record_str(field, value);
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        if !is_otel(field) {
            self.0.record_error(field, value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if !is_otel(field) {
            self.0.record_debug(field, value);
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if !is_otel(field) {
            self.0.record_u64(field, value);
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if !is_otel(field) {
            self.0.record_i64(field, value);
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if !is_otel(field) {
            self.0.record_bool(field, value);
        }
    }
}

/// A filter that passes spans and no event. It says which levels it may pass (any), so
/// that a filter it is joined with bounds the process's level: with no word from one
/// layer's filter, the process's bound is none, and every `debug!` and `trace!` of every
/// crate (hyper-util's pool has four on each gateway call) reaches the layers to be
/// refused one by one, where a bound refuses it in the macro.
fn spans_only() -> tracing_subscriber::filter::FilterFn<impl Fn(&tracing::Metadata<'_>) -> bool> {
    tracing_subscriber::filter::filter_fn(|metadata| metadata.is_span())
        .with_max_level_hint(tracing_subscriber::filter::LevelFilter::TRACE)
}

/// The spans of Sandgate's own code.
fn spans_of_sandgate() -> Targets {
    Targets::new().with_target("sandgate", tracing::Level::INFO)
}

/// What must outlive the process's work: the span exporter, flushed by [`Self::shutdown`],
/// and the log writer thread, which writes what is queued when this is dropped.
pub struct Telemetry {
    traces: traces::Traces,
    _log_writer: gathered::Guard,
}

/// Installs logging and tracing for the process named `service` (OpenTelemetry's
/// `service.name` unless `OTEL_SERVICE_NAME` says otherwise).
pub fn init(args: &LogArgs, service: &str) -> anyhow::Result<Telemetry> {
    let filter = EnvFilter::try_new(&args.log)
        .map_err(|err| anyhow::anyhow!("invalid --log filter {:?}: {err}", args.log))?;
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // Requests hand their lines over; the writer thread writes what gathered in one
    // `write` (see `gathered`). Not lossy: when too much waits, loggers wait.
    let (stderr, log_writer) = gathered::gathered("sandgate-log", std::io::stderr())
        .map_err(|err| anyhow::anyhow!("cannot start the log writer: {err}"))?;
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(move || OneLine {
            inner: stderr.clone(),
            ansi,
        })
        .with_ansi(ansi);
    let logs = match args.log_format {
        LogFormat::Text => logs
            .fmt_fields(TextFields)
            .event_format(line::PlainLines::new())
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => logs.json().with_filter(filter).boxed(),
    };
    let traces = traces::Traces::new(service)?;
    // A span's attributes are for its exporter: with none, they are not built.
    sandgate_proto::trace::keep_attributes(traces.exported());
    // The spans of Sandgate's own code: OpenTelemetry's, for the exporter, or only their
    // ids when nothing is exported (see `sandgate_proto::trace`).
    let exported = traces.exported().then(|| {
        tracing_opentelemetry::layer()
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
            // Log lines are events of their span too.
            .with_filter(spans_of_sandgate())
    });
    let ids_only = (!traces.exported()).then(|| {
        sandgate_proto::trace::IdsLayer.with_filter(spans_of_sandgate().and(spans_only()))
    });
    let recent = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .fmt_fields(TextFields)
        .event_format(line::PlainLines::new())
        .with_writer(|| recent::RingWriter)
        .with_filter(tracing_subscriber::filter::LevelFilter::WARN);
    tracing_subscriber::registry()
        .with(logs)
        .with(recent)
        .with(exported)
        .with(ids_only)
        .try_init()
        .map_err(|err| anyhow::anyhow!("cannot install the logger: {err}"))?;
    traces.log_exporter();
    Ok(Telemetry {
        traces,
        _log_writer: log_writer,
    })
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
    use super::line::tests::Sink;

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

    #[test]
    fn the_span_layers_filters_bound_the_processs_level() {
        use tracing_subscriber::filter::{FilterExt, LevelFilter};
        use tracing_subscriber::layer::Filter;

        let ids_only = super::spans_of_sandgate().and(super::spans_only());
        assert_eq!(
            Filter::<tracing_subscriber::Registry>::max_level_hint(&ids_only),
            Some(LevelFilter::INFO)
        );
    }

    #[test]
    fn text_lines_leave_the_exporters_span_fields_out() {
        use tracing_subscriber::layer::SubscriberExt;

        let sink = Sink::default();
        let written = sink.clone();
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .without_time()
            .fmt_fields(super::TextFields)
            .with_writer(move || sink.clone());
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
            let span = tracing::info_span!(
                "request",
                otel.name = "POST /x",
                otel.kind = "server",
                trace_id = tracing::field::Empty
            );
            span.record("trace_id", "abc");
            span.in_scope(|| tracing::info!(conversation = %"c1", status = "idle", "recorded"));
        });
        let text = written.text();
        assert!(text.contains(r#"request{trace_id="abc"}: "#), "{text}");
        assert!(
            text.contains(r#"recorded conversation=c1 status="idle""#),
            "{text}"
        );
        assert!(!text.contains("otel"), "{text}");
    }
}
