//! Python's renderings of values, as the reference's error messages and coercions show
//! them: `str()`, `repr()`, `str.isspace()`.

use serde_json::Value;

use crate::scalars::Scalar;

/// Python's `str()` of a float: `0.3`, `1000.0`, `inf`, `nan`.
pub(crate) fn python_float(f: f64) -> String {
    if f.is_nan() {
        "nan".into()
    } else if f.is_infinite() {
        if f > 0.0 { "inf".into() } else { "-inf".into() }
    } else if f.fract() == 0.0 && f.abs() < 1e16 {
        format!("{f:.1}")
    } else {
        f.to_string()
    }
}

/// Python's `repr()` of a scalar, as an error message quotes it.
pub(crate) fn python_repr(s: Scalar<'_>) -> String {
    match s {
        Scalar::Null => "None".into(),
        Scalar::Bool(true) => "True".into(),
        Scalar::Bool(false) => "False".into(),
        Scalar::Number(n) => n.to_string(),
        Scalar::String(s) => format!("'{s}'"),
        Scalar::Special { value, .. } => python_float(value),
        Scalar::Compound => "...".into(),
    }
}

/// Python's `str.isspace()`: Unicode's white space and the four information separators.
pub(crate) fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

/// Python's `str()` of a JSON value (containers as JSON text, near enough for a path).
pub(crate) fn python_str(v: &Value) -> String {
    match v {
        Value::String(s) => match s.strip_prefix(crate::parse::SPECIAL) {
            Some("NaN") => "nan".into(),
            Some("Infinity") => "inf".into(),
            Some("-Infinity") => "-inf".into(),
            Some(integer) => integer.into(),
            None => s.clone(),
        },
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        other => other.to_string(),
    }
}
