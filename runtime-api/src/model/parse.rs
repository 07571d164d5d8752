//! HTTP body bytes → JSON value, accepting what Python's `json.loads` accepts.

use std::borrow::Cow;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Value, json};

use super::errors::{LocItem, ValidationError};

/// Python's json module gives up near its recursion limit (1000); deeper bodies are
/// refused up front so that parsing, dropping and serialising stay far from the stack's end.
pub(crate) const MAX_NESTING: usize = 512;

const BOM: &[u8] = b"\xEF\xBB\xBF";

#[expect(
    clippy::result_large_err,
    reason = "the public API returns pydantic's error item"
)]
pub(crate) fn parse_json(body: &[u8]) -> Result<Value, ValidationError> {
    let text = prepare(body)?;
    let mut de = serde_json::Deserializer::from_slice(&text);
    // Depth is bounded by `prepare` above; serde_json's own limit (128) is shallower
    // than what the reference accepts.
    de.disable_recursion_limit();
    let value = ValueSeed
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v));
    value.map_err(|e| {
        let offset = if e.is_eof() {
            text.len()
        } else {
            byte_offset(&text, e.line(), e.column())
        };
        json_invalid(offset, &reason(&e))
    })
}

/// The text serde_json parses: the body past a BOM, checked for emptiness and depth, with
/// lone surrogate escapes replaced. Shared with the fast path so both parse the same text.
#[expect(
    clippy::result_large_err,
    reason = "the public API returns pydantic's error item"
)]
pub(crate) fn prepare(body: &[u8]) -> Result<Cow<'_, [u8]>, ValidationError> {
    let body = body.strip_prefix(BOM).unwrap_or(body);
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(json_invalid(body.len(), "Expecting value"));
    }
    if let Some(offset) = sandgate_proto::json::nesting_exceeds(body, MAX_NESTING) {
        return Err(json_invalid(offset, "Nesting too deep"));
    }
    Ok(replace_lone_surrogates(body))
}

fn json_invalid(offset: usize, reason: &str) -> ValidationError {
    ValidationError {
        error_type: "json_invalid",
        loc: vec![LocItem::Index(offset)],
        msg: "JSON decode error".to_owned(),
        input: json!({}),
        ctx: Some(json!({ "error": reason })),
    }
}

/// serde_json's message without its " at line L column C" suffix.
fn reason(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

/// serde_json reports 1-based line and column (column counted in bytes).
fn byte_offset(text: &[u8], line: usize, column: usize) -> usize {
    let mut line_start = 0;
    if line > 1 {
        let mut seen = 1;
        for (i, b) in text.iter().enumerate() {
            if *b == b'\n' {
                seen += 1;
                if seen == line {
                    line_start = i + 1;
                    break;
                }
            }
        }
    }
    (line_start + column.saturating_sub(1)).min(text.len())
}

fn hex4(b: &[u8]) -> Option<u16> {
    let s = std::str::from_utf8(b.get(..4)?).ok()?;
    u16::from_str_radix(s, 16).ok()
}

/// Python decodes a lone UTF-16 surrogate escape (`"\ud800"`) to a lone surrogate; Rust
/// strings cannot hold one, so it becomes U+FFFD. The body is copied only when needed.
fn replace_lone_surrogates(body: &[u8]) -> Cow<'_, [u8]> {
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    let mut i = 0;
    while let Some(pos) = body[i..].iter().position(|b| *b == b'\\') {
        let at = i + pos;
        match body.get(at + 1) {
            Some(b'u') => {
                let unit = hex4(&body[at + 2..]);
                let lone = match unit {
                    Some(0xD800..=0xDBFF) => {
                        let next = body.get(at + 6..at + 8) == Some(b"\\u");
                        !(next && matches!(hex4(&body[at + 8..]), Some(0xDC00..=0xDFFF)))
                    }
                    Some(0xDC00..=0xDFFF) => true,
                    _ => false,
                };
                if lone {
                    let buf = out.get_or_insert_with(|| Vec::with_capacity(body.len()));
                    buf.extend_from_slice(&body[copied..at]);
                    buf.extend_from_slice(b"\\ufffd");
                    copied = at + 6;
                    i = at + 6;
                } else if matches!(unit, Some(0xD800..=0xDBFF)) {
                    i = at + 12; // a valid pair: skip both halves
                } else {
                    i = at + 2;
                }
            }
            Some(_) => i = at + 2, // `\\`, `\"`, ...: the escaped byte is not an escape start
            None => break,
        }
        if i >= body.len() {
            break;
        }
    }
    match out {
        Some(mut buf) => {
            buf.extend_from_slice(&body[copied.min(body.len())..]);
            Cow::Owned(buf)
        }
        None => Cow::Borrowed(body),
    }
}

/// Builds a `Value` like serde_json's own visitor, but gives objects room for a typical
/// record's keys up front: growing an ordered map rehashes it each time.
struct ValueSeed;

impl<'de> DeserializeSeed<'de> for ValueSeed {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(ValueSeed)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::with_capacity(8);
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(ValueSeed)?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offset(e: &ValidationError) -> Option<&LocItem> {
        e.loc.first()
    }

    #[test]
    fn bom_and_surrogates() {
        assert_eq!(
            parse_json(b"\xEF\xBB\xBF{\"a\":1}").ok(),
            Some(json!({"a": 1}))
        );
        let v = parse_json(br#"{"t":"x\ud800y","p":"\ud83d\ude00","e":"\\ud800"}"#).ok();
        assert_eq!(
            v,
            Some(json!({"t": "x\u{fffd}y", "p": "😀", "e": "\\ud800"}))
        );
        assert_eq!(
            parse_json(br#"{"t":"\udc00"}"#).ok(),
            Some(json!({"t": "\u{fffd}"}))
        );
        assert!(matches!(
            replace_lone_surrogates(b"{\"a\":\"b\"}"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn malformed_bodies() {
        let e = parse_json(b"   \n").err();
        assert_eq!(e.as_ref().and_then(offset), Some(&LocItem::Index(4)));
        assert_eq!(e.map(|e| e.error_type), Some("json_invalid"));
        let body = br#"{"id": "7f3c2a10-0000-4000-8000-000000000901", "workspace": "#;
        let e = parse_json(body).err();
        assert_eq!(
            e.as_ref().and_then(offset),
            Some(&LocItem::Index(body.len()))
        );
        let e = parse_json(b"{\"a\": x}").err();
        assert_eq!(e.as_ref().and_then(offset), Some(&LocItem::Index(6)));
        assert!(parse_json(b"{} {}").is_err());
    }

    #[test]
    fn nesting() {
        let ok = format!("{}1{}", "[".repeat(MAX_NESTING), "]".repeat(MAX_NESTING));
        assert!(parse_json(ok.as_bytes()).is_ok());
        let deep = format!(
            "{}1{}",
            "[".repeat(MAX_NESTING + 1),
            "]".repeat(MAX_NESTING + 1)
        );
        assert_eq!(
            parse_json(deep.as_bytes()).err().map(|e| e.error_type),
            Some("json_invalid")
        );
        let objects = format!(
            "{}1{}",
            "{\"a\":".repeat(MAX_NESTING),
            "}".repeat(MAX_NESTING)
        );
        let parsed = parse_json(objects.as_bytes());
        assert!(
            parsed
                .as_ref()
                .is_ok_and(|v| serde_json::to_string(v).is_ok())
        );
        let in_string = format!("[\"{}\"]", "[".repeat(MAX_NESTING + 5));
        assert!(parse_json(in_string.as_bytes()).is_ok());
    }
}
