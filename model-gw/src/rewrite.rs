//! The only edits the gateway makes to bodies: `model` (and the request's `user`), at the
//! top level of a JSON object. Every other member travels as the exact text it arrived
//! as; a body that needs no edit is not touched at all.

use std::borrow::Cow;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// A JSON object's top-level members, values kept as their raw text.
struct Members<'a>(Vec<(String, &'a RawValue)>);

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
                while let Some(member) = map.next_entry::<String, &'de RawValue>()? {
                    members.push(member);
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

    /// The object again, with `model` set to `model` and the members in `drop` left out.
    fn encode(&self, model: &str, drop: &[&str]) -> Vec<u8> {
        let size = self.0.iter().map(|(k, v)| k.len() + v.get().len() + 4);
        let mut out = Vec::with_capacity(size.sum::<usize>() + model.len() + 2);
        out.push(b'{');
        let mut first = true;
        for (name, value) in &self.0 {
            if drop.contains(&name.as_str()) {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            // Serializing a string into a Vec cannot fail.
            drop_result(serde_json::to_writer(&mut out, name));
            out.push(b':');
            if name == "model" {
                drop_result(serde_json::to_writer(&mut out, model));
            } else {
                out.extend_from_slice(value.get().as_bytes());
            }
        }
        out.push(b'}');
        out
    }
}

fn drop_result<T, E>(_: Result<T, E>) {}

/// The token counts of an OpenAI `usage` object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub total_tokens: Option<u64>,
}

fn usage_of(members: &Members<'_>) -> Option<Usage> {
    members
        .get("usage")
        .and_then(|raw| serde_json::from_str::<Option<Usage>>(raw.get()).ok())
        .flatten()
}

/// How deep a chat completion body may nest: Python's `json` (the reference gateway's)
/// gives up near 1000 levels; a real request (messages, content parts, tool schemas)
/// stays within a few dozen.
const MAX_NESTING: usize = 512;

/// A chat completion request, read for what routing and the spend log need.
pub struct ChatRequest<'a> {
    members: Members<'a>,
    pub model: String,
    pub user: Option<String>,
}

impl<'a> ChatRequest<'a> {
    /// Reads the body; the error says, for the client, what is wrong with it.
    pub fn parse(body: &'a [u8]) -> Result<Self, String> {
        // The members are kept raw and sent on as they came, so nothing here would stop a
        // body nested thousands of levels deep from reaching the upstream, or the spend
        // log's readers: refused first, as the webhook refuses it.
        if sandgate_proto::json::nesting_exceeds(body, MAX_NESTING).is_some() {
            return Err(format!(
                "the request body is nested more than {MAX_NESTING} levels deep"
            ));
        }
        let members: Members<'a> = serde_json::from_slice(body)
            .map_err(|err| format!("the request body is not a JSON object: {err}"))?;
        let model = match members.get("model") {
            Some(raw) => serde_json::from_str::<String>(raw.get())
                .map_err(|_| "`model` must be a string".to_owned())?,
            None => return Err("`model` is required".to_owned()),
        };
        let user = members
            .get("user")
            .and_then(|raw| serde_json::from_str::<Option<String>>(raw.get()).ok())
            .flatten();
        Ok(Self {
            members,
            model,
            user,
        })
    }

    /// The body to send upstream: `model` replaced, `user` removed.
    pub fn upstream_body(&self, upstream_model: &str) -> Vec<u8> {
        self.members.encode(upstream_model, &["user"])
    }
}

/// A whole (non-streamed) response body with `model` set to `model`, and its usage.
/// A body that is not a JSON object, or already names `model`, is returned as it is.
pub fn rename_model<'a>(body: &'a [u8], model: &str) -> (Cow<'a, [u8]>, Option<Usage>) {
    let Ok(members) = serde_json::from_slice::<Members<'_>>(body) else {
        return (Cow::Borrowed(body), None);
    };
    let usage = usage_of(&members);
    let current = members
        .get("model")
        .and_then(|raw| serde_json::from_str::<Cow<'_, str>>(raw.get()).ok());
    match current {
        Some(current) if current != model => (Cow::Owned(members.encode(model, &[])), usage),
        _ => (Cow::Borrowed(body), usage),
    }
}

/// Renames `model` in every `data:` event of a server-sent event stream, line by line as
/// the bytes arrive, and keeps the last usage seen.
pub struct SseRenamer {
    model: String,
    /// The start of a line whose end has not arrived yet.
    pending: Vec<u8>,
    pub usage: Option<Usage>,
}

impl SseRenamer {
    pub fn new(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            pending: Vec::new(),
            usage: None,
        }
    }

    /// The complete lines of `pending` + `chunk`, rewritten; the rest is kept.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(chunk);
        let Some(end) = self.pending.iter().rposition(|byte| *byte == b'\n') else {
            return Vec::new();
        };
        let rest = self.pending.split_off(end + 1);
        let complete = std::mem::replace(&mut self.pending, rest);
        let mut out = Vec::with_capacity(complete.len() + 16);
        for line in complete.split_inclusive(|byte| *byte == b'\n') {
            self.line(line, &mut out);
        }
        out
    }

    /// Whatever is left when the stream ends.
    pub fn finish(&mut self) -> Vec<u8> {
        let rest = std::mem::take(&mut self.pending);
        let mut out = Vec::with_capacity(rest.len());
        if !rest.is_empty() {
            self.line(&rest, &mut out);
        }
        out
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<u8>) {
        let content_end = line
            .iter()
            .rposition(|byte| !matches!(byte, b'\n' | b'\r'))
            .map_or(0, |last| last + 1);
        let (content, ending) = line.split_at(content_end);
        let Some(data) = content.strip_prefix(b"data:") else {
            out.extend_from_slice(line);
            return;
        };
        let data = data.strip_prefix(b" ").unwrap_or(data);
        let (renamed, usage) = rename_model(data, &self.model);
        if usage.is_some() {
            self.usage = usage;
        }
        if let Cow::Owned(renamed) = renamed {
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(&renamed);
            out.extend_from_slice(ending);
        } else {
            out.extend_from_slice(line);
        }
    }
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
    fn sse_chunks_are_renamed_across_split_lines() {
        let mut renamer = SseRenamer::new("asked");
        let mut out = renamer.push(b"data: {\"model\":\"up\",\"choices\":[]}\n\ndata: {\"mo");
        out.extend(renamer.push(
            b"del\":\"up\",\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"total_tokens\":3}}\r\n\r\n",
        ));
        out.extend(renamer.push(b"data: [DONE]\n\n"));
        out.extend(renamer.finish());
        assert_eq!(
            String::from_utf8_lossy(&out),
            "data: {\"model\":\"asked\",\"choices\":[]}\n\ndata: {\"model\":\"asked\",\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"total_tokens\":3}}\r\n\r\ndata: [DONE]\n\n"
        );
        assert_eq!(
            renamer.usage.and_then(|usage| usage.completion_tokens),
            Some(2)
        );
    }
}
