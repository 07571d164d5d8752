//! What the Messages and Responses targets share: a client's request translated to a chat
//! completion, which must be one an upstream takes; and a chat completion stream
//! translated to the API's events, alike however it is cut, into well-formed events.

use sandgate_model_gw::sse::chat_stream::{ChatStream, Translation};
use serde_json::Value;

/// The chat completion `body` a client's request became, checked: it names the upstream
/// model, has a list of messages of known roles (each tool message answering a call), and
/// streams (with usage) exactly when the client asked to (`streams`; `said` is what the
/// translation says of itself).
pub fn checked_chat(body: &[u8], streams: bool, said: bool) -> Value {
    let chat: Value = serde_json::from_slice(body).unwrap_or_else(|err| {
        panic!(
            "the translation is not JSON: {err}: {}",
            String::from_utf8_lossy(body)
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
    assert_eq!(said, streams);
    assert_eq!(chat["stream"] == true, streams, "{chat}");
    if streams {
        assert_eq!(chat["stream_options"]["include_usage"], true);
    }
    chat
}

/// The events a `T` translation makes of `pieces`, in order.
fn translated<T: Translation>(pieces: &[&[u8]]) -> Vec<u8> {
    let mut translator = ChatStream::<T>::new("asked");
    let mut out = Vec::new();
    for piece in pieces {
        out.extend(translator.push(piece));
    }
    out.extend(translator.finish());
    out
}

/// A chat completion stream from an upstream (the first byte of `data` picks where it is
/// cut), translated by `T`: alike however it is cut, into events that are each a name and
/// JSON data whose `type` is that name. The events' data, in order; none for no input.
pub fn stream_events<T: Translation>(data: &[u8]) -> Option<Vec<Value>> {
    let (&cut, stream) = data.split_first()?;
    let whole = translated::<T>(&[stream]);
    let at = usize::from(cut) * stream.len() / usize::from(u8::MAX);
    let (head, tail) = stream.split_at(at);
    assert_eq!(
        translated::<T>(&[head, tail]),
        whole,
        "cutting the stream at {at} changed the events"
    );
    let text =
        String::from_utf8(whole).unwrap_or_else(|err| panic!("the events are not UTF-8: {err}"));
    let events = text
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
    Some(events)
}
