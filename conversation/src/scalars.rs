//! pydantic v2's lax-mode scalar rules, as FastAPI applies them to a parsed JSON body.

use serde_json::{Number, Value, json};

use super::pending::{PendingError, number_text};
use super::tree::{Bound, Bounds};

/// Boxed: errors are rare, and the happy path should move a pointer-sized result.
pub(crate) type Check = Result<(), Box<PendingError>>;

pub(crate) fn err(error_type: &'static str, msg: &str) -> Box<PendingError> {
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
pub(crate) fn in_i64(f: f64) -> bool {
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
    fn strings_and_uuids() {
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
    }
}
