//! HTTP body bytes → JSON value, accepting what Python's `json.loads` accepts.

use std::borrow::Cow;
use std::cell::Cell;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Value, json};

use super::decode::{Undecodable, decode, replace_encoded_surrogates, replace_lone_surrogates};
use super::errors::{LocItem, ValidationError};
use super::pyjson::{self, Scan};

/// Python's json module gives up near its recursion limit (1000); deeper bodies are
/// refused up front so that parsing, dropping and serialising stay far from the stack's end.
pub(crate) const MAX_NESTING: usize = 512;

#[expect(
    clippy::result_large_err,
    reason = "the public API returns pydantic's error item"
)]
pub(crate) fn parse_json(body: &[u8]) -> Result<Value, ValidationError> {
    let text = prepare(body)?;
    let wide = Cell::new(false);
    let first = parse(&text, &wide);
    if first.is_ok() && !wide.get() {
        return first;
    }
    // NaN, Infinity or an integer past 64 bits: Python reads them, JSON has no such number.
    if let Some(rewritten) = with_specials(&text) {
        let again = parse(&rewritten, &Cell::new(false));
        if again.is_ok() {
            return again;
        }
    }
    // serde_json places many faults elsewhere than Python's json does; Python's answer
    // is the reference's.
    first.map_err(|serde_fault| match pyjson::scan(&text, MAX_NESTING) {
        Scan::Fault(at, reason) => json_invalid(char_offset(&text, at), reason),
        Scan::Valid | Scan::TooDeep => serde_fault,
    })
}

#[expect(
    clippy::result_large_err,
    reason = "the public API returns pydantic's error item"
)]
fn parse(text: &[u8], wide: &Cell<bool>) -> Result<Value, ValidationError> {
    let mut de = serde_json::Deserializer::from_slice(text);
    // Depth is bounded by `prepare` above; serde_json's own limit (128) is shallower
    // than what the reference accepts.
    de.disable_recursion_limit();
    let value = ValueSeed(wide)
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v));
    value.map_err(|e| {
        let offset = if e.is_eof() {
            text.len()
        } else {
            byte_offset(text, e.line(), e.column())
        };
        json_invalid(char_offset(text, offset), &reason(&e))
    })
}

/// How a number that Python's json reads and JSON has not is carried in a `Value`: a string
/// of this prefix and the literal (`NaN`, `Infinity`, `-Infinity`, or an integer past 64
/// bits), read back as a number by `scalars::Scalar` and written as `model_dump(mode=
/// "json")` writes it in the record (`special_to_json`).
pub(crate) const SPECIAL: &str = "\u{0}\u{10FFFF}";
const SPECIAL_ESCAPED: &[u8] = br#""\u0000\udbff\udfff"#;

/// `text` with every NaN, Infinity, -Infinity and integer literal past 64 bits outside
/// strings written as a [`SPECIAL`] string; `None` when there is none, or when a string of
/// the body could itself spell the prefix (then the body is refused as JSON is).
fn with_specials(text: &[u8]) -> Option<Vec<u8>> {
    if text.windows(6).any(|w| w.eq_ignore_ascii_case(b"\\udbff"))
        || text.windows(4).any(|w| w == "\u{10FFFF}".as_bytes())
    {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() + 64);
    let mut found = false;
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        if b == b'"' {
            let end = string_end(text, i);
            out.extend_from_slice(&text[i..end]);
            i = end;
            continue;
        }
        let token = match b {
            b'N' if text[i..].starts_with(b"NaN") => 3,
            b'I' if text[i..].starts_with(b"Infinity") => 8,
            b'-' if text[i..].starts_with(b"-Infinity") => 9,
            b'-' | b'0'..=b'9' => {
                let len = text[i..]
                    .iter()
                    .position(|c| !matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                    .unwrap_or(text.len() - i);
                let literal = &text[i..i + len];
                let integer = !literal.iter().any(|c| matches!(c, b'.' | b'e' | b'E'));
                let fits = std::str::from_utf8(literal)
                    .ok()
                    .is_some_and(|t| t.parse::<i64>().is_ok() || t.parse::<u64>().is_ok());
                if integer && !fits && literal.len() > 1 {
                    len
                } else {
                    out.extend_from_slice(literal);
                    i += len;
                    continue;
                }
            }
            _ => 0,
        };
        if token == 0 {
            out.push(b);
            i += 1;
            continue;
        }
        found = true;
        out.extend_from_slice(SPECIAL_ESCAPED);
        out.extend_from_slice(&text[i..i + token]);
        out.push(b'"');
        i += token;
    }
    found.then_some(out)
}

/// The index just past the string that starts at `start` (its opening quote).
fn string_end(text: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < text.len() {
        match text[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    text.len()
}

/// A [`SPECIAL`] string's number: its value, and whether it is an integer literal.
pub(crate) fn special(s: &str) -> Option<(f64, bool)> {
    let literal = s.strip_prefix(SPECIAL)?;
    match literal {
        "NaN" => Some((f64::NAN, false)),
        "Infinity" => Some((f64::INFINITY, false)),
        "-Infinity" => Some((f64::NEG_INFINITY, false)),
        digits => digits.parse::<f64>().ok().map(|v| (v, true)),
    }
}

/// What `model_dump(mode="json")` writes for a special number: null for NaN and the
/// infinities (pydantic's `ser_json_inf_nan`), the integer (as near as JSON numbers here
/// hold it) otherwise. Every special string of `v` is replaced.
pub(crate) fn special_to_json(v: &mut Value) {
    match v {
        Value::String(s) => {
            if let Some((n, integer)) = special(s) {
                *v = if integer {
                    serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number)
                } else {
                    Value::Null
                };
            }
        }
        Value::Array(items) => items.iter_mut().for_each(special_to_json),
        Value::Object(map) => map.values_mut().for_each(special_to_json),
        _ => {}
    }
}

/// The text serde_json parses: the body decoded as Python's `json.loads` decodes bytes,
/// checked for emptiness and depth, with lone surrogate escapes replaced. Shared with the
/// fast path so both parse the same text.
#[expect(
    clippy::result_large_err,
    reason = "the public API returns pydantic's error item"
)]
pub(crate) fn prepare(body: &[u8]) -> Result<Cow<'_, [u8]>, ValidationError> {
    fn check(text: &[u8]) -> Result<(), ValidationError> {
        if text.iter().all(u8::is_ascii_whitespace) {
            return Err(json_invalid(
                char_offset(text, text.len()),
                "Expecting value",
            ));
        }
        if let Some(offset) = sandgate_proto::json::nesting_exceeds(text, MAX_NESTING) {
            // A fault Python meets on its way down is reported first.
            return Err(match pyjson::scan(text, MAX_NESTING) {
                Scan::Fault(at, reason) if at < offset => {
                    json_invalid(char_offset(text, at), reason)
                }
                _ => json_invalid(char_offset(text, offset), "Nesting too deep"),
            });
        }
        Ok(())
    }
    let decoded = decode(body).map_err(|Undecodable(name)| {
        json_invalid(0, &format!("the body does not decode as {name}"))
    })?;
    match decoded {
        Cow::Borrowed(text) => {
            check(text)?;
            Ok(match replace_encoded_surrogates(text) {
                Cow::Borrowed(text) => replace_lone_surrogates(text),
                Cow::Owned(text) => Cow::Owned(replace_lone_surrogates(&text).into_owned()),
            })
        }
        Cow::Owned(text) => {
            check(&text)?;
            Ok(Cow::Owned(replace_lone_surrogates(&text).into_owned()))
        }
    }
}

/// Python reports a JSON fault's position in characters of the decoded text.
fn char_offset(text: &[u8], byte_offset: usize) -> usize {
    text[..byte_offset.min(text.len())]
        .iter()
        .filter(|b| (**b & 0xC0) != 0x80)
        .count()
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

/// Builds a `Value` like serde_json's own visitor, but gives objects room for a typical
/// record's keys up front (growing an ordered map rehashes it each time), and notes an
/// integral float past i64: an integer literal past 64 bits arrives as one.
struct ValueSeed<'a>(&'a Cell<bool>);

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor(self.0))
    }
}

struct ValueVisitor<'a>(&'a Cell<bool>);

impl<'de> Visitor<'de> for ValueVisitor<'_> {
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
        // Not `scalars::in_i64`: -2^63 fits an i64, but an integer literal that rounds to
        // it as a float (…809) does not, and only such literals arrive here as floats.
        if v.fract() == 0.0 && v.abs() >= 9_223_372_036_854_775_808.0 {
            self.0.set(true);
        }
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
        while let Some(item) = seq.next_element_seed(ValueSeed(self.0))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::with_capacity(8);
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(ValueSeed(self.0))?;
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

    /// A surrogate encoded in UTF-8 bytes, which Python's `surrogatepass` reads, is
    /// U+FFFD, as an escaped lone one is.
    #[test]
    fn encoded_surrogates_read_as_replacement_characters() {
        let value = parse_json(b"{\"a\": \"x\xed\xa0\x80y\xed\xbf\xbf\"}").ok();
        assert_eq!(value, Some(json!({"a": "x\u{FFFD}y\u{FFFD}"})));
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
