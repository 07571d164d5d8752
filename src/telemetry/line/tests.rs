use std::io::Write;
use std::sync::{Arc, Mutex};

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::layer::SubscriberExt;

use super::{PlainLines, Seconds, day_and_time, write_time};
use crate::telemetry::TextFields;

/// What a layer writes of the same events in the same spans: some outside any span, one
/// of another target, at every level, a span's field recorded after it began, nested
/// spans with and without fields, values written plainly and through `Debug`.
fn written_by<E>(format: E) -> String
where
    E: tracing_subscriber::fmt::FormatEvent<tracing_subscriber::Registry, TextFields>
        + Send
        + Sync
        + 'static,
{
    let sink = Sink::default();
    let to_sink = sink.clone();
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .fmt_fields(TextFields)
        .event_format(format)
        .with_writer(move || to_sink.clone());
    tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
        tracing::info!("outside any span");
        tracing::warn!(target: "elsewhere", count = 3, flag = true, "warned");
        let request = tracing::info_span!(
            "request",
            otel.name = "POST /x",
            trace_id = tracing::field::Empty
        );
        request.record("trace_id", "abc");
        let _request = request.enter();
        tracing::error!(reason = "a \"quote\" and a\nnewline", "failed");
        let call = tracing::info_span!("call");
        let _call = call.enter();
        tracing::info!(model = "m", status = 200u16, "gateway call");
        tracing::debug_span!("upstream", attempt = 1).in_scope(|| {
            tracing::debug!(bytes = 12u64, "sent");
            tracing::trace!(r#type = "raw", "deep");
        });
    });
    sink.text()
}

#[test]
fn lines_are_the_logging_librarys_own() {
    let theirs = written_by(tracing_subscriber::fmt::format().without_time());
    assert_eq!(theirs.lines().count(), 6, "{theirs}");
    assert!(
        theirs.contains(r#"request{trace_id="abc"}:call:upstream{attempt=1}: "#),
        "{theirs}"
    );
    assert_eq!(written_by(PlainLines::without_time()), theirs);
}

#[test]
fn the_time_is_the_logging_librarys_own() {
    let time = |timer: &dyn FormatTime| {
        let mut text = String::new();
        timer.format_time(&mut Writer::new(&mut text)).unwrap();
        text
    };
    // Read between two of ours within one second, the library's has their date and
    // time of day; all three have its shape.
    for _ in 0..1000 {
        let before = time(&Seconds);
        let library = time(&tracing_subscriber::fmt::time::SystemTime);
        let after = time(&Seconds);
        if before[..19] != after[..19] {
            continue;
        }
        for text in [&before, &library, &after] {
            let shape: String = text
                .chars()
                .map(|c| if c.is_ascii_digit() { '0' } else { c })
                .collect();
            assert_eq!(shape, "0000-00-00T00:00:00.000000Z", "{text}");
        }
        assert_eq!(library[..19], before[..19]);
        return;
    }
    panic!("no two readings within one second");
}

#[test]
fn dates_and_fractions_are_written_in_full() {
    // As `date -u -d @<seconds> +%Y-%m-%dT%H:%M:%S` writes them.
    assert_eq!(day_and_time(0).unwrap(), "1970-01-01T00:00:00");
    assert_eq!(day_and_time(951_782_400).unwrap(), "2000-02-29T00:00:00");
    assert_eq!(day_and_time(1_764_771_109).unwrap(), "2025-12-03T14:11:49");
    assert_eq!(
        day_and_time(253_402_000_000).unwrap(),
        "9999-12-28T12:26:40"
    );
    // Past the date library's range (its last days of the year 9999): the logging
    // library writes those.
    assert_eq!(day_and_time(253_402_300_799), None);
    for (micros, written) in [(0, "T.000000Z"), (123, "T.000123Z"), (999_999, "T.999999Z")] {
        let mut text = String::new();
        write_time(&mut text, "T", micros).unwrap();
        assert_eq!(text, written);
    }
}

/// A writer the tests read back.
#[derive(Clone, Default)]
pub(crate) struct Sink(Arc<Mutex<Vec<u8>>>);

impl Sink {
    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
