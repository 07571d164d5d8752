//! The text format's line without colours, as `tracing-subscriber`'s full format writes
//! it (`2026-12-03T14:11:49.000123Z  INFO request{trace_id="…"}:…: sandgate::access: gateway
//! call model="m" …`), written straight: the library's goes through `fmt` machinery and
//! styles that write nothing for every piece (about 12,000 instructions for the gateway's
//! access line, one per call), and formats the date on every line where it changes once a
//! second. With colours, and for the `log` crate's records (whose target is a field), the
//! library writes the line itself.

use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{Format, FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FmtContext, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

pub(super) struct PlainLines {
    /// The library's own format, for the lines this one leaves to it.
    full: Format,
    /// Whether lines start with their time (always, but in tests).
    time: bool,
}

impl PlainLines {
    pub(super) fn new() -> Self {
        Self {
            full: Format::default(),
            time: true,
        }
    }

    /// Lines without their time, to be compared with the library's (which, for the lines
    /// left to it, still writes it).
    #[cfg(test)]
    fn without_time() -> Self {
        Self {
            time: false,
            ..Self::new()
        }
    }
}

fn level(level: &Level) -> &'static str {
    match *level {
        Level::TRACE => "TRACE",
        Level::DEBUG => "DEBUG",
        Level::INFO => " INFO",
        Level::WARN => " WARN",
        Level::ERROR => "ERROR",
    }
}

impl<S, N> FormatEvent<S, N> for PlainLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        if writer.has_ansi_escapes() || meta.fields().field("log.target").is_some() {
            return self.full.format_event(ctx, writer, event);
        }
        if self.time {
            Seconds.format_time(&mut writer)?;
            writer.write_char(' ')?;
        }
        writer.write_str(level(meta.level()))?;
        writer.write_char(' ')?;
        if let Some(scope) = ctx.event_scope() {
            let mut seen = false;
            for span in scope.from_root() {
                writer.write_str(span.metadata().name())?;
                seen = true;
                if let Some(fields) = span.extensions().get::<FormattedFields<N>>()
                    && !fields.is_empty()
                {
                    writer.write_char('{')?;
                    writer.write_str(fields)?;
                    writer.write_char('}')?;
                }
                writer.write_char(':')?;
            }
            if seen {
                writer.write_char(' ')?;
            }
        }
        writer.write_str(meta.target())?;
        writer.write_str(": ")?;
        ctx.format_fields(writer.by_ref(), event)?;
        writer.write_char('\n')
    }
}

/// The time as `tracing-subscriber`'s `SystemTime` writes it (RFC 3339, UTC, to the
/// microsecond), its date and time of day formatted once a second on each thread.
pub(super) struct Seconds;

thread_local! {
    /// The second last written on this thread, and its text (`2026-12-03T14:11:49`).
    static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

impl FormatTime for Seconds {
    fn format_time(&self, writer: &mut Writer<'_>) -> fmt::Result {
        let Ok(since_epoch) = SystemTime::now().duration_since(UNIX_EPOCH) else {
            return tracing_subscriber::fmt::time::SystemTime.format_time(writer);
        };
        let (seconds, micros) = (since_epoch.as_secs(), since_epoch.subsec_micros());
        let written = SECOND.with_borrow_mut(|(second, text)| {
            if *second != seconds {
                *text = day_and_time(seconds)?;
                *second = seconds;
            }
            Some(write_time(writer, text, micros))
        });
        // Past the date library's range (the end of the year 9999): as the logging library
        // writes it.
        written.unwrap_or_else(|| tracing_subscriber::fmt::time::SystemTime.format_time(writer))
    }
}

/// The date and time of day `seconds` after the epoch (`2026-12-03T14:11:49`), within the
/// date library's range (to the last days of the year 9999).
fn day_and_time(seconds: u64) -> Option<String> {
    let at = jiff::Timestamp::from_second(i64::try_from(seconds).ok()?).ok()?;
    let mut text = String::with_capacity(19);
    write!(text, "{}", at.strftime("%Y-%m-%dT%H:%M:%S")).ok()?;
    Some(text)
}

/// `second` (its date and time of day), then `micros` as six digits and `Z`.
fn write_time(writer: &mut impl fmt::Write, second: &str, micros: u32) -> fmt::Result {
    let mut fraction = *b".000000Z";
    let mut rest = micros;
    for digit in fraction[1..7].iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    writer.write_str(second)?;
    // ASCII digits, a dot and a letter.
    writer.write_str(std::str::from_utf8(&fraction).map_err(|_| fmt::Error)?)
}

#[cfg(test)]
pub(super) mod tests;
