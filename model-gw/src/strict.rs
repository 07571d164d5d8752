//! What the gateway refuses before it reads a body for routing and accounting: a member
//! named twice in any object (the gateway's reader would take the first, the Python
//! upstreams behind it, LiteLLM and vLLM, take the last: a `stream` read as "no stream"
//! here and as a stream there is a stream nobody pays for), and `stream` or
//! `stream_options` of a type OpenAI refuses (a lax upstream reads `"stream": "true"` or
//! `1` as a stream; the gateway would not ask for its usage).

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// A body the gateway refuses, with what it says to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not a JSON object, or nested too deep: the message says which.
    Malformed(String),
    /// A member named twice in one object: its path (`stream`, `messages[0].content`).
    Duplicate(String),
    /// A member of the wrong type, as OpenAI words it: `param` and the message.
    InvalidType { param: String, message: String },
}

impl fmt::Display for Refusal {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed(message) => formatter.write_str(message),
            Self::Duplicate(path) => write!(
                formatter,
                "the request body names the member '{path}' more than once: each member once (readers disagree on which of the two counts)"
            ),
            Self::InvalidType { message, .. } => formatter.write_str(message),
        }
    }
}

/// The path of the first member named twice in one object of `body`, at any depth;
/// `None` when there is none (or the body is not JSON: the caller's parse says so).
///
/// One pass that copies nothing it need not: names are borrowed from the body (unless
/// escaped), and the path is built only for a duplicate found, as the walk returns.
pub fn duplicate_member(body: &[u8]) -> Option<String> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    // Nesting is checked before (`MAX_NESTING`), well within serde_json's own limit.
    let path = Walk.deserialize(&mut deserializer).ok().flatten()?;
    Some(render(path.iter().rev()))
}

/// One step of a path: a member's name or an array's index.
enum Step {
    Member(String),
    Index(usize),
}

fn render<'a>(path: impl Iterator<Item = &'a Step>) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Member(name) if out.is_empty() => out.push_str(name),
            Step::Member(name) => {
                out.push('.');
                out.push_str(name);
            }
            Step::Index(index) => out.push_str(&format!("[{index}]")),
        }
    }
    out
}

/// Members an object has before its names are kept in a set rather than a list: a
/// short list is cheaper than hashing, a long one would make an object of many members
/// cost their square.
const LISTED_AT_MOST: usize = 16;

/// The names one object has named so far.
#[derive(Default)]
struct Named<'de> {
    listed: Vec<Cow<'de, str>>,
    set: Option<HashSet<Cow<'de, str>>>,
}

impl<'de> Named<'de> {
    fn contains(&self, name: &str) -> bool {
        match &self.set {
            Some(set) => set.contains(name),
            None => self.listed.iter().any(|listed| listed == name),
        }
    }

    fn insert(&mut self, name: Cow<'de, str>) {
        match &mut self.set {
            Some(set) => {
                set.insert(name);
            }
            None => {
                self.listed.push(name);
                if self.listed.len() > LISTED_AT_MOST {
                    self.set = Some(self.listed.drain(..).collect());
                }
            }
        }
    }
}

/// A member's name, borrowed from the body unless escapes make it differ.
pub(crate) struct Name;

impl<'de> DeserializeSeed<'de> for Name {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Name {
    type Value = Cow<'de, str>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a member's name")
    }

    fn visit_borrowed_str<E>(self, name: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(name))
    }

    fn visit_str<E>(self, name: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(name.to_owned()))
    }

    fn visit_string<E>(self, name: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(name))
    }
}

/// Walks a JSON value, stopping at the first duplicate member: its path, innermost
/// step first.
struct Walk;

type Found = Option<Vec<Step>>;

impl<'de> DeserializeSeed<'de> for Walk {
    type Value = Found;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk {
    type Value = Found;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut named = Named::default();
        while let Some(name) = map.next_key_seed(Name)? {
            if named.contains(&name) {
                // The rest is read past, not walked: the body is refused.
                map.next_value::<IgnoredAny>()?;
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                return Ok(Some(vec![Step::Member(name.into_owned())]));
            }
            if let Some(mut path) = map.next_value_seed(Walk)? {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                path.push(Step::Member(name.into_owned()));
                return Ok(Some(path));
            }
            named.insert(name);
        }
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut index = 0;
        loop {
            match seq.next_element_seed(Walk)? {
                None => return Ok(None),
                Some(Some(mut path)) => {
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    path.push(Step::Index(index));
                    return Ok(Some(path));
                }
                Some(None) => index += 1,
            }
        }
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// How OpenAI names a JSON value's type in its `invalid_type` errors.
fn type_name(raw: &str) -> &'static str {
    match raw.trim_start().as_bytes().first() {
        Some(b'"') => "a string",
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ if raw.contains(['.', 'e', 'E']) => "a decimal",
        _ => "an integer",
    }
}

fn invalid_type(param: &str, expected: &str, raw: &str) -> Refusal {
    Refusal::InvalidType {
        param: param.to_owned(),
        message: format!(
            "Invalid type for '{param}': expected {expected}, but got {} instead.",
            type_name(raw)
        ),
    }
}

/// A boolean member, strictly: absent or `null` is `false` (as OpenAI reads an unset
/// optional parameter), `true` and `false` are themselves, anything else is refused.
pub fn boolean(param: &str, raw: Option<&RawValue>) -> Result<bool, Refusal> {
    match raw.map(|raw| raw.get().trim()) {
        None | Some("null" | "false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(invalid_type(param, "a boolean", other)),
    }
}

/// `stream_options`, strictly: absent or `null`, or an object whose `include_usage` is
/// absent, `null` or a boolean. Its `include_usage`.
pub fn stream_options(raw: Option<&RawValue>) -> Result<bool, Refusal> {
    let Some(raw) = raw.map(|raw| raw.get().trim()).filter(|raw| *raw != "null") else {
        return Ok(false);
    };
    if !raw.starts_with('{') {
        return Err(invalid_type("stream_options", "an object", raw));
    }
    let options: std::collections::BTreeMap<String, &RawValue> = serde_json::from_str(raw)
        .map_err(|err| Refusal::Malformed(format!("`stream_options` cannot be read: {err}")))?;
    boolean(
        "stream_options.include_usage",
        options.get("include_usage").copied(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap_or_else(|err| panic!("{err}"))
    }

    #[test]
    fn duplicates_are_found_at_any_depth_and_named_by_their_path() {
        assert_eq!(duplicate_member(br#"{"a":1,"b":[1,{"c":2}]}"#), None);
        assert_eq!(
            duplicate_member(br#"{"stream":false,"model":"m","stream":true}"#),
            Some("stream".to_owned())
        );
        assert_eq!(
            duplicate_member(br#"{"stream_options":{"include_usage":true,"include_usage":false}}"#),
            Some("stream_options.include_usage".to_owned())
        );
        assert_eq!(
            duplicate_member(br#"{"messages":[{"role":"user"},{"role":"a","role":"b"}]}"#),
            Some("messages[1].role".to_owned())
        );
        // The same name in two objects is no duplicate.
        assert_eq!(
            duplicate_member(br#"{"x":{"role":1},"y":{"role":2},"role":3}"#),
            None
        );
        // Escapes name the same member: `"\u0073tream"` is `stream`.
        assert_eq!(
            duplicate_member(br#"{"stream":false,"\u0073tream":true}"#),
            Some("stream".to_owned())
        );
        assert_eq!(duplicate_member(b"not json"), None);
    }

    /// Among many members (judged by a set past the first few, so that a body built to
    /// be slow costs what its size does, not its square), a duplicate is found.
    #[test]
    fn a_duplicate_is_found_among_many_members() {
        let members = |count: usize| -> Vec<String> {
            (0..count)
                .map(|index| format!("\"m{index}\":{index}"))
                .collect()
        };
        let object = format!("{{\"a\":{{{}}}}}", members(50_000).join(","));
        assert_eq!(duplicate_member(object.as_bytes()), None);
        let mut named_twice = members(50_000);
        named_twice.push("\"m17\":0".to_owned());
        let object = format!("{{\"a\":[{{{}}}]}}", named_twice.join(","));
        assert_eq!(
            duplicate_member(object.as_bytes()),
            Some("a[0].m17".to_owned())
        );
        // Past the list, and within it.
        let object = r#"{"x":[0,{"a":1,"b":2,"a":3}]}"#;
        assert_eq!(
            duplicate_member(object.as_bytes()),
            Some("x[1].a".to_owned())
        );
    }

    #[test]
    fn stream_is_a_boolean_as_openai_says() {
        assert_eq!(boolean("stream", None), Ok(false));
        assert_eq!(boolean("stream", Some(&*raw("null"))), Ok(false));
        assert_eq!(boolean("stream", Some(&*raw("true"))), Ok(true));
        for (text, kind) in [
            ("1", "an integer"),
            ("\"true\"", "a string"),
            ("1.5", "a decimal"),
            ("{}", "an object"),
            ("[true]", "an array"),
        ] {
            assert_eq!(
                boolean("stream", Some(&*raw(text))),
                Err(Refusal::InvalidType {
                    param: "stream".to_owned(),
                    message: format!(
                        "Invalid type for 'stream': expected a boolean, but got {kind} instead."
                    ),
                }),
                "{text}"
            );
        }
    }

    #[test]
    fn stream_options_is_an_object_with_a_boolean_include_usage() {
        assert_eq!(stream_options(None), Ok(false));
        assert_eq!(stream_options(Some(&*raw("null"))), Ok(false));
        assert_eq!(
            stream_options(Some(&*raw(r#"{"include_usage":true,"x":1}"#))),
            Ok(true)
        );
        assert!(matches!(
            stream_options(Some(&*raw("\"x\""))),
            Err(Refusal::InvalidType { param, .. }) if param == "stream_options"
        ));
        assert!(matches!(
            stream_options(Some(&*raw(r#"{"include_usage":"yes"}"#))),
            Err(Refusal::InvalidType { param, .. }) if param == "stream_options.include_usage"
        ));
    }
}
