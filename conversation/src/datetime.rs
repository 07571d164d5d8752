//! pydantic's lax `datetime`: ISO 8601 text (a date alone is midnight) or a Unix
//! timestamp, with pydantic-core's error messages; and the two forms Sandgate keeps of
//! one, pydantic's JSON text and microseconds since the epoch.

use serde_json::{Number, json};
use speedate::{Date, DateTime, DateTimeConfig, MicrosecondsPrecisionOverflowBehavior, TimeConfig};
use strum::EnumMessage;

use super::pending::PendingError;
use super::scalars::{Scalar, err};

fn datetime_config() -> DateTimeConfig {
    DateTimeConfig {
        time_config: TimeConfig {
            // pydantic's defaults: truncate extra fraction digits; timestamps are UTC.
            microseconds_precision_overflow_behavior:
                MicrosecondsPrecisionOverflowBehavior::Truncate,
            unix_timestamp_offset: Some(0),
        },
        ..DateTimeConfig::default()
    }
}

/// A parsed `format: date-time` value, or pydantic's error for it.
pub(crate) fn parse_datetime<'a>(v: impl Into<Scalar<'a>>) -> Result<DateTime, Box<PendingError>> {
    let config = datetime_config();
    match v.into() {
        Scalar::String(s) => match DateTime::parse_bytes_with_config(s.as_bytes(), &config) {
            Ok(dt) => Ok(dt),
            // Lax mode falls back to a plain date at midnight.
            Err(_) => match Date::parse_bytes(s.as_bytes()) {
                Ok(date) => Ok(DateTime {
                    date,
                    time: midnight(),
                }),
                Err(e) => Err(parse_error(
                    "datetime_from_date_parsing",
                    "Input should be a valid datetime or date",
                    &e,
                )),
            },
        },
        Scalar::Number(n) => timestamp(n, &config),
        // NaN, an infinity or an integer past 64 bits: a timestamp out of range.
        Scalar::Special { value, .. } => {
            let reason = if value.is_nan() {
                "NaN values not permitted"
            } else if value > 0.0 {
                "dates after 9999 are not supported as unix timestamps"
            } else {
                "dates before 0000 are not supported as unix timestamps"
            };
            Err(Box::new(PendingError::new(
                "datetime_parsing",
                format!("Input should be a valid datetime, {reason}"),
                Some(json!({ "error": reason })),
            )))
        }
        _ => Err(err("datetime_type", "Input should be a valid datetime")),
    }
}

fn midnight() -> speedate::Time {
    speedate::Time {
        hour: 0,
        minute: 0,
        second: 0,
        microsecond: 0,
        tz_offset: None,
    }
}

fn timestamp(n: &Number, config: &DateTimeConfig) -> Result<DateTime, Box<PendingError>> {
    let parsed = match n.as_i64() {
        Some(seconds) => DateTime::from_timestamp_with_config(seconds, 0, config),
        // pydantic-core's `float_as_datetime`: the floor in seconds, and the fraction's
        // magnitude rounded to the microsecond (`1e-07` is the epoch).
        None => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            let micros = (f.fract().abs() * 1_000_000.0).round() as u32;
            DateTime::from_timestamp_with_config(f.floor() as i64, micros, config)
        }
    };
    parsed.map_err(|e| parse_error("datetime_parsing", "Input should be a valid datetime", &e))
}

fn parse_error(
    error_type: &'static str,
    prefix: &str,
    e: &speedate::ParseError,
) -> Box<PendingError> {
    let reason = e.get_documentation().unwrap_or_default();
    Box::new(PendingError::new(
        error_type,
        format!("{prefix}, {reason}"),
        Some(json!({ "error": reason })),
    ))
}

/// A UTC datetime as pydantic writes one in JSON: `2026-03-01T12:00:00Z`, with six
/// fraction digits when it has microseconds.
pub(crate) fn iso_utc(dt: &DateTime) -> String {
    let (d, t) = (&dt.date, &dt.time);
    let fraction = if t.microsecond == 0 {
        String::new()
    } else {
        format!(".{:06}", t.microsecond)
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{fraction}Z",
        d.year, d.month, d.day, t.hour, t.minute, t.second
    )
}

/// Microseconds since the Unix epoch, UTC; a naive datetime is taken as UTC.
pub(crate) fn epoch_micros(dt: &DateTime) -> i64 {
    dt.timestamp_tz() * 1_000_000 + i64::from(dt.time.microsecond)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lax_datetimes() {
        assert!(parse_datetime(&json!("2026-03-01 12:00:00Z")).is_ok());
        assert!(parse_datetime(&json!("2026-03-01T12:00:00")).is_ok());
        assert!(parse_datetime(&json!("2026-03-01")).is_ok());
        assert!(parse_datetime(&json!(1_700_000_000)).is_ok());
        let e = parse_datetime(&json!("2026-13-01T12:00:00Z")).err();
        assert_eq!(
            e.as_ref().map(|e| e.error_type),
            Some("datetime_from_date_parsing")
        );
        assert_eq!(
            e.map(|e| e.msg).as_deref(),
            Some(
                "Input should be a valid datetime or date, month value is outside expected range of 1-12"
            )
        );
        assert_eq!(
            parse_datetime(&json!(true)).err().map(|e| e.error_type),
            Some("datetime_type")
        );
        let dt = parse_datetime(&json!("1970-01-01T01:00:00.5+01:00")).ok();
        assert_eq!(dt.map(|d| epoch_micros(&d)), Some(500_000));
    }
}
