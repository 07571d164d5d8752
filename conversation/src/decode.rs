//! Body bytes → the UTF-8 text serde_json reads, as Python's `json.loads` decodes bytes:
//! UTF-16 and UTF-32 told by their BOM or their zero bytes, a UTF-8 BOM skipped, and the
//! surrogates Python accepts (encoded or escaped) replaced by U+FFFD, which Rust strings
//! can hold.

use std::borrow::Cow;

/// A body that does not decode in the encoding it was told to be in.
#[derive(Debug)]
pub(crate) struct Undecodable(pub &'static str);

/// The body as UTF-8, as `json.loads` reads bytes (`json.detect_encoding`): UTF-32 or
/// UTF-16 by their BOM, UTF-8 past its BOM, else told by which of the first bytes are
/// zero (JSON text starts with ASCII). Wide text is transcoded, a lone surrogate becoming
/// U+FFFD as in `replace_lone_surrogates`; text that does not decode is refused (Python
/// answers 400 there, FastAPI's "error parsing the body"), naming the encoding.
pub(crate) fn decode(body: &[u8]) -> Result<Cow<'_, [u8]>, Undecodable> {
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
    let mut text = String::with_capacity(units.len() / 2);
    match wide {
        Wide::Utf16 => {
            if !units.len().is_multiple_of(2) {
                return Err(Undecodable("UTF-16"));
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
                return Err(Undecodable("UTF-32"));
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
                    _ => return Err(Undecodable("UTF-32")),
                }
            }
        }
    }
    Ok(Cow::Owned(text.into_bytes()))
}

fn hex4(b: &[u8]) -> Option<u16> {
    let s = std::str::from_utf8(b.get(..4)?).ok()?;
    u16::from_str_radix(s, 16).ok()
}

/// Python decodes UTF-8 bodies with `surrogatepass`: a surrogate's three-byte form
/// (`ED A0..BF 80..BF`, which UTF-8 forbids) is read as that surrogate. Rust strings
/// cannot hold one: it becomes U+FFFD, as an escaped one does, in as many bytes.
pub(crate) fn replace_encoded_surrogates(text: &[u8]) -> Cow<'_, [u8]> {
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
pub(crate) fn replace_lone_surrogates(body: &[u8]) -> Cow<'_, [u8]> {
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
