//! A streamed chat completion read for a translation into another API's events
//! (Anthropic's in `messages::stream`, the Responses API's in `responses::stream`): the
//! `data:` lines as they complete, whatever the chunks they are cut into; `[DONE]`; an
//! upstream's error; the usage; and each chunk's first choice's delta, handed to the
//! translation piece by piece (reasoning, text, tool calls, the finish reason). The
//! translation writes its API's events; this reads the stream, once for both.

use serde::Deserialize;
use serde_json_borrow::Value;

use super::lines::Lines;
use crate::rewrite::Usage;

/// What a translation writes, in its API's events, for each piece of a chat completion
/// stream. Every method but [`Translation::new`] appends to `out`.
pub trait Translation {
    /// The translation of an answer named `model` (the model the client asked for).
    fn new(model: &str) -> Self;
    /// A chunk arrived, with its `id` and `created` (empty and 0 when it has none): the
    /// answer's first events, the first time only.
    fn start(&mut self, id: &str, created: u64, out: &mut Vec<u8>);
    /// The upstream's stream failed with `message`: the error event, the answer's last.
    fn error(&mut self, message: &str, out: &mut Vec<u8>);
    /// The chunk's `usage`, an object (the last chunk's, as the gateway asks for it).
    fn usage(&mut self, usage: &Value);
    /// A piece of the model's reasoning; left out by default.
    fn reasoning(&mut self, _piece: &str, _out: &mut Vec<u8>) {}
    /// A piece of the answer's text, never empty.
    fn text(&mut self, piece: &str, out: &mut Vec<u8>);
    /// A piece of a tool call: its `index`, and perhaps its `id`, `function.name` and a
    /// piece of `function.arguments`.
    fn tool_call(&mut self, call: &Value, out: &mut Vec<u8>);
    /// The choice's `finish_reason`.
    fn finish_reason(&mut self, reason: &str, out: &mut Vec<u8>);
    /// The stream ended (with `[DONE]` or not) without an error: the last events.
    fn end(&mut self, out: &mut Vec<u8>);
}

/// A chat completion stream translated by `T`, chunk by chunk.
pub struct ChatStream<T> {
    lines: Lines,
    translation: T,
    /// The last event was written (the end, or an error): nothing follows it.
    stopped: bool,
    /// The usage the upstream reported.
    pub usage: Option<Usage>,
}

/// The reasoning a chat completion message or delta carries, under either name upstreams
/// use.
pub(crate) fn reasoning_of<'v>(message: &'v Value<'v>) -> Option<&'v str> {
    message
        .get("reasoning_content")
        .as_str()
        .or_else(|| message.get("reasoning").as_str())
        .filter(|text| !text.is_empty())
}

impl<T: Translation> ChatStream<T> {
    pub fn new(model: &str) -> Self {
        Self {
            lines: Lines::default(),
            translation: T::new(model),
            stopped: false,
            usage: None,
        }
    }

    /// Lines longer than `max` bytes end the stream (see [`Self::overflowed`]).
    pub fn with_line_limit(mut self, max: usize) -> Self {
        self.lines = Lines::with_limit(max);
        self
    }

    /// Whether a line passed the limit: nothing more is translated.
    pub fn overflowed(&self) -> bool {
        self.lines.overflowed()
    }

    /// Whether the answer's last event (its end, or an error) has been written.
    pub fn ended(&self) -> bool {
        self.stopped
    }

    /// The events of the complete lines of what arrived so far.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let Some(complete) = self.lines.push(chunk) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for line in complete.split(|byte| *byte == b'\n') {
            self.line(line, &mut out);
        }
        out
    }

    /// The last events, once the upstream's stream ended (with `[DONE]` or not).
    pub fn finish(&mut self) -> Vec<u8> {
        let rest = self.lines.rest();
        let mut out = Vec::new();
        self.line(&rest, &mut out);
        self.end(&mut out);
        out
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        self.translation.end(out);
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<u8>) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        let data = data.strip_prefix(b" ").unwrap_or(data);
        if data == b"[DONE]" {
            self.end(out);
            return;
        }
        let Ok(chunk) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        if self.stopped {
            return;
        }
        let error = chunk.get("error");
        if !error.is_null() {
            let message = error
                .get("message")
                .as_str()
                .or_else(|| error.as_str())
                .unwrap_or("the upstream's stream failed");
            self.translation.error(message, out);
            self.stopped = true;
            return;
        }
        let translation = &mut self.translation;
        translation.start(
            chunk.get("id").as_str().unwrap_or_default(),
            chunk.get("created").as_u64().unwrap_or(0),
            out,
        );
        let chat_usage = chunk.get("usage");
        if chat_usage.is_object() {
            translation.usage(chat_usage);
            self.usage = Usage::deserialize(chat_usage).ok();
        }
        let choice = chunk.get("choices").get(0);
        let delta = choice.get("delta");
        if let Some(reasoning) = reasoning_of(delta) {
            translation.reasoning(reasoning, out);
        }
        if let Some(text) = delta
            .get("content")
            .as_str()
            .filter(|text| !text.is_empty())
        {
            translation.text(text, out);
        }
        for call in delta.get("tool_calls").as_array().into_iter().flatten() {
            translation.tool_call(call, out);
        }
        if let Some(reason) = choice.get("finish_reason").as_str() {
            translation.finish_reason(reason, out);
        }
    }
}
