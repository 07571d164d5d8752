//! The only edits the gateway makes to bodies: `model` (and the request's `user`), at the
//! top level of a JSON object. Every other member travels as the exact text it arrived
//! as; a body that needs no edit is not touched at all.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::scan;
use crate::strict::{self, Refusal};
pub use crate::usage::Usage;

/// A JSON object's top-level members, values kept as their raw text; names borrowed
/// from it unless escapes make them differ (no allocation per member of every event of
/// a stream).
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;
            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::new();
                while let Some(name) = map.next_key_seed(strict::Name)? {
                    members.push((name, map.next_value::<&'de RawValue>()?));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

impl Members<'_> {
    fn get(&self, key: &str) -> Option<&RawValue> {
        self.0
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| *value)
    }
}

/// Where `value`, a member's raw text borrowed from `data`, lies in it.
fn range_in(data: &[u8], value: &[u8]) -> Option<std::ops::Range<usize>> {
    let start = (value.as_ptr() as usize).checked_sub(data.as_ptr() as usize)?;
    let end = start.checked_add(value.len())?;
    (end <= data.len()).then_some(start..end)
}

fn drop_result<T, E>(_: Result<T, E>) {}

/// The members an answer nests its model and usage in: a Responses API event's
/// `response`, an Anthropic `message_start` event's `message`.
const NESTED: [&str; 2] = ["response", "message"];

/// The answer's `usage`, at the top or in a [`NESTED`] object.
fn usage_of(members: &scan::Members<'_>) -> Option<Usage> {
    let top = |members: &scan::Members<'_>| {
        members
            .get("usage")
            .and_then(|raw| serde_json::from_slice::<Option<Usage>>(raw).ok())
            .flatten()
    };
    top(members).or_else(|| {
        NESTED
            .iter()
            .find_map(|name| top(&scan::Members::of(members.get(name)?)?))
    })
}

/// How deep a request body may nest: Python's `json` (the reference gateway's) gives up
/// near 1000 levels; a real request (messages, content parts, tool schemas) stays within
/// a few dozen.
pub(crate) const MAX_NESTING: usize = 512;

/// One piece of a rewritten request body: a range of the client's bytes, or new text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Original(std::ops::Range<usize>),
    New(Vec<u8>),
}

/// A request body of any of the gateway's APIs, read for what routing, the spend log and
/// the gateway's edits need: `model`, `user`, and whether it asks for a stream (with its
/// usage).
pub struct ChatRequest<'a> {
    body: &'a [u8],
    members: Members<'a>,
    pub model: String,
    pub user: Option<String>,
    /// `"stream": true`.
    pub stream: bool,
    /// `"stream_options": {"include_usage": true}`.
    pub stream_usage: bool,
    /// The smallest of `max_tokens`, `max_completion_tokens` and `max_output_tokens`
    /// the body names.
    pub max_output: Option<u64>,
}

impl<'a> ChatRequest<'a> {
    /// The raw text of the member `name`, as the client sent it.
    pub fn member(&self, name: &str) -> Option<&str> {
        self.members.get(name).map(RawValue::get)
    }

    /// Reads the body; the error says, for the client, what is wrong with it. A member
    /// named twice anywhere, a `stream` that is not a boolean, a `stream_options` that is
    /// not an object (or its `include_usage` not a boolean) are refused (see `strict`).
    pub fn parse(body: &'a [u8]) -> Result<Self, Refusal> {
        // The members are kept raw and sent on as they came, so nothing here would stop a
        // body nested thousands of levels deep from reaching the upstream, or the spend
        // log's readers: refused first, as the webhook refuses it.
        if sandgate_proto::json::nesting_exceeds(body, MAX_NESTING).is_some() {
            return Err(Refusal::Malformed(format!(
                "the request body is nested more than {MAX_NESTING} levels deep"
            )));
        }
        let members: Members<'a> = serde_json::from_slice(body).map_err(|err| {
            Refusal::Malformed(format!("the request body is not a JSON object: {err}"))
        })?;
        if let Some(path) = strict::duplicate_member(body) {
            return Err(Refusal::Duplicate(path));
        }
        let model = match members.get("model") {
            Some(raw) => serde_json::from_str::<String>(raw.get())
                .map_err(|_| Refusal::Malformed("`model` must be a string".to_owned()))?,
            None => return Err(Refusal::Malformed("`model` is required".to_owned())),
        };
        let user = members
            .get("user")
            .and_then(|raw| serde_json::from_str::<Option<String>>(raw.get()).ok())
            .flatten();
        let stream = strict::boolean("stream", members.get("stream"))?;
        let stream_usage = strict::stream_options(members.get("stream_options"))?;
        // The most output tokens the call may make, by whichever name its API gives it:
        // the bound of the estimate charged when an answer reports no usage.
        let max_output = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
            .iter()
            .filter_map(|name| serde_json::from_str::<u64>(members.get(name)?.get()).ok())
            .min();
        Ok(Self {
            body,
            members,
            model,
            user,
            stream,
            stream_usage,
            max_output,
        })
    }

    /// A top-level member's value, as its JSON text.
    pub fn raw(&self, key: &str) -> Option<&str> {
        self.members.get(key).map(RawValue::get)
    }

    /// Where a member's value lies in the body.
    fn span(&self, value: &RawValue) -> std::ops::Range<usize> {
        range_in(self.body, value.get().as_bytes()).unwrap_or_default()
    }

    /// The body to send upstream, as pieces of the client's body and new text: `model`
    /// replaced, `user` removed, and `set` (a member name and its JSON text) set or
    /// added. Nothing else is copied: a 30 MB image travels as the client's own bytes.
    pub fn upstream_pieces(&self, upstream_model: &str, set: Option<(&str, &str)>) -> Vec<Piece> {
        let mut pieces: Vec<Piece> = Vec::with_capacity(8);
        let mut push = |piece: Piece| match (pieces.last_mut(), piece) {
            (Some(Piece::Original(last)), Piece::Original(next)) if last.end == next.start => {
                last.end = next.end;
            }
            (Some(Piece::New(last)), Piece::New(next)) => last.extend_from_slice(&next),
            (_, piece) => pieces.push(piece),
        };
        let model = serde_json::to_vec(upstream_model).unwrap_or_default();
        let open = self.body.iter().position(|byte| *byte == b'{').unwrap_or(0);
        push(Piece::Original(0..open + 1));
        // The end of the member last written, when it is the one before in the body: the
        // text between the two (a comma, spaces) is then the client's too.
        let mut previous_end: Option<usize> = None;
        let mut written = false;
        let mut region_start = open + 1;
        let mut set_done = false;
        for (name, value) in &self.members.0 {
            let span = self.span(value);
            let region = region_start..span.end;
            region_start = span.end;
            if name == "user" {
                previous_end = None;
                continue;
            }
            // The member's own text: its key, the colon and the value, without the comma
            // and spaces before it.
            let key_start = region.start
                + self.body[region.clone()]
                    .iter()
                    .position(|byte| !matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | b','))
                    .unwrap_or(0);
            match previous_end {
                Some(end) => push(Piece::Original(end..key_start)),
                None if written => push(Piece::New(b",".to_vec())),
                None => {}
            }
            let replacement = match (name.as_ref(), set) {
                ("model", _) => Some(model.clone()),
                (member, Some((set_name, text))) if member == set_name => {
                    set_done = true;
                    Some(text.as_bytes().to_vec())
                }
                _ => None,
            };
            match replacement {
                Some(text) => {
                    push(Piece::Original(key_start..span.start));
                    push(Piece::New(text));
                }
                None => push(Piece::Original(key_start..span.end)),
            }
            previous_end = Some(span.end);
            written = true;
        }
        match set.filter(|_| !set_done) {
            Some((name, text)) => {
                let mut tail = Vec::with_capacity(name.len() + text.len() + 5);
                if written {
                    tail.push(b',');
                }
                drop_result(serde_json::to_writer(&mut tail, name));
                tail.push(b':');
                tail.extend_from_slice(text.as_bytes());
                tail.push(b'}');
                push(Piece::New(tail));
            }
            None => match previous_end {
                // The closing brace and whatever follows it, as the client sent them.
                Some(end) => push(Piece::Original(end..self.body.len())),
                None => push(Piece::New(b"}".to_vec())),
            },
        }
        pieces
    }

    /// The body to send upstream, whole: `model` replaced, `user` removed.
    pub fn upstream_body(&self, upstream_model: &str) -> Vec<u8> {
        self.joined(&self.upstream_pieces(upstream_model, None))
    }

    /// `pieces` as one buffer.
    pub fn joined(&self, pieces: &[Piece]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.body.len() + 64);
        for piece in pieces {
            match piece {
                Piece::Original(range) => out.extend_from_slice(&self.body[range.clone()]),
                Piece::New(text) => out.extend_from_slice(text),
            }
        }
        out
    }
}

/// A whole (non-streamed) response body with `model` set to `model`, and its usage.
/// `model` is the top-level member, or, when there is none, the one of a nested
/// `response` or `message` object (the Responses and Anthropic APIs' stream events).
/// A body that is not a JSON object, or already names `model`, is returned as it is.
pub fn rename_model<'a>(body: &'a [u8], model: &str) -> (Cow<'a, [u8]>, Option<Usage>) {
    let (renamed, usage) = stream_event(body, model, false);
    (renamed.unwrap_or(Cow::Borrowed(body)), usage)
}

/// A stream event's data, parsed once: the data to pass on, `model` renamed as
/// [`rename_model`] renames it, and its usage; with `hide_usage`, no data for an event
/// that carries usage and nothing else a client reads (no choices: the usage chunk the
/// gateway asked for on the client's behalf).
pub(crate) fn stream_event<'a>(
    data: &'a [u8],
    model: &str,
    hide_usage: bool,
) -> (Option<Cow<'a, [u8]>>, Option<Usage>) {
    let Some(members) = scan::Members::of(data) else {
        return (Some(Cow::Borrowed(data)), None);
    };
    let usage = usage_of(&members);
    if hide_usage && usage.is_some() && no_choices(&members) {
        return (None, usage);
    }
    let renamed = renamed(data, &members, model).map_or(Cow::Borrowed(data), Cow::Owned);
    (Some(renamed), usage)
}

/// The usage a whole answer reports, read as [`rename_model`] reads it, without renaming.
pub(crate) fn usage(body: &[u8]) -> Option<Usage> {
    usage_of(&scan::Members::of(body)?)
}

/// `data` (whose top-level members are `members`) with `model` renamed, when it must be:
/// every value of a member named `model` replaced by `model`'s JSON text in place, the
/// rest of the text as it came.
fn renamed(data: &[u8], members: &scan::Members<'_>, model: &str) -> Option<Vec<u8>> {
    let Some(current) = members.get("model") else {
        return NESTED
            .iter()
            .find_map(|name| renamed(data, &scan::Members::of(members.get(name)?)?, model));
    };
    let current = serde_json::from_slice::<Cow<'_, str>>(current).ok()?;
    if current == model {
        return None;
    }
    let text = serde_json::to_vec(model).ok()?;
    let mut out = Vec::with_capacity(data.len() + text.len());
    let mut copied = 0;
    for value in members.all("model") {
        let range = range_in(data, value)?;
        out.extend_from_slice(data.get(copied..range.start)?);
        out.extend_from_slice(&text);
        copied = range.end;
    }
    out.extend_from_slice(data.get(copied..)?);
    Some(out)
}

/// Whether a chunk's `choices` is an empty list.
fn no_choices(members: &scan::Members<'_>) -> bool {
    members.get("choices").is_some_and(|choices| {
        choices.starts_with(b"[")
            && serde_json::from_slice::<Vec<serde::de::IgnoredAny>>(choices)
                .is_ok_and(|choices| choices.is_empty())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_gets_the_upstream_model_and_loses_user() {
        let body = br#"{"model":"claude","messages":[{"role":"user","content":"hi  there"}],"user":"alice","temperature":0.10}"#;
        let request = ChatRequest::parse(body).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(request.model, "claude");
        assert_eq!(request.user.as_deref(), Some("alice"));
        assert_eq!(
            String::from_utf8_lossy(&request.upstream_body("up/claude")),
            r#"{"model":"up/claude","messages":[{"role":"user","content":"hi  there"}],"temperature":0.10}"#
        );
    }

    #[test]
    fn bad_requests_say_why() {
        assert!(ChatRequest::parse(b"[1]").is_err());
        assert!(ChatRequest::parse(b"{}").is_err());
        assert!(ChatRequest::parse(br#"{"model":1}"#).is_err());
    }

    #[test]
    fn a_response_is_renamed_only_when_it_must_be() {
        let body = br#"{"id":"x","model":"up","usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#;
        let (renamed, usage) = rename_model(body, "asked");
        assert_eq!(
            String::from_utf8_lossy(&renamed),
            r#"{"id":"x","model":"asked","usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#
        );
        assert_eq!(usage.and_then(|usage| usage.total_tokens), Some(7));
        assert!(matches!(rename_model(body, "up").0, Cow::Borrowed(_)));
        assert!(matches!(
            rename_model(b"not json", "up").0,
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn a_renamed_answer_keeps_every_other_byte_and_renames_each_model_member() {
        // Spacing, escapes and the order of members as the upstream wrote them.
        let body = br#" { "id" : "x\u0041",
  "model" : "up", "choices":[{"delta":{"content":"\"model\": \"up\""}}] } "#;
        let (renamed, _) = rename_model(body, "as\"ked");
        assert_eq!(
            String::from_utf8_lossy(&renamed),
            r#" { "id" : "x\u0041",
  "model" : "as\"ked", "choices":[{"delta":{"content":"\"model\": \"up\""}}] } "#
        );
        // Named twice (readers take the first or the last): both renamed; an escaped name
        // is the same name.
        let twice = br#"{"model":"up","n":1,"mod\u0065l":"up"}"#;
        assert_eq!(
            String::from_utf8_lossy(&rename_model(twice, "asked").0),
            r#"{"model":"asked","n":1,"mod\u0065l":"asked"}"#
        );
        // Nested (a Responses API event's `response`): renamed in place too.
        let nested = br#"{"type":"response.created", "response": {"id":"r", "model": "up"}}"#;
        assert_eq!(
            String::from_utf8_lossy(&rename_model(nested, "asked").0),
            r#"{"type":"response.created", "response": {"id":"r", "model": "asked"}}"#
        );
    }

    #[test]
    fn pieces_keep_the_clients_bytes_and_edit_only_model_user_and_the_set_member() {
        let body = br#" { "user" : "alice", "model":"claude" ,"messages":[1], "image":"AAAA" } "#;
        let request = ChatRequest::parse(body).unwrap_or_else(|err| panic!("{err}"));
        let pieces =
            request.upstream_pieces("up", Some(("stream_options", r#"{"include_usage":true}"#)));
        let joined = request.joined(&pieces);
        let value: serde_json::Value = serde_json::from_slice(&joined)
            .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&joined)));
        assert_eq!(
            value,
            serde_json::json!({"model": "up", "messages": [1], "image": "AAAA", "stream_options": {"include_usage": true}})
        );
        // The members after `model` travel as one piece of the client's bytes.
        assert!(
            pieces
                .iter()
                .any(|piece| matches!(piece, Piece::Original(range)
            if &body[range.clone()] == br#" ,"messages":[1], "image":"AAAA""#))
        );
        let unchanged =
            ChatRequest::parse(br#"{"model":"up"}"#).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(unchanged.upstream_body("up"), br#"{"model":"up"}"#);
        let only_user = ChatRequest::parse(br#"{"model":"a","user":"u"}"#)
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(only_user.upstream_body("b"), br#"{"model":"b"}"#);
    }

    #[test]
    fn nested_models_and_anthropic_usage_are_read() {
        let (renamed, usage) = rename_model(
            br#"{"type":"message_start","message":{"model":"up","usage":{"input_tokens":7,"output_tokens":1}}}"#,
            "asked",
        );
        assert_eq!(
            String::from_utf8_lossy(&renamed),
            r#"{"type":"message_start","message":{"model":"asked","usage":{"input_tokens":7,"output_tokens":1}}}"#
        );
        let usage = usage.unwrap_or_default().merge(Usage {
            completion_tokens: Some(30),
            ..Usage::default()
        });
        assert_eq!(
            usage,
            Usage {
                prompt_tokens: Some(7),
                completion_tokens: Some(30),
                total_tokens: Some(37),
                ..Usage::default()
            }
        );
    }
}
