//! A streamed chat completion as a streamed response: chat completion chunks in, the
//! Responses API's events out, in its order, each with its `sequence_number`:
//!
//! ```text
//! response.created, response.in_progress,
//! for each output item, in the order the upstream streams them:
//!   reasoning: output_item.added, reasoning_summary_part.added,
//!              reasoning_summary_text.delta…, reasoning_summary_text.done,
//!              reasoning_summary_part.done, output_item.done
//!   text:      output_item.added, content_part.added, output_text.delta…,
//!              output_text.done, content_part.done, output_item.done
//!   a call:    output_item.added, function_call_arguments.delta…,
//!              function_call_arguments.done, output_item.done
//! response.completed (response.incomplete when the upstream stopped at its length limit)
//! ```
//!
//! The usage arrives last in a chat completion stream (the gateway asks for it): the
//! final event carries it, and the whole output, as the Responses API's does.

use serde_json::json;
use serde_json_borrow::Value;

use super::{response_object, usage};
use crate::sse::chat_stream::{ChatStream, Translation};

/// The output item being streamed.
enum Open {
    Reasoning {
        id: String,
        text: String,
    },
    Text {
        id: String,
        text: String,
    },
    /// A function call, by the index of its tool call in the chat completion's deltas.
    Call {
        index: u64,
        id: String,
        call_id: String,
        name: String,
        arguments: String,
    },
}

/// A streamed chat completion as a streamed response.
pub type ResponsesTranslator = ChatStream<ResponseEvents>;

/// The Responses API's events of one streamed chat completion, as [`ChatStream`] reads it.
pub struct ResponseEvents {
    model: String,
    sequence: u64,
    /// The response's id and creation time, from the first chunk.
    started: Option<(String, u64)>,
    /// The items done so far, for the final event.
    output: Vec<serde_json::Value>,
    open: Option<Open>,
    finish_reason: Option<String>,
    /// The upstream's usage, in the Responses API's shape.
    response_usage: Option<serde_json::Value>,
}

impl ResponseEvents {
    /// Writes the event `kind` with `data`'s fields, numbered.
    fn event(&mut self, out: &mut Vec<u8>, kind: &str, mut data: serde_json::Value) {
        if let Some(fields) = data.as_object_mut() {
            fields.insert("type".to_owned(), json!(kind));
            fields.insert("sequence_number".to_owned(), json!(self.sequence));
        }
        self.sequence += 1;
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\ndata: ");
        // Writing a value into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, &data);
        out.extend_from_slice(b"\n\n");
    }

    fn response(&self, status: &str) -> serde_json::Value {
        let (id, created) = self.started.clone().unwrap_or_default();
        let done = status != "in_progress";
        response_object(
            &id,
            &self.model,
            created,
            status,
            if done {
                self.output.clone()
            } else {
                Vec::new()
            },
            if done {
                self.response_usage.clone()
            } else {
                None
            },
        )
    }

    /// An item id: the kind's prefix, the response's id and the item's place.
    fn item_id(&self, prefix: &str) -> String {
        let id = self.started.as_ref().map_or("", |(id, _)| id.as_str());
        format!("{prefix}_{id}_{}", self.output.len())
    }

    /// Ends the open item: its `done` events, and its place in the output.
    fn close(&mut self, out: &mut Vec<u8>) {
        let Some(open) = self.open.take() else { return };
        let index = self.output.len();
        let item = match open {
            Open::Reasoning { id, text } => {
                let part = json!({"type": "summary_text", "text": text});
                self.event(
                    out,
                    "response.reasoning_summary_text.done",
                    json!({"item_id": id, "output_index": index, "summary_index": 0, "text": text}),
                );
                self.event(
                    out,
                    "response.reasoning_summary_part.done",
                    json!({"item_id": id, "output_index": index, "summary_index": 0, "part": part}),
                );
                json!({"id": id, "type": "reasoning", "summary": [part]})
            }
            Open::Text { id, text } => {
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                self.event(
                    out,
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
                );
                self.event(
                    out,
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                );
                json!({"id": id, "type": "message", "status": "completed", "role": "assistant", "content": [part]})
            }
            Open::Call {
                id,
                call_id,
                name,
                arguments,
                ..
            } => {
                self.event(
                    out,
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": index, "arguments": arguments}),
                );
                json!({"id": id, "type": "function_call", "status": "completed", "call_id": call_id, "name": name, "arguments": arguments})
            }
        };
        self.event(
            out,
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        self.output.push(item);
    }
}

impl Translation for ResponseEvents {
    fn new(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            sequence: 0,
            started: None,
            output: Vec::new(),
            open: None,
            finish_reason: None,
            response_usage: None,
        }
    }

    fn start(&mut self, id: &str, created: u64, out: &mut Vec<u8>) {
        if self.started.is_some() {
            return;
        }
        self.started = Some((id.to_owned(), created));
        for kind in ["response.created", "response.in_progress"] {
            let response = self.response("in_progress");
            self.event(out, kind, json!({ "response": response }));
        }
    }

    fn error(&mut self, message: &str, out: &mut Vec<u8>) {
        self.start("", 0, out);
        self.event(
            out,
            "error",
            json!({"code": null, "message": message, "param": null}),
        );
    }

    fn usage(&mut self, chat_usage: &Value) {
        self.response_usage = Some(usage(chat_usage));
    }

    fn reasoning(&mut self, piece: &str, out: &mut Vec<u8>) {
        if !matches!(self.open, Some(Open::Reasoning { .. })) {
            self.close(out);
            let id = self.item_id("rs");
            let index = self.output.len();
            self.event(out, "response.output_item.added", json!({"output_index": index, "item": {"id": id, "type": "reasoning", "summary": []}}));
            self.event(out, "response.reasoning_summary_part.added", json!({"item_id": id, "output_index": index, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}));
            self.open = Some(Open::Reasoning {
                id,
                text: String::new(),
            });
        }
        let index = self.output.len();
        if let Some(Open::Reasoning { id, text }) = &mut self.open {
            text.push_str(piece);
            let data =
                json!({"item_id": id, "output_index": index, "summary_index": 0, "delta": piece});
            self.event(out, "response.reasoning_summary_text.delta", data);
        }
    }

    fn text(&mut self, piece: &str, out: &mut Vec<u8>) {
        if !matches!(self.open, Some(Open::Text { .. })) {
            self.close(out);
            let id = self.item_id("msg");
            let index = self.output.len();
            self.event(out, "response.output_item.added", json!({"output_index": index, "item": {"id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}}));
            self.event(out, "response.content_part.added", json!({"item_id": id, "output_index": index, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}));
            self.open = Some(Open::Text {
                id,
                text: String::new(),
            });
        }
        let index = self.output.len();
        if let Some(Open::Text { id, text }) = &mut self.open {
            text.push_str(piece);
            let data =
                json!({"item_id": id, "output_index": index, "content_index": 0, "delta": piece});
            self.event(out, "response.output_text.delta", data);
        }
    }

    fn tool_call(&mut self, call: &Value, out: &mut Vec<u8>) {
        let call_index = call.get("index").as_u64().unwrap_or(0);
        let same = matches!(&self.open, Some(Open::Call { index, .. }) if *index == call_index);
        if !same {
            self.close(out);
            let id = self.item_id("fc");
            let call_id = call.get("id").as_str().unwrap_or_default().to_owned();
            let name = call
                .get("function")
                .get("name")
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let index = self.output.len();
            self.event(out, "response.output_item.added", json!({"output_index": index, "item": {"id": id, "type": "function_call", "status": "in_progress", "call_id": call_id, "name": name, "arguments": ""}}));
            self.open = Some(Open::Call {
                index: call_index,
                id,
                call_id,
                name,
                arguments: String::new(),
            });
        }
        let piece = call
            .get("function")
            .get("arguments")
            .as_str()
            .unwrap_or_default();
        if piece.is_empty() {
            return;
        }
        let index = self.output.len();
        if let Some(Open::Call { id, arguments, .. }) = &mut self.open {
            arguments.push_str(piece);
            let data = json!({"item_id": id, "output_index": index, "delta": piece});
            self.event(out, "response.function_call_arguments.delta", data);
        }
    }

    fn finish_reason(&mut self, reason: &str, _out: &mut Vec<u8>) {
        self.finish_reason = Some(reason.to_owned());
    }

    /// The last event: the response, whole, with its usage.
    fn end(&mut self, out: &mut Vec<u8>) {
        // An upstream that streamed nothing: a response, empty, rather than no events.
        self.start("", 0, out);
        self.close(out);
        let (kind, status) = match self.finish_reason.as_deref() {
            Some("length") => ("response.incomplete", "incomplete"),
            _ => ("response.completed", "completed"),
        };
        let response = self.response(status);
        self.event(out, kind, json!({ "response": response }));
    }
}
