//! Validation errors in pydantic's shape, and the walker's pending form of them.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

/// One segment of an error location: an object key or an array index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocItem {
    Key(String),
    Index(usize),
}

impl LocItem {
    fn to_json(&self) -> Value {
        match self {
            LocItem::Key(k) => Value::String(k.clone()),
            LocItem::Index(i) => Value::from(*i),
        }
    }
}

impl Serialize for LocItem {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            LocItem::Key(k) => s.serialize_str(k),
            LocItem::Index(i) => s.serialize_u64(*i as u64),
        }
    }
}

/// One pydantic error item. `loc` is relative to the request body (no leading `"body"`);
/// `input` comes from the redacted tree, so it never carries a secret.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidationError {
    pub error_type: &'static str,
    pub loc: Vec<LocItem>,
    pub msg: String,
    pub input: Value,
    pub ctx: Option<Value>,
}

impl ValidationError {
    /// FastAPI's item shape, `loc` prefixed with `"body"` as FastAPI reports body errors.
    pub fn to_fastapi_json(&self) -> Value {
        let mut loc = Vec::with_capacity(self.loc.len() + 1);
        loc.push(Value::String("body".to_owned()));
        loc.extend(self.loc.iter().map(LocItem::to_json));
        let mut item = serde_json::Map::new();
        item.insert("type".to_owned(), Value::String(self.error_type.to_owned()));
        item.insert("loc".to_owned(), Value::Array(loc));
        item.insert("msg".to_owned(), Value::String(self.msg.clone()));
        item.insert("input".to_owned(), self.input.clone());
        if let Some(ctx) = &self.ctx {
            item.insert("ctx".to_owned(), ctx.clone());
        }
        Value::Object(item)
    }
}

impl Serialize for ValidationError {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct BodyLoc<'a>(&'a [LocItem]);
        impl Serialize for BodyLoc<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeSeq;
                let mut seq = s.serialize_seq(Some(self.0.len() + 1))?;
                seq.serialize_element("body")?;
                for item in self.0 {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
        }
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("type", self.error_type)?;
        map.serialize_entry("loc", &BodyLoc(&self.loc))?;
        map.serialize_entry("msg", &self.msg)?;
        map.serialize_entry("input", &self.input)?;
        if let Some(ctx) = &self.ctx {
            map.serialize_entry("ctx", ctx)?;
        }
        map.end()
    }
}

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
    fn serializes_like_fastapi() {
        let e = ValidationError {
            error_type: "missing",
            loc: vec![LocItem::Key("agent".into()), LocItem::Index(2)],
            msg: "Field required".into(),
            input: serde_json::json!({}),
            ctx: None,
        };
        let s = serde_json::to_value(&e).unwrap_or_default();
        assert_eq!(s, e.to_fastapi_json());
        assert_eq!(s["loc"], serde_json::json!(["body", "agent", 2]));
        assert!(s.get("ctx").is_none());
    }

    #[test]
    fn expected_lists() {
        assert_eq!(expected_list(&["a"]), "'a'");
        assert_eq!(expected_list(&["a", "b", "c"]), "'a', 'b' or 'c'");
        assert_eq!(python_str_list(&["A".into(), "B".into()]), "['A', 'B']");
    }
}
