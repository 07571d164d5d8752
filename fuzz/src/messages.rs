//! The Messages API over an OpenAI-compatible upstream: a client's Anthropic request
//! translated to a chat completion, and a chat completion stream translated to Anthropic's
//! events.

use sandgate_model_gw::messages::chat_request;
use sandgate_model_gw::messages::stream::MessageEvents;
use serde_json::Value;

use super::streams::{checked_chat, stream_events};

/// A client's `/v1/messages` body: refused with a message, or translated to a chat
/// completion that names the upstream model, has a list of messages of known roles, and
/// streams (with usage) exactly when the client asked to.
pub fn messages_request(data: &[u8]) {
    for count_tokens in [false, true] {
        let Ok(translated) = chat_request(data, "up/model", count_tokens) else {
            continue;
        };
        let client: Value = serde_json::from_slice(data).unwrap_or(Value::Null);
        let streams = !count_tokens && client["stream"] == true;
        let chat = checked_chat(&translated.body, streams, translated.stream);
        if count_tokens {
            assert_eq!(chat["max_tokens"], 1);
        }
    }
}

/// A chat completion stream from an upstream (the first byte picks where it is cut):
/// translated alike however it is cut, into well-formed Anthropic events.
pub fn messages_stream(data: &[u8]) {
    let Some(events) = stream_events::<MessageEvents>(data) else {
        return;
    };
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    if kinds == ["error"] || kinds.last() == Some(&"error") {
        return;
    }
    assert_eq!(kinds.first(), Some(&"message_start"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"message_stop"), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|kind| **kind == "message_stop").count(),
        1
    );
    // Blocks open and close in turn, numbered from 0, deltas only inside one.
    let mut open: Option<u64> = None;
    let mut next = 0;
    for event in &events {
        match event["type"].as_str() {
            Some("content_block_start") => {
                assert_eq!(open, None, "a block started inside another: {kinds:?}");
                assert_eq!(event["index"], next);
                open = Some(next);
                next += 1;
            }
            Some("content_block_delta") => assert_eq!(event["index"].as_u64(), open),
            Some("content_block_stop") => {
                assert_eq!(event["index"].as_u64(), open);
                open = None;
            }
            Some("message_delta") => assert_eq!(open, None, "the message ended inside a block"),
            _ => {}
        }
    }
}
