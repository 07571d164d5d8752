//! HTTP body bytes → JSON value, accepting what Python's `json.loads` accepts.

use std::borrow::Cow;
use std::cell::Cell;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Value, json};

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
    match decode(body)? {
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

/// The body as UTF-8, as `json.loads` reads bytes (`json.detect_encoding`): UTF-32 or
/// UTF-16 by their BOM, UTF-8 past its BOM, else told by which of the first bytes are
/// zero (JSON text starts with ASCII). Wide text is transcoded, a lone surrogate becoming
/// U+FFFD as in `replace_lone_surrogates`; text that does not decode is refused (Python
/// answers 400 there, FastAPI's "error parsing the body").
#[expect(
    clippy::result_large_err,
    reason = "the public API returns pydantic's error item"
)]
fn decode(body: &[u8]) -> Result<Cow<'_, [u8]>, ValidationError> {
    #[derive(Clone, Copy)]
    enum Wide {
        Utf16,
        Utf32,
    }
    let (wide, big, skip) = match body {
        [0, 0, 0xFE, 0xFF, ..] => (Wide::Utf32, true, 4),
        [0xFF, 0xFE, 0, 0, ..] => (Wide::Utf32, false, 4),
        [0xFE, 0xFF, ..] => (Wide::Utf16, true, 2),
        [0xFF, 0xFE, ..] => (Wide::Utf16, false, 2),
        [0xEF, 0xBB, 0xBF, rest @ ..] => return Ok(Cow::Borrowed(rest)),
        [0, 0, _, _, ..] => (Wide::Utf32, true, 0),
        [0, _, _, _, ..] | [0, _] => (Wide::Utf16, true, 0),
        [_, 0, 0, 0, ..] => (Wide::Utf32, false, 0),
        [_, 0, _, _, ..] | [_, 0] => (Wide::Utf16, false, 0),
        _ => return Ok(Cow::Borrowed(body)),
    };
    let units = &body[skip..];
    let undecodable = |name: &str| json_invalid(0, &format!("the body does not decode as {name}"));
    let mut text = String::with_capacity(units.len() / 2);
    match wide {
        Wide::Utf16 => {
            if !units.len().is_multiple_of(2) {
                return Err(undecodable("UTF-16"));
            }
            let units = units.chunks_exact(2).map(|u| {
                let pair = [u[0], u[1]];
                if big {
                    u16::from_be_bytes(pair)
                } else {
                    u16::from_le_bytes(pair)
                }
            });
            text.extend(
                char::decode_utf16(units).map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER)),
            );
        }
        Wide::Utf32 => {
            if !units.len().is_multiple_of(4) {
                return Err(undecodable("UTF-32"));
            }
            for u in units.chunks_exact(4) {
                let quad = [u[0], u[1], u[2], u[3]];
                let code = if big {
                    u32::from_be_bytes(quad)
                } else {
                    u32::from_le_bytes(quad)
                };
                match (code, char::from_u32(code)) {
                    (_, Some(c)) => text.push(c),
                    (0xD800..=0xDFFF, None) => text.push(char::REPLACEMENT_CHARACTER),
                    _ => return Err(undecodable("UTF-32")),
                }
            }
        }
    }
    Ok(Cow::Owned(text.into_bytes()))
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

fn hex4(b: &[u8]) -> Option<u16> {
    let s = std::str::from_utf8(b.get(..4)?).ok()?;
    u16::from_str_radix(s, 16).ok()
}

/// Python decodes UTF-8 bodies with `surrogatepass`: a surrogate's three-byte form
/// (`ED A0..BF 80..BF`, which UTF-8 forbids) is read as that surrogate. Rust strings
/// cannot hold one: it becomes U+FFFD, as an escaped one does, in as many bytes.
fn replace_encoded_surrogates(text: &[u8]) -> Cow<'_, [u8]> {
    let surrogate = |at: usize| {
        text.get(at + 1).is_some_and(|b| (0xA0..=0xBF).contains(b))
            && text.get(at + 2).is_some_and(|b| (0x80..=0xBF).contains(b))
    };
    let mut found = memchr::memchr_iter(0xED, text)
        .filter(|at| surrogate(*at))
        .peekable();
    if found.peek().is_none() {
        return Cow::Borrowed(text);
    }
    let mut out = text.to_vec();
    for at in found {
        out[at..at + 3].copy_from_slice("\u{FFFD}".as_bytes());
    }
    Cow::Owned(out)
}

/// Python decodes a lone UTF-16 surrogate escape (`"\ud800"`) to a lone surrogate; Rust
/// strings cannot hold one, so it becomes U+FFFD. The body is copied only when needed.
fn replace_lone_surrogates(body: &[u8]) -> Cow<'_, [u8]> {
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    let mut i = 0;
    while let Some(pos) = memchr::memchr(b'\\', &body[i..]) {
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
