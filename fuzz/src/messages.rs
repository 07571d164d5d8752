//! The Messages API over an OpenAI-compatible upstream: a client's Anthropic request
//! translated to a chat completion, and a chat completion stream translated to Anthropic's
//! events.

use sandgate_model_gw::messages::chat_request;
use sandgate_model_gw::messages::stream::StreamTranslator;
use serde_json::Value;

/// A client's `/v1/messages` body: refused with a message, or translated to a chat
/// completion that names the upstream model, has a list of messages of known roles, and
/// streams (with usage) exactly when the client asked to.
pub fn messages_request(data: &[u8]) {
    for count_tokens in [false, true] {
        let Ok(translated) = chat_request(data, "up/model", count_tokens) else {
            continue;
        };
        let chat: Value = serde_json::from_slice(&translated.body).unwrap_or_else(|err| {
            panic!(
                "the translation is not JSON: {err}: {}",
                String::from_utf8_lossy(&translated.body)
            )
        });
        assert_eq!(chat["model"], "up/model");
        let Some(messages) = chat["messages"].as_array() else {
            panic!("no list of messages in {chat}");
        };
        for message in messages {
            let role = message["role"].as_str().unwrap_or_default();
            assert!(
                ["system", "user", "assistant", "tool"].contains(&role),
                "role {role:?} in {chat}"
            );
            if role == "tool" {
                assert!(message["tool_call_id"].is_string(), "{message}");
            }
        }
        let client: Value = serde_json::from_slice(data).unwrap_or(Value::Null);
        let streams = !count_tokens && client["stream"] == true;
        assert_eq!(translated.stream, streams);
        assert_eq!(chat["stream"] == true, streams, "{chat}");
        if streams {
            assert_eq!(chat["stream_options"]["include_usage"], true);
        }
        if count_tokens {
            assert_eq!(chat["max_tokens"], 1);
        }
    }
}

/// The events `StreamTranslator` makes of `pieces`, in order.
fn translated(pieces: &[&[u8]]) -> Vec<u8> {
    let mut translator = StreamTranslator::new("asked");
    let mut out = Vec::new();
    for piece in pieces {
        out.extend(translator.push(piece));
    }
    out.extend(translator.finish());
    out
}

/// A chat completion stream from an upstream (the first byte picks where it is cut):
/// translated alike however it is cut, into well-formed Anthropic events.
pub fn messages_stream(data: &[u8]) {
    let Some((&cut, stream)) = data.split_first() else {
        return;
    };
    let whole = translated(&[stream]);
    let at = usize::from(cut) * stream.len() / usize::from(u8::MAX);
    let (head, tail) = stream.split_at(at);
    assert_eq!(
        translated(&[head, tail]),
        whole,
        "cutting the stream at {at} changed the events"
    );
    let text =
        String::from_utf8(whole).unwrap_or_else(|err| panic!("the events are not UTF-8: {err}"));
    let events: Vec<Value> = text
        .split("\n\n")
        .filter(|event| !event.is_empty())
        .map(|event| {
            let (kind, data) = event
                .strip_prefix("event: ")
                .and_then(|event| event.split_once("\ndata: "))
                .unwrap_or_else(|| panic!("not an event: {event:?}"));
            let data: Value = serde_json::from_str(data)
                .unwrap_or_else(|err| panic!("an event's data is not JSON ({err}): {event:?}"));
            assert_eq!(data["type"], kind, "{event}");
            data
        })
        .collect();
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
