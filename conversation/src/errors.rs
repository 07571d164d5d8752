//! Validation errors in pydantic's shape: what the validator reports, and what the
//! runtime API's own checks (admin, settings, sandboxes) report in the same shape. It
//! depends on nothing else in the crate, so those users reach it without the validator.

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
}
