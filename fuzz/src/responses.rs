//! The Responses API bridged to a chat completion upstream: a client's Responses request
//! translated to a chat completion, and a chat completion stream translated to the
//! Responses API's events.

use sandgate_model_gw::responses::chat_request;
use sandgate_model_gw::responses::stream::ResponseEvents;
use serde_json::Value;

use super::streams::{checked_chat, stream_events};

/// A client's `/v1/responses` body: refused with a message, or translated to a chat
/// completion that names the upstream model, has a list of messages of known roles
/// (each tool output answering a call made before it), and streams (with usage) exactly
/// when the client asked to.
pub fn responses_request(data: &[u8]) {
    let Ok(translated) = chat_request(data, "up/model", true) else {
        return;
    };
    let client: Value = serde_json::from_slice(data).unwrap_or(Value::Null);
    let streams = client["stream"] == true;
    let chat = checked_chat(&translated.body, streams, translated.stream);
    for tool in chat["tools"].as_array().into_iter().flatten() {
        assert_eq!(tool["type"], "function", "{tool}");
        assert!(tool["function"]["name"].is_string(), "{tool}");
    }
}

/// A chat completion stream from an upstream (the first byte picks where it is cut):
/// translated alike however it is cut, into Responses API events numbered from 0, that
/// begin with `response.created` and end with one final event, items opened and closed
/// in turn.
pub fn responses_stream(data: &[u8]) {
    let Some(events) = stream_events::<ResponseEvents>(data) else {
        return;
    };
    for (number, event) in events.iter().enumerate() {
        assert_eq!(event["sequence_number"], number as u64, "{event}");
    }
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(kinds.first(), Some(&"response.created"), "{kinds:?}");
    let last = kinds.last().copied().unwrap_or_default();
    assert!(
        ["response.completed", "response.incomplete", "error"].contains(&last),
        "{kinds:?}"
    );
    let finals = kinds
        .iter()
        .filter(|kind| ["response.completed", "response.incomplete", "error"].contains(kind))
        .count();
    assert_eq!(finals, 1, "{kinds:?}");
    // Items open and close in turn, numbered from 0; the final response holds them all.
    let mut open: Option<u64> = None;
    let mut next = 0;
    for event in &events {
        match event["type"].as_str() {
            Some("response.output_item.added") => {
                assert_eq!(open, None, "an item started inside another: {kinds:?}");
                assert_eq!(event["output_index"], next);
                open = Some(next);
                next += 1;
            }
            Some("response.output_item.done") => {
                assert_eq!(event["output_index"].as_u64(), open);
                open = None;
            }
            Some(kind) if kind.ends_with(".delta") => {
                assert_eq!(event["output_index"].as_u64(), open, "{kind}");
            }
            Some("response.completed" | "response.incomplete") => {
                assert_eq!(open, None, "the response ended inside an item");
                let output = event["response"]["output"].as_array().map(Vec::len);
                assert_eq!(output, Some(next as usize), "{event}");
            }
            _ => {}
        }
    }
}
