//! pydantic v2's lax-mode scalar rules, as FastAPI applies them to a parsed JSON body.

use serde_json::{Number, Value, json};
use speedate::{Date, DateTime, DateTimeConfig, MicrosecondsPrecisionOverflowBehavior, TimeConfig};
use strum::EnumMessage;

use super::errors::{PendingError, number_text};
use super::schema::{Bound, Bounds, Node, StrFormat};

/// Boxed: errors are rare, and the happy path should move a pointer-sized result.
pub(crate) type Check = Result<(), Box<PendingError>>;

fn err(error_type: &'static str, msg: &str) -> Box<PendingError> {
    Box::new(PendingError::new(error_type, msg, None))
}

/// A scalar as the lax rules see it, borrowed from either JSON tree the model walks
/// (`serde_json::Value`, or the borrowed tree of the fast path).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scalar<'a> {
    Null,
    Bool(bool),
    Number(&'a Number),
    String(&'a str),
    /// A number JSON cannot hold and Python's json reads (`parse::SPECIAL`): NaN, an
    /// infinity, or an integer past 64 bits (`integer`).
    Special {
        value: f64,
        integer: bool,
    },
    /// An array or an object: no scalar rule accepts one.
    Compound,
}

impl<'a> From<&'a Value> for Scalar<'a> {
    fn from(v: &'a Value) -> Self {
        match v {
            Value::Null => Scalar::Null,
            Value::Bool(b) => Scalar::Bool(*b),
            Value::Number(n) => Scalar::Number(n),
            Value::String(s) => match super::parse::special(s) {
                Some((value, integer)) => Scalar::Special { value, integer },
                None => Scalar::String(s),
            },
            Value::Array(_) | Value::Object(_) => Scalar::Compound,
        }
    }
}

pub(crate) fn check_str<'a>(v: impl Into<Scalar<'a>>, min_len: Option<usize>) -> Check {
    let Scalar::String(s) = v.into() else {
        return Err(err("string_type", "Input should be a valid string"));
    };
    if let Some(min) = min_len {
        // Python counts characters; only count when the byte length leaves doubt.
        if s.len() < min || s.chars().count() < min {
            let unit = if min == 1 { "character" } else { "characters" };
            return Err(Box::new(PendingError::new(
                "string_too_short",
                format!("String should have at least {min} {unit}"),
                Some(json!({ "min_length": min })),
            )));
        }
    }
    Ok(())
}

/// Parses what Python's lax `int` accepts from a string: surrounding whitespace, a sign,
/// single underscores between digits, and a fractional part made of zeros only.
/// Returns an approximation good enough to compare against a schema bound.
pub(crate) fn parse_int_str(s: &str) -> Option<f64> {
    let s = s.trim();
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (int_part, frac) = match digits.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (digits, None),
    };
    if let Some(f) = frac
        && (f.is_empty() || !f.bytes().all(|b| b == b'0'))
    {
        return None;
    }
    let bytes = int_part.as_bytes();
    if bytes.is_empty() || !bytes[0].is_ascii_digit() || !bytes[bytes.len() - 1].is_ascii_digit() {
        return None;
    }
    let mut value = 0f64;
    let mut prev_underscore = false;
    for &b in bytes {
        match b {
            b'0'..=b'9' => {
                value = value * 10.0 + f64::from(b - b'0');
                prev_underscore = false;
            }
            b'_' if !prev_underscore => prev_underscore = true,
            _ => return None,
        }
    }
    Some(if neg { -value } else { value })
}

pub(crate) fn check_int<'a>(v: impl Into<Scalar<'a>>, bounds: &Bounds) -> Check {
    let n = match v.into() {
        Scalar::Number(n) => {
            if let Some(i) = n.as_i64() {
                i as f64
            } else if let Some(u) = n.as_u64() {
                u as f64
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                if !f.is_finite() {
                    return Err(err("finite_number", "Input should be a finite number"));
                }
                if f.fract() != 0.0 {
                    return Err(err(
                        "int_from_float",
                        "Input should be a valid integer, got a number with a fractional part",
                    ));
                }
                if !in_i64(f) {
                    return Err(err(
                        "int_parsing_size",
                        "Unable to parse input string as an integer, exceeded maximum size",
                    ));
                }
                f
            }
        }
        Scalar::Bool(b) => f64::from(u8::from(b)),
        Scalar::Special {
            value,
            integer: true,
        } => value,
        Scalar::Special { .. } => {
            return Err(err("finite_number", "Input should be a finite number"));
        }
        Scalar::String(s) => parse_int_str(s).ok_or_else(|| {
            err(
                "int_parsing",
                "Input should be a valid integer, unable to parse string as an integer",
            )
        })?,
        _ => return Err(err("int_type", "Input should be a valid integer")),
    };
    check_bounds(n, bounds, false)
}

/// Whether a float converts to an i64, as pydantic's float → int does (outside, it gives
/// up). Integer literals past u64 arrive here as floats too, and are taken as such.
fn in_i64(f: f64) -> bool {
    (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&f)
}

/// What pydantic-core's lax `float` takes from a string: Rust's float syntax once the
/// surrounding whitespace is trimmed (`inf` and `nan` included); failing that, the string
/// without its underscores, unless one leads, ends or doubles (`"1_000"`; `" 1_0 "` is
/// refused: the second try does not trim).
pub(crate) fn parse_float_str(s: &str) -> Option<f64> {
    s.trim().parse().ok().or_else(|| {
        let valid =
            s.contains('_') && !s.starts_with('_') && !s.ends_with('_') && !s.contains("__");
        valid.then(|| s.replace('_', "").parse().ok()).flatten()
    })
}

pub(crate) fn check_float<'a>(v: impl Into<Scalar<'a>>, bounds: &Bounds) -> Check {
    let n = match v.into() {
        Scalar::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        Scalar::Special { value, .. } => value,
        Scalar::Bool(b) => f64::from(u8::from(b)),
        Scalar::String(s) => parse_float_str(s).ok_or_else(|| {
            err(
                "float_parsing",
                "Input should be a valid number, unable to parse string as a number",
            )
        })?,
        _ => return Err(err("float_type", "Input should be a valid number")),
    };
    check_bounds(n, bounds, true)
}

fn bound_error(
    error_type: &'static str,
    text: &str,
    key: &str,
    b: &Bound,
    float: bool,
) -> Box<PendingError> {
    // A float field's constraint is a Python float (`0.0` in ctx), an int field's an int;
    // the message renders both as pydantic-core does (`0`).
    let ctx_value = match Number::from_f64(b.value) {
        Some(f) if float => Value::Number(f),
        _ => Value::Number(b.text.clone()),
    };
    let mut ctx = serde_json::Map::new();
    ctx.insert(key.to_owned(), ctx_value);
    Box::new(PendingError::new(
        error_type,
        format!("Input should be {text} {}", number_text(&b.text)),
        Some(Value::Object(ctx)),
    ))
}

/// NaN fails every bound, as in Python.
fn check_bounds(n: f64, b: &Bounds, float: bool) -> Check {
    use std::cmp::Ordering::{Equal, Greater, Less};
    if let Some(le) = &b.le
        && !matches!(n.partial_cmp(&le.value), Some(Less | Equal))
    {
        return Err(bound_error(
            "less_than_equal",
            "less than or equal to",
            "le",
            le,
            float,
        ));
    }
    if let Some(lt) = &b.lt
        && n.partial_cmp(&lt.value) != Some(Less)
    {
        return Err(bound_error("less_than", "less than", "lt", lt, float));
    }
    if let Some(ge) = &b.ge
        && !matches!(n.partial_cmp(&ge.value), Some(Greater | Equal))
    {
        return Err(bound_error(
            "greater_than_equal",
            "greater than or equal to",
            "ge",
            ge,
            float,
        ));
    }
    if let Some(gt) = &b.gt
        && n.partial_cmp(&gt.value) != Some(Greater)
    {
        return Err(bound_error("greater_than", "greater than", "gt", gt, float));
    }
    Ok(())
}

pub(crate) fn check_bool<'a>(v: impl Into<Scalar<'a>>) -> Check {
    let parsing = || {
        err(
            "bool_parsing",
            "Input should be a valid boolean, unable to interpret input",
        )
    };
    match v.into() {
        Scalar::Bool(_) => Ok(()),
        // A number is read as an integer first: one outside i64, or with a fraction, is
        // no boolean at all (`bool_type`); an integer other than 0 and 1 is `bool_parsing`.
        Scalar::Number(n) => match n.as_f64() {
            Some(f) if f == 0.0 || f == 1.0 => Ok(()),
            Some(f) if f.fract() == 0.0 && in_i64(f) => Err(parsing()),
            _ => Err(err("bool_type", "Input should be a valid boolean")),
        },
        Scalar::String(s) => {
            const WORDS: [&str; 12] = [
                "0", "off", "f", "false", "n", "no", "1", "on", "t", "true", "y", "yes",
            ];
            let t = s.trim();
            if WORDS.iter().any(|w| w.eq_ignore_ascii_case(t)) {
                Ok(())
            } else {
                Err(parsing())
            }
        }
        _ => Err(err("bool_type", "Input should be a valid boolean")),
    }
}

/// One string out of a fixed set: a Python `Literal` (`literal_error`) or `Enum` (`enum`).
pub(crate) fn check_choice<'a>(
    v: impl Into<Scalar<'a>>,
    values: &[String],
    expected: &str,
    error_type: &'static str,
) -> Check {
    if let Scalar::String(s) = v.into()
        && values.iter().any(|x| x == s)
    {
        return Ok(());
    }
    Err(Box::new(PendingError::new(
        error_type,
        format!("Input should be {expected}"),
        Some(json!({ "expected": expected })),
    )))
}

pub(crate) fn check_uuid<'a>(v: impl Into<Scalar<'a>>) -> Check {
    let Scalar::String(s) = v.into() else {
        return Err(err(
            "uuid_type",
            "UUID input should be a string, bytes or UUID object",
        ));
    };
    uuid::Uuid::parse_str(s).map(|_| ()).map_err(|e| {
        let reason = uuid_reason(&e.to_string());
        Box::new(PendingError::new(
            "uuid_parsing",
            format!("Input should be a valid UUID, {reason}"),
            Some(json!({ "error": reason })),
        ))
    })
}

/// The uuid crate's error text as the reference's pydantic-core build renders it: that
/// build predates uuid's shorter messages (and counted character positions from 1).
fn uuid_reason(text: &str) -> String {
    if let Some(rest) = text.strip_prefix("invalid character: found `")
        && let Some((character, index)) = rest.rsplit_once("` at ")
        && let Ok(index) = index.parse::<usize>()
    {
        return format!(
            "invalid character: expected an optional prefix of `urn:uuid:` followed by [0-9a-fA-F-], found `{character}` at {}",
            index + 1
        );
    }
    if let Some(len) = text.strip_prefix("invalid length: found ") {
        return format!("invalid length: expected length 32 for simple format, found {len}");
    }
    text.to_owned()
}

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

/// What pydantic's `model_dump(mode="json")` gives for a scalar of `node` that validated
/// from another JSON type than its documented one: `"7"`, `7.0` or `true` for an integer
/// is the integer, `"1.5"` for a number the number, `"yes"` or `1` for a boolean `true`, an
/// epoch number for a date-time its ISO 8601 text. `None`: it is stored as sent (already of
/// its type, or nothing JSON holds: a special number, an integer past 64 bits).
pub(crate) fn canonical(node: &Node, v: &Value) -> Option<Value> {
    match (node, v) {
        (Node::Int(_), Value::Number(n)) if n.is_i64() || n.is_u64() => None,
        (Node::Int(_), Value::Number(n)) => n
            .as_f64()
            .filter(|f| f.fract() == 0.0 && in_i64(*f))
            .map(|f| Value::from(f as i64)),
        (Node::Int(_), Value::Bool(b)) => Some(Value::from(i64::from(*b))),
        (Node::Int(_), Value::String(s)) => exact_int(s).map(Value::from),
        (Node::Float(_), Value::Bool(b)) => Some(json!(f64::from(u8::from(*b)))),
        (Node::Float(_), Value::String(s)) if super::parse::special(s).is_none() => {
            parse_float_str(s)
                .and_then(Number::from_f64)
                .map(Value::Number)
        }
        (Node::Bool, Value::Number(n)) => n.as_f64().map(|f| Value::Bool(f == 1.0)),
        (Node::Bool, Value::String(s)) => {
            let word = s.trim().to_ascii_lowercase();
            match word.as_str() {
                "1" | "on" | "t" | "true" | "y" | "yes" => Some(Value::Bool(true)),
                "0" | "off" | "f" | "false" | "n" | "no" => Some(Value::Bool(false)),
                _ => None,
            }
        }
        (
            Node::Str {
                format: StrFormat::DateTime,
                ..
            },
            Value::Number(_),
        ) => parse_datetime(v).ok().map(|dt| Value::String(iso_utc(&dt))),
        _ => None,
    }
}

/// Whether a scalar the fast path accepted is stored as sent: of its documented JSON type
/// (else the `Value` path rewrites it, [`canonical`]).
/// Only the scalar kinds that can be rewritten read `v` (a string's special-number check
/// costs a look at it).
pub(crate) fn is_canonical<'a>(node: &Node, v: impl Into<Scalar<'a>>) -> bool {
    match node {
        Node::Int(_) => match v.into() {
            Scalar::Number(n) => n.is_i64() || n.is_u64(),
            Scalar::Special { .. } => true,
            _ => false,
        },
        Node::Float(_) => matches!(v.into(), Scalar::Number(_) | Scalar::Special { .. }),
        Node::Bool => matches!(v.into(), Scalar::Bool(_)),
        Node::Str {
            format: StrFormat::DateTime,
            ..
        } => matches!(v.into(), Scalar::String(_)),
        _ => true,
    }
}

/// The integer a string `check_int` accepted stands for, exactly (`parse_int_str` only
/// approximates it); `None` past 64 bits.
fn exact_int(s: &str) -> Option<i64> {
    parse_int_str(s)?;
    let t = s.trim();
    let whole = t.split_once('.').map_or(t, |(whole, _)| whole);
    whole.replace('_', "").parse().ok()
}

/// A UTC datetime as pydantic writes one in JSON: `2026-03-01T12:00:00Z`, with six
/// fraction digits when it has microseconds.
fn iso_utc(dt: &DateTime) -> String {
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

    fn no_bounds() -> Bounds {
        Bounds::default()
    }

    fn ty(r: Check) -> &'static str {
        match r {
            Ok(()) => "ok",
            Err(e) => e.error_type,
        }
    }

    #[test]
    fn lax_int() {
        let b = no_bounds();
        assert_eq!(ty(check_int(&json!(5), &b)), "ok");
        assert_eq!(ty(check_int(&json!(true), &b)), "ok");
        assert_eq!(ty(check_int(&json!(5.0), &b)), "ok");
        // A float past i64 is refused, as pydantic does (the differential corpus shows it).
        assert_eq!(ty(check_int(&json!(1e30), &b)), "int_parsing_size");
        assert_eq!(ty(check_int(&json!(9.2e18), &b)), "ok");
        assert_eq!(ty(check_int(&json!(5.5), &b)), "int_from_float");
        assert_eq!(ty(check_int(&json!(" 5 "), &b)), "ok");
        assert_eq!(ty(check_int(&json!("1_000"), &b)), "ok");
        assert_eq!(ty(check_int(&json!("5.0"), &b)), "ok");
        assert_eq!(ty(check_int(&json!("5.5"), &b)), "int_parsing");
        assert_eq!(ty(check_int(&json!("abc"), &b)), "int_parsing");
        assert_eq!(ty(check_int(&json!("1__0"), &b)), "int_parsing");
        assert_eq!(ty(check_int(&json!(null), &b)), "int_type");
        assert_eq!(ty(check_int(&json!([]), &b)), "int_type");
    }

    #[test]
    fn bounds_messages() {
        let gt0 = Bounds {
            gt: Some(Bound {
                value: 0.0,
                text: Number::from(0),
            }),
            ..Bounds::default()
        };
        let e = check_int(&json!(0), &gt0).err();
        assert_eq!(
            e.as_ref().map(|e| e.msg.as_str()),
            Some("Input should be greater than 0")
        );
        assert_eq!(e.and_then(|e| e.ctx), Some(json!({"gt": 0})));
        let ge0 = Bounds {
            ge: Number::from_f64(0.0).map(|text| Bound { value: 0.0, text }),
            ..Bounds::default()
        };
        let e = check_float(&json!(-0.5), &ge0).err().map(|e| e.msg);
        assert_eq!(
            e.as_deref(),
            Some("Input should be greater than or equal to 0")
        );
        assert_eq!(ty(check_int(&json!(true), &gt0)), "ok");
    }

    #[test]
    fn lax_float_and_bool() {
        let b = no_bounds();
        assert_eq!(ty(check_float(&json!("1.5"), &b)), "ok");
        assert_eq!(ty(check_float(&json!("abc"), &b)), "float_parsing");
        assert_eq!(ty(check_float(&json!(null), &b)), "float_type");
        assert_eq!(ty(check_bool(&json!(0))), "ok");
        assert_eq!(ty(check_bool(&json!(2))), "bool_parsing");
        assert_eq!(ty(check_bool(&json!(1.0))), "ok");
        assert_eq!(ty(check_bool(&json!(" YES "))), "ok");
        assert_eq!(ty(check_bool(&json!("perhaps"))), "bool_parsing");
        assert_eq!(ty(check_bool(&json!(null))), "bool_type");
        assert_eq!(ty(check_bool(&json!(2.0))), "bool_parsing");
        assert_eq!(ty(check_bool(&json!(0.5))), "bool_type");
        assert_eq!(ty(check_bool(&json!(1e19))), "bool_type");
    }

    #[test]
    fn strings_uuids_datetimes() {
        assert_eq!(ty(check_str(&json!("é"), Some(1))), "ok");
        assert_eq!(ty(check_str(&json!(""), Some(1))), "string_too_short");
        assert_eq!(ty(check_str(&json!(1), None)), "string_type");
        assert_eq!(
            ty(check_uuid(&json!("7F3C2A10-0000-4000-8000-000000000901"))),
            "ok"
        );
        assert_eq!(ty(check_uuid(&json!(null))), "uuid_type");
        let e = check_uuid(&json!("7f3c2a10-0000-4000-8000-00000000090"))
            .err()
            .map(|e| e.msg);
        assert_eq!(
            e.as_deref(),
            Some(
                "Input should be a valid UUID, invalid group length in group 4: expected 12, found 11"
            )
        );
        let e = check_uuid(&json!("zzzzzzzz-0000-4000-8000-000000000001"))
            .err()
            .map(|e| e.msg);
        assert_eq!(
            e.as_deref(),
            Some(
                "Input should be a valid UUID, invalid character: expected an optional prefix of \
                 `urn:uuid:` followed by [0-9a-fA-F-], found `z` at 1"
            )
        );
        let e = check_uuid(&json!("123")).err().map(|e| e.msg);
        assert_eq!(
            e.as_deref(),
            Some(
                "Input should be a valid UUID, invalid length: expected length 32 for simple format, found 3"
            )
        );
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
