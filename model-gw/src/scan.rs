//! An upstream answer's top-level members, found by the answer's structure alone: its
//! strings (escapes included), its nesting and its separators, not the grammar of every
//! value. A stream event is read for a few members (`model`, `usage`, `choices`, a nested
//! `response` or `message`), each parsed when it is read; the rest of it passes on as
//! the upstream's bytes. Finding their bounds with serde_json validated every string and
//! number of every event: the scan takes 4.6 % off a streamed call's instructions
//! (BENCHMARKS.md, `gateway_nginx`).
//!
//! What is not one object (`[DONE]`, a line cut short, a member without its value, text
//! after the object) is refused, as serde_json refuses it. What it lets through that
//! serde_json would not (a misspelt literal, a number with a leading zero, a control
//! character in a string) is text the gateway never reads: the members it reads are
//! parsed by serde_json.

use std::borrow::Cow;

/// An object's top-level members: names (unescaped), values as their raw text in it.
pub(crate) struct Members<'a>(Vec<(Cow<'a, str>, &'a [u8])>);

impl<'a> Members<'a> {
    /// `data`'s members, when it is one JSON object (whitespace around it).
    pub(crate) fn of(data: &'a [u8]) -> Option<Self> {
        let mut at = after_space(data, 0);
        if data.get(at) != Some(&b'{') {
            return None;
        }
        at = after_space(data, at + 1);
        let mut members = Vec::new();
        if data.get(at) == Some(&b'}') {
            at += 1;
        } else {
            loop {
                if data.get(at) != Some(&b'"') {
                    return None;
                }
                let name_end = string_end(data, at)?;
                let name = name(&data[at..name_end])?;
                at = after_space(data, name_end);
                if data.get(at) != Some(&b':') {
                    return None;
                }
                at = after_space(data, at + 1);
                let end = value_end(data, at)?;
                members.push((name, &data[at..end]));
                at = after_space(data, end);
                match data.get(at) {
                    Some(b',') => at = after_space(data, at + 1),
                    Some(b'}') => {
                        at += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        (after_space(data, at) == data.len()).then_some(Self(members))
    }

    /// The first member named `key`: its value's raw text.
    pub(crate) fn get(&self, key: &str) -> Option<&'a [u8]> {
        self.0
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| *value)
    }

    /// Every member named `key`, in order.
    pub(crate) fn all(&self, key: &str) -> impl Iterator<Item = &'a [u8]> {
        self.0
            .iter()
            .filter(move |(name, _)| name == key)
            .map(|(_, value)| *value)
    }
}

/// A member's name from its quoted text: borrowed unless it has escapes.
fn name(quoted: &[u8]) -> Option<Cow<'_, str>> {
    let inner = &quoted[1..quoted.len() - 1];
    if inner.contains(&b'\\') {
        return serde_json::from_slice::<String>(quoted)
            .ok()
            .map(Cow::Owned);
    }
    std::str::from_utf8(inner).ok().map(Cow::Borrowed)
}

fn after_space(data: &[u8], mut at: usize) -> usize {
    while data
        .get(at)
        .is_some_and(|byte| matches!(byte, b' ' | b'\t' | b'\n' | b'\r'))
    {
        at += 1;
    }
    at
}

/// Where the value starting at `start` ends (the index after it); `None` when it does
/// not (a string or an object cut short) or there is none.
fn value_end(data: &[u8], start: usize) -> Option<usize> {
    match data.get(start)? {
        b'"' => string_end(data, start),
        b'{' | b'[' => {
            // Depth, not a stack: a bracket that closes the wrong kind is not told apart.
            let mut depth = 0_usize;
            let mut at = start;
            loop {
                match data.get(at)? {
                    b'"' => {
                        at = string_end(data, at)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(at + 1);
                        }
                    }
                    _ => {}
                }
                at += 1;
            }
        }
        b'}' | b']' | b',' | b':' => None,
        _ => {
            let length = data[start..]
                .iter()
                .position(|byte| {
                    matches!(
                        byte,
                        b',' | b'}' | b']' | b':' | b'"' | b' ' | b'\t' | b'\n' | b'\r'
                    )
                })
                .unwrap_or(data.len() - start);
            Some(start + length)
        }
    }
}

/// The index after the string starting (with its quote) at `start`.
fn string_end(data: &[u8], start: usize) -> Option<usize> {
    let mut at = start + 1;
    loop {
        match data.get(at)? {
            b'"' => return Some(at + 1),
            b'\\' => at += 2,
            _ => at += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::value::RawValue;

    use super::*;

    /// serde_json's reading of `data`'s members, to compare with, in name order.
    fn by_serde(data: &str) -> Option<Vec<(String, String)>> {
        let members: std::collections::BTreeMap<String, Box<RawValue>> =
            serde_json::from_str(data).ok()?;
        Some(
            members
                .into_iter()
                .map(|(name, value)| (name, value.get().to_owned()))
                .collect(),
        )
    }

    fn scanned(data: &str) -> Option<Vec<(String, String)>> {
        let mut members: Vec<(String, String)> = Members::of(data.as_bytes())?
            .0
            .into_iter()
            .map(|(name, value)| {
                let value = String::from_utf8(value.to_vec()).expect("UTF-8");
                (name.into_owned(), value)
            })
            .collect();
        members.sort();
        Some(members)
    }

    #[test]
    fn an_object_is_read_as_serde_json_reads_it() {
        for data in [
            r#"{}"#,
            r#" { } "#,
            r#"{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"a"}}]}"#,
            "{\n  \"model\" : \"m\" ,\n  \"usage\":{\"prompt_tokens\":1}\t}\n",
            r#"{"a":"x\"y}]","b":[1,[2,{"c":"]"}]],"c":-1.5e3,"d":true,"e":null}"#,
            r#"{"mo\u0064el":"m","\\":"\\\\","é":"😀"}"#,
            r#"{"model":{"nested":"{"},"response":{"model":"r","usage":{}}}"#,
        ] {
            assert_eq!(scanned(data), Some(by_serde(data).expect(data)), "{data}");
        }
    }

    #[test]
    fn what_is_not_one_object_is_refused() {
        for data in [
            "",
            "[DONE]",
            "not json",
            "[1]",
            r#""model""#,
            r#"{"model":"m""#,
            r#"{"model":"m}"#,
            r#"{"model" "m"}"#,
            r#"{"model":}"#,
            r#"{"model":"m",}"#,
            r#"{,}"#,
            r#"{model:"m"}"#,
            r#"{"a":[1,2}"#,
            r#"{"a":{"b":1}"#,
            r#"{"a":1} x"#,
            r#"{"a":1}{"b":2}"#,
            r#"{"a":"\"#,
            r#"{"a":1 2}"#,
        ] {
            assert!(scanned(data).is_none(), "{data}");
        }
    }

    #[test]
    fn duplicates_are_all_kept_in_order_and_the_first_is_got() {
        let members = Members::of(br#"{"model":"a","x":1,"model":"b"}"#).expect("an object");
        assert_eq!(members.get("model"), Some(&b"\"a\""[..]));
        assert_eq!(
            members.all("model").collect::<Vec<_>>(),
            [&b"\"a\""[..], &b"\"b\""[..]]
        );
    }
}
