//! The walker's pending form of a validation error (its location grown as the recursion
//! unwinds, its input looked up once the walk is over), and the pieces of pydantic's
//! messages.

use serde_json::Value;

use super::errors::{LocItem, ValidationError};

/// Where a pending error's `input` will come from once the walk is over.
#[derive(Debug)]
pub(crate) enum PendingInput {
    /// Path (reversed, innermost first) from the node that raised the error to the value.
    Path(Vec<LocItem>),
    /// Already materialised, for errors raised on a value that is not part of the record
    /// (a before-validator's rewritten copy).
    Value(Value),
}

/// An error as the walker builds it: locations grow outward as the recursion unwinds,
/// so the happy path never keeps a path stack.
#[derive(Debug)]
pub(crate) struct PendingError {
    pub error_type: &'static str,
    pub msg: String,
    pub ctx: Option<Value>,
    /// Reversed: innermost segment first.
    pub loc_rev: Vec<LocItem>,
    pub input: PendingInput,
    /// Field position inside the model being validated, to restore definition order.
    pub order: u32,
}

impl PendingError {
    pub fn new(error_type: &'static str, msg: impl Into<String>, ctx: Option<Value>) -> Self {
        PendingError {
            error_type,
            msg: msg.into(),
            ctx,
            loc_rev: Vec::new(),
            input: PendingInput::Path(Vec::new()),
            order: 0,
        }
    }

    /// A segment that is both a location and a step into the input.
    pub fn push_path(&mut self, seg: &LocItem) {
        self.loc_rev.push(seg.clone());
        if let PendingInput::Path(p) = &mut self.input {
            p.push(seg.clone());
        }
    }

    /// A location-only segment (union member label, tagged-union tag).
    pub fn push_label(&mut self, seg: &str) {
        self.loc_rev.push(LocItem::Key(seg.to_owned()));
    }

    /// Resolves the input against `root` (the redacted tree the path is relative to).
    pub fn resolve_input(&mut self, root: &Value) {
        if let PendingInput::Path(p) = &self.input {
            let v = lookup_rev(root, p).cloned().unwrap_or(Value::Null);
            self.input = PendingInput::Value(v);
        }
    }

    pub fn finish(mut self, root: &Value) -> ValidationError {
        self.resolve_input(root);
        let input = match self.input {
            PendingInput::Value(v) => v,
            PendingInput::Path(_) => Value::Null,
        };
        self.loc_rev.reverse();
        ValidationError {
            error_type: self.error_type,
            loc: self.loc_rev,
            msg: self.msg,
            input,
            ctx: self.ctx,
        }
    }
}

fn lookup_rev<'a>(root: &'a Value, path_rev: &[LocItem]) -> Option<&'a Value> {
    let mut cur = root;
    for seg in path_rev.iter().rev() {
        cur = match (seg, cur) {
            (LocItem::Key(k), Value::Object(m)) => m.get(k)?,
            (LocItem::Index(i), Value::Array(a)) => a.get(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// pydantic's rendering of a list of expected values: `'a', 'b' or 'c'`.
pub(crate) fn expected_list<S: AsRef<str>>(values: &[S]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| format!("'{}'", v.as_ref())).collect();
    match quoted.len() {
        0 => String::new(),
        1 => quoted[0].clone(),
        n => format!("{} or {}", quoted[..n - 1].join(", "), quoted[n - 1]),
    }
}

/// Python's `repr` of a list of strings, as in `Expected one of: ['A', 'B']`.
pub(crate) fn python_str_list(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| format!("'{v}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// How a constraint number appears in a pydantic message: Rust's float Display, as
/// pydantic-core renders it (`0.0` prints as `0`).
pub(crate) fn number_text(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        i.to_string()
    } else if let Some(u) = n.as_u64() {
        u.to_string()
    } else {
        n.as_f64().map(|f| f.to_string()).unwrap_or_default()
    }
}

/// A `value_error` raised by a Python validator: pydantic prefixes the text.
pub(crate) fn value_error(text: &str) -> PendingError {
    PendingError::new(
        "value_error",
        format!("Value error, {text}"),
        Some(serde_json::json!({ "error": {} })),
    )
}

pub(crate) fn missing() -> PendingError {
    PendingError::new("missing", "Field required", None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_lists() {
        assert_eq!(expected_list(&["a"]), "'a'");
        assert_eq!(expected_list(&["a", "b", "c"]), "'a', 'b' or 'c'");
        assert_eq!(python_str_list(&["A".into(), "B".into()]), "['A', 'B']");
    }
}
