//! The text format's fields without colours, as `tracing-subscriber`'s `DefaultVisitor`
//! writes them (`name="value" count=3`, a space between), a plain string or a number
//! written straight rather than through `Debug` and the styling of an uncoloured name: the
//! gateway's access line has thirteen fields on every call, and formatting them was about
//! a third of its cost. Whatever else (a message, an error, a value only `Debug` writes, a
//! string `Debug` would escape, a raw identifier's name) `DefaultVisitor` writes itself.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::VisitOutput;
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};

pub(super) struct Plain<'a> {
    writer: Writer<'a>,
    is_empty: bool,
    result: fmt::Result,
}

impl<'a> Plain<'a> {
    pub(super) fn new(writer: Writer<'a>) -> Self {
        Self {
            writer,
            is_empty: true,
            result: Ok(()),
        }
    }

    /// Writes `name=`, after a space unless it is the first field.
    fn name(&mut self, name: &str) -> fmt::Result {
        if self.is_empty {
            self.is_empty = false;
        } else {
            self.writer.write_char(' ')?;
        }
        self.writer.write_str(name)?;
        self.writer.write_char('=')
    }

    /// A number or a boolean, which `Debug` and `Display` write alike.
    fn number(&mut self, field: &Field, value: impl fmt::Display + fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        if !written_plain(field.name()) {
            return self.delegate(field, |visitor| visitor.record_debug(field, &value));
        }
        self.result = self
            .name(field.name())
            .and_then(|()| write!(self.writer, "{value}"));
    }
}

/// A field `DefaultVisitor` writes as `name=value`: not the message, not a raw
/// identifier (`r#type`), not one of `tracing-log`'s fields, which it leaves out.
fn written_plain(name: &str) -> bool {
    name != "message" && !name.starts_with("r#") && !name.starts_with("log.")
}

/// A string `Debug` writes as itself between quotes: printable ASCII, no quote, no
/// backslash.
fn quotes_as_is(value: &str) -> bool {
    value
        .bytes()
        .all(|byte| (0x20..0x7f).contains(&byte) && byte != b'"' && byte != b'\\')
}

impl Visit for Plain<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        if !(written_plain(field.name()) && quotes_as_is(value)) {
            return self.delegate(field, |visitor| visitor.record_str(field, value));
        }
        self.result = self.name(field.name()).and_then(|()| {
            self.writer.write_char('"')?;
            self.writer.write_str(value)?;
            self.writer.write_char('"')
        });
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.number(field, value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.number(field, value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.number(field, value);
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.delegate(field, |visitor| visitor.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.delegate(field, |visitor| visitor.record_debug(field, value));
    }
}

impl Plain<'_> {
    /// `field` as `DefaultVisitor` writes it: with a space before it when one is due; or
    /// not at all, space included, when it is one of `tracing-log`'s.
    fn delegate(&mut self, field: &Field, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        if self.result.is_err() {
            return;
        }
        let mut visitor = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        record(&mut visitor);
        self.result = visitor.finish();
        self.is_empty &= field.name().starts_with("log.");
    }
}

impl VisitOutput<fmt::Result> for Plain<'_> {
    fn finish(self) -> fmt::Result {
        self.result
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::field::RecordFields;

    use super::*;

    #[derive(Debug)]
    struct Failure;

    impl fmt::Display for Failure {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("it \"broke\"")
        }
    }

    impl std::error::Error for Failure {}

    /// Each event's fields as `DefaultVisitor`, then `Plain`, write them.
    #[derive(Default)]
    struct Both(Mutex<Vec<(String, String)>>);

    impl Both {
        fn write(&self, fields: &dyn RecordFields) {
            let (mut default, mut plain) = (String::new(), String::new());
            let mut visitor = DefaultVisitor::new(Writer::new(&mut default), true);
            fields.record(&mut visitor);
            visitor.finish().expect("written");
            let mut visitor = Plain::new(Writer::new(&mut plain));
            fields.record(&mut visitor);
            visitor.finish().expect("written");
            self.0.lock().expect("lock").push((default, plain));
        }
    }

    struct Capture(Arc<Both>);

    impl tracing::Subscriber for Capture {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            self.0.write(span);
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
            self.0.write(values);
        }
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            self.0.write(event);
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    /// Every kind of field, strings that need escaping or not, numbers and messages, each
    /// kind first and not: the same text as `DefaultVisitor`'s.
    #[test]
    fn fields_are_written_as_the_default_visitor_writes_them() {
        let both = Arc::new(Both::default());
        let dispatch = tracing::Dispatch::new(Capture(both.clone()));
        tracing::dispatcher::with_default(&dispatch, || {
            let failure: &(dyn std::error::Error + 'static) = &Failure;
            tracing::info!(
                model = "gpt-4o",
                status = 200u16,
                latency_ms = 3u64,
                "a call"
            );
            tracing::info!(delta = -4i64, ok = true, path = "/v1/chat/completions");
            tracing::info!(quoted = "say \"hi\"", slash = r"a\b", line = "a\nb");
            tracing::info!(unicode = "café ✓", tab = "a\tb", empty = "", bell = "\x07");
            tracing::info!(r#type = "raw", shown = %"displayed", debugged = ?Some(1));
            tracing::info!(error = failure, after = 1u64);
            tracing::info!(ratio = 0.5f64, big = u128::MAX, last = "x");
            tracing::info!("only a message");
            tracing::info!(message = "a message field", status = 7u64);
            tracing::info!(
                log.target = "from log",
                after = "the skipped first",
                n = 2u64
            );
            let span = tracing::info_span!("request", trace_id = tracing::field::Empty, n = 1u64);
            span.record("trace_id", "abc");
        });
        let written = both.0.lock().expect("lock").clone();
        assert!(
            written[0]
                .1
                .contains(r#"model="gpt-4o" status=200 latency_ms=3"#),
            "{written:?}"
        );
        assert_eq!(written.len(), 12);
        for (default, plain) in written {
            assert_eq!(default, plain);
        }
    }
}
