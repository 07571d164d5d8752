//! A streamed chat completion as a streamed message: chat completion chunks in, Anthropic's
//! events out, in Anthropic's order:
//!
//! ```text
//! message_start, ping,
//! (content_block_start, content_block_delta…, content_block_stop)…,
//! message_delta (stop reason, usage), message_stop
//! ```
//!
//! Text deltas become a text block; each tool call a `tool_use` block whose arguments
//! arrive as `input_json_delta`s. The usage arrives last in a chat completion stream (the
//! gateway asks for it), so `message_start` says 0 tokens and `message_delta` carries the
//! counts, input tokens included, as Anthropic's own streams may.

use serde_json::{Value, json};

use super::{stop_reason, usage};
use crate::rewrite::{Lines, Usage};

/// The block being streamed.
#[derive(Debug, PartialEq, Eq)]
enum Block {
    Text,
    /// A tool use, by the index of its tool call in the chat completion's deltas.
    Tool(u64),
}

pub struct StreamTranslator {
    model: String,
    lines: Lines,
    started: bool,
    /// The block open, and its index.
    open: Option<(Block, u64)>,
    next_index: u64,
    stop_reason: Option<&'static str>,
    chat_usage: Option<Value>,
    /// `message_stop` was sent: nothing follows it.
    stopped: bool,
    pub usage: Option<Usage>,
}

fn event(out: &mut Vec<u8>, data: &Value) {
    let kind = data["type"].as_str().unwrap_or("error");
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    // Writing a Value into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, data);
    out.extend_from_slice(b"\n\n");
}

impl StreamTranslator {
    pub fn new(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            lines: Lines::default(),
            started: false,
            open: None,
            next_index: 0,
            stop_reason: None,
            chat_usage: None,
            stopped: false,
            usage: None,
        }
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
        self.stop(&mut out);
        out
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<u8>) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        let data = data.strip_prefix(b" ").unwrap_or(data);
        if data == b"[DONE]" {
            self.stop(out);
            return;
        }
        let Ok(chunk) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        if self.stopped {
            return;
        }
        if let Some(error) = chunk.get("error") {
            let message = error["message"]
                .as_str()
                .or_else(|| error.as_str())
                .unwrap_or("the upstream's stream failed");
            event(
                out,
                &json!({ "type": "error", "error": { "type": "api_error", "message": message } }),
            );
            self.stopped = true;
            return;
        }
        self.start(&chunk, out);
        if let Some(chat_usage) = chunk.get("usage").filter(|usage| usage.is_object()) {
            self.chat_usage = Some(chat_usage.clone());
            self.usage = serde_json::from_value(chat_usage.clone()).ok();
        }
        let Some(choice) = chunk["choices"].get(0) else {
            return;
        };
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str().filter(|text| !text.is_empty()) {
            if self.open.as_ref().map(|(block, _)| block) != Some(&Block::Text) {
                self.open_block(Block::Text, json!({ "type": "text", "text": "" }), out);
            }
            self.delta(json!({ "type": "text_delta", "text": text }), out);
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let position = call["index"].as_u64().unwrap_or(0);
            let same = matches!(&self.open, Some((Block::Tool(open), _)) if *open == position);
            if !same || call.get("id").is_some_and(Value::is_string) {
                let block = json!({
                    "type": "tool_use",
                    "id": call["id"].as_str().unwrap_or_default(),
                    "name": call["function"]["name"].as_str().unwrap_or_default(),
                    "input": {},
                });
                self.open_block(Block::Tool(position), block, out);
            }
            if let Some(arguments) = call["function"]["arguments"]
                .as_str()
                .filter(|arguments| !arguments.is_empty())
            {
                self.delta(
                    json!({ "type": "input_json_delta", "partial_json": arguments }),
                    out,
                );
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.close_block(out);
            self.stop_reason = Some(stop_reason(reason));
        }
    }

    fn start(&mut self, chunk: &Value, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let id = chunk["id"].as_str().unwrap_or_default();
        event(
            out,
            &json!({ "type": "message_start", "message": {
                "id": if id.starts_with("msg_") { id.to_owned() } else { format!("msg_{id}") },
                "type": "message",
                "role": "assistant",
                "model": self.model,
                "content": [],
                "stop_reason": Value::Null,
                "stop_sequence": Value::Null,
                "usage": { "input_tokens": 0, "output_tokens": 0 },
            }}),
        );
        event(out, &json!({ "type": "ping" }));
    }

    fn open_block(&mut self, block: Block, content_block: Value, out: &mut Vec<u8>) {
        self.close_block(out);
        let index = self.next_index;
        self.next_index += 1;
        event(
            out,
            &json!({ "type": "content_block_start", "index": index, "content_block": content_block }),
        );
        self.open = Some((block, index));
    }

    fn delta(&self, delta: Value, out: &mut Vec<u8>) {
        if let Some((_, index)) = &self.open {
            event(
                out,
                &json!({ "type": "content_block_delta", "index": index, "delta": delta }),
            );
        }
    }

    fn close_block(&mut self, out: &mut Vec<u8>) {
        if let Some((_, index)) = self.open.take() {
            event(
                out,
                &json!({ "type": "content_block_stop", "index": index }),
            );
        }
    }

    fn stop(&mut self, out: &mut Vec<u8>) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        if !self.started {
            // An upstream that streamed nothing: a message, empty, rather than no events.
            self.start(&json!({}), out);
        }
        self.close_block(out);
        let usage = self
            .chat_usage
            .as_ref()
            .map_or_else(|| json!({ "input_tokens": 0, "output_tokens": 0 }), usage);
        event(
            out,
            &json!({
                "type": "message_delta",
                "delta": { "stop_reason": self.stop_reason.unwrap_or("end_turn"), "stop_sequence": Value::Null },
                "usage": usage,
            }),
        );
        event(out, &json!({ "type": "message_stop" }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The events' types and data, in order.
    fn events(stream: &[u8]) -> Vec<Value> {
        let text = String::from_utf8_lossy(stream);
        text.split("\n\n")
            .filter(|event| !event.trim().is_empty())
            .map(|event| {
                let mut lines = event.lines();
                let kind = lines.next().and_then(|line| line.strip_prefix("event: "));
                let data: Value = lines
                    .next()
                    .and_then(|line| line.strip_prefix("data: "))
                    .and_then(|data| serde_json::from_str(data).ok())
                    .unwrap_or_else(|| panic!("not an event: {event:?}"));
                assert_eq!(kind, data["type"].as_str(), "{event}");
                data
            })
            .collect()
    }

    fn translate(chunks: &[&[u8]]) -> (Vec<Value>, Option<Usage>) {
        let mut translator = StreamTranslator::new("claude");
        let mut out = Vec::new();
        for chunk in chunks {
            out.extend(translator.push(chunk));
        }
        out.extend(translator.finish());
        (events(&out), translator.usage)
    }

    const TOOL_STREAM: &[u8] = b"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Let me \"}}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"look.\"}}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"look\",\"arguments\":\"\"}}]}}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"zoom\\\"\"}}]}}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":2}\"}}]}}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":9,\"total_tokens\":21}}\n\n\
data: [DONE]\n\n";

    #[test]
    fn text_then_a_tool_call_stream_in_anthropics_order() {
        let (events, usage) = translate(&[TOOL_STREAM]);
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
        assert_eq!(
            kinds,
            [
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        assert_eq!(events[0]["message"]["model"], "claude");
        assert_eq!(events[0]["message"]["id"], "msg_c1");
        assert_eq!(
            events[3]["delta"],
            json!({"type": "text_delta", "text": "Let me "})
        );
        assert_eq!(
            events[6]["content_block"],
            json!({"type": "tool_use", "id": "call_1", "name": "look", "input": {}})
        );
        assert_eq!(events[6]["index"], 1);
        let arguments: String = events[7..9]
            .iter()
            .filter_map(|e| e["delta"]["partial_json"].as_str())
            .collect();
        assert_eq!(arguments, "{\"zoom\":2}");
        assert_eq!(
            events[10],
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"input_tokens": 12, "output_tokens": 9}})
        );
        assert_eq!(usage.and_then(|usage| usage.total_tokens), Some(21));
    }

    #[test]
    fn any_cut_of_the_stream_translates_alike() {
        let (whole, _) = translate(&[TOOL_STREAM]);
        for at in 0..TOOL_STREAM.len() {
            let (head, tail) = TOOL_STREAM.split_at(at);
            assert_eq!(translate(&[head, tail]).0, whole, "cut at {at}");
        }
    }

    #[test]
    fn a_stream_cut_short_still_ends_a_message_and_an_error_ends_it() {
        let (events, _) = translate(&[
            b"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
        ]);
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
        assert_eq!(kinds.last(), Some(&"message_stop"));
        assert!(kinds.contains(&"content_block_stop"));
        let (events, _) = translate(&[b"data: {\"error\":{\"message\":\"boom\"}}\n\n"]);
        assert_eq!(
            events,
            [json!({"type": "error", "error": {"type": "api_error", "message": "boom"}})]
        );
    }
}
