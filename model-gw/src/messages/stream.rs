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

use serde::Serialize;
use serde_json_borrow::Value;

use super::answer::{
    ContentBlock, ErrorBody, ErrorObject, Message, MessageUsage, ToolInput, stop_reason, usage,
};
use crate::sse::chat_stream::{ChatStream, Translation};

/// The block being streamed.
#[derive(Debug, PartialEq, Eq)]
enum Block {
    Text,
    /// A tool use, by the index of its tool call in the chat completion's deltas.
    Tool(u64),
}

/// An event of a streamed message (but `error`, an [`ErrorObject`]).
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event<'a> {
    MessageStart {
        message: Message<'a>,
    },
    Ping,
    ContentBlockStart {
        index: u64,
        content_block: ContentBlock<'a>,
    },
    ContentBlockDelta {
        index: u64,
        delta: Delta<'a>,
    },
    ContentBlockStop {
        index: u64,
    },
    MessageDelta {
        delta: StopDelta,
        usage: MessageUsage,
    },
    MessageStop,
}

impl Event<'_> {
    /// The event's name, its `type` too.
    fn kind(&self) -> &'static str {
        match self {
            Self::MessageStart { .. } => "message_start",
            Self::Ping => "ping",
            Self::ContentBlockStart { .. } => "content_block_start",
            Self::ContentBlockDelta { .. } => "content_block_delta",
            Self::ContentBlockStop { .. } => "content_block_stop",
            Self::MessageDelta { .. } => "message_delta",
            Self::MessageStop => "message_stop",
        }
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Delta<'a> {
    TextDelta { text: &'a str },
    InputJsonDelta { partial_json: &'a str },
}

#[derive(Serialize)]
struct StopDelta {
    stop_reason: &'static str,
    stop_sequence: Option<&'static str>,
}

/// A streamed chat completion as a streamed message.
pub type StreamTranslator = ChatStream<MessageEvents>;

/// Anthropic's events of one streamed chat completion, as [`ChatStream`] reads it.
pub struct MessageEvents {
    model: String,
    started: bool,
    /// The block open, and its index.
    open: Option<(Block, u64)>,
    next_index: u64,
    stop_reason: Option<&'static str>,
    /// The upstream's usage, as the message's.
    message_usage: Option<MessageUsage>,
}

/// Writes a server-sent event named `kind` with `data`.
fn write_event(out: &mut Vec<u8>, kind: &str, data: &impl Serialize) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    // Writing typed values into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, data);
    out.extend_from_slice(b"\n\n");
}

fn event(out: &mut Vec<u8>, event: &Event) {
    write_event(out, event.kind(), event);
}

impl Translation for MessageEvents {
    fn new(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            started: false,
            open: None,
            next_index: 0,
            stop_reason: None,
            message_usage: None,
        }
    }

    /// `message_start` and a `ping`, once: the message named after the chat completion
    /// `id`.
    fn start(&mut self, id: &str, _created: u64, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let message = Message::new(id, &self.model);
        event(out, &Event::MessageStart { message });
        event(out, &Event::Ping);
    }

    fn error(&mut self, message: &str, out: &mut Vec<u8>) {
        let error = ErrorObject {
            error: ErrorBody {
                r#type: "api_error",
                message,
            },
        };
        write_event(out, "error", &error);
    }

    fn usage(&mut self, chat_usage: &Value) {
        self.message_usage = Some(usage(chat_usage));
    }

    fn text(&mut self, text: &str, out: &mut Vec<u8>) {
        if self.open.as_ref().map(|(block, _)| block) != Some(&Block::Text) {
            self.open_block(Block::Text, ContentBlock::Text { text: "" }, out);
        }
        self.delta(Delta::TextDelta { text }, out);
    }

    fn tool_call(&mut self, call: &Value, out: &mut Vec<u8>) {
        let position = call.get("index").as_u64().unwrap_or(0);
        let same = matches!(&self.open, Some((Block::Tool(open), _)) if *open == position);
        let function = call.get("function");
        if !same || call.get("id").is_string() {
            let block = ContentBlock::ToolUse {
                id: call.get("id").as_str().unwrap_or_default(),
                name: function.get("name").as_str().unwrap_or_default(),
                input: ToolInput::Empty {},
            };
            self.open_block(Block::Tool(position), block, out);
        }
        if let Some(partial_json) = function
            .get("arguments")
            .as_str()
            .filter(|arguments| !arguments.is_empty())
        {
            self.delta(Delta::InputJsonDelta { partial_json }, out);
        }
    }

    fn finish_reason(&mut self, reason: &str, out: &mut Vec<u8>) {
        self.close_block(out);
        self.stop_reason = Some(stop_reason(reason));
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        // An upstream that streamed nothing: a message, empty, rather than no events.
        self.start("", 0, out);
        self.close_block(out);
        let delta = StopDelta {
            stop_reason: self.stop_reason.unwrap_or("end_turn"),
            stop_sequence: None,
        };
        let usage = self.message_usage.unwrap_or_default();
        event(out, &Event::MessageDelta { delta, usage });
        event(out, &Event::MessageStop);
    }
}

impl MessageEvents {
    fn open_block(&mut self, block: Block, content_block: ContentBlock, out: &mut Vec<u8>) {
        self.close_block(out);
        let index = self.next_index;
        self.next_index += 1;
        event(
            out,
            &Event::ContentBlockStart {
                index,
                content_block,
            },
        );
        self.open = Some((block, index));
    }

    fn delta(&self, delta: Delta, out: &mut Vec<u8>) {
        if let Some((_, index)) = self.open {
            event(out, &Event::ContentBlockDelta { index, delta });
        }
    }

    fn close_block(&mut self, out: &mut Vec<u8>) {
        if let Some((_, index)) = self.open.take() {
            event(out, &Event::ContentBlockStop { index });
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::rewrite::Usage;

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

    /// The events' types, in order.
    fn kinds(events: &[Value]) -> Vec<&str> {
        events.iter().filter_map(|e| e["type"].as_str()).collect()
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
        assert_eq!(
            kinds(&events),
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
        let kinds = kinds(&events);
        assert_eq!(kinds.last(), Some(&"message_stop"));
        assert!(kinds.contains(&"content_block_stop"));
        let (events, _) = translate(&[b"data: {\"error\":{\"message\":\"boom\"}}\n\n"]);
        assert_eq!(
            events,
            [json!({"type": "error", "error": {"type": "api_error", "message": "boom"}})]
        );
    }

    #[test]
    fn a_null_error_is_no_error() {
        let (events, _) = translate(&[
            b"data: {\"id\":\"c\",\"error\":null,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
        ]);
        let (without, _) = translate(&[
            b"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
        ]);
        assert_eq!(events, without);
        assert_eq!(kinds(&events).last(), Some(&"message_stop"));
    }
}
