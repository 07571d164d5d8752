//! What pydantic stores for a scalar that validated from another JSON type than its
//! documented one (`model_dump(mode="json")`): the `Value` path rewrites it, and the fast
//! path hands such a body over to the `Value` path.

use serde_json::{Number, Value, json};

use super::datetime::{iso_utc, parse_datetime};
use super::scalars::{Scalar, in_i64, parse_float_str, parse_int_str};
use super::tree::{Node, StrFormat};

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
