//! The OpenAI-shaped APIs: chat completions, responses, embeddings and (text) completions.
//! Each goes to its own path on either kind of upstream with two edits only: `model`
//! becomes the upstream's name (and `user` stays here, for the spend log), and a streamed
//! chat or text completion whose client did not ask for usage gets
//! `stream_options.include_usage` added, its usage chunk recorded and kept from the client
//! (LiteLLM's proxy does the same). Answers have `model` renamed back.

use bytes::Bytes;
use sandgate_proto::models::v1::Api;
use serde_json::{Map, Value};

use crate::call::{AnswerEdit, Prepared};
use crate::rewrite::{ChatRequest, Piece};

/// The path of an OpenAI-shaped API, on either kind of upstream.
pub fn path(api: Api) -> &'static str {
    match api {
        Api::Responses => "/responses",
        Api::Embeddings => "/embeddings",
        Api::Completions => "/completions",
        Api::Messages => "/messages",
        Api::MessagesCountTokens => "/messages/count_tokens",
        // Refused before a call is prepared.
        Api::ChatCompletions | Api::Unspecified => "/chat/completions",
    }
}

/// `stream_options` with `include_usage` set, keeping the client's other options.
fn with_usage(request: &ChatRequest<'_>) -> String {
    let mut options = request
        .raw("stream_options")
        .and_then(|raw| serde_json::from_str::<Map<String, Value>>(raw).ok())
        .unwrap_or_default();
    options.insert("include_usage".into(), Value::Bool(true));
    Value::Object(options).to_string()
}

/// The pieces as `Bytes`: the client's bytes sliced from `body`, not copied.
pub fn pieces_of(body: &Bytes, pieces: Vec<Piece>) -> Vec<Bytes> {
    pieces
        .into_iter()
        .map(|piece| match piece {
            Piece::Original(range) => body.slice(range),
            Piece::New(text) => Bytes::from(text),
        })
        .collect()
}

/// Bodies smaller than this are sent as one buffer (one copy is cheaper than several
/// writes); larger ones as the client's bytes between the edits.
const SPLICE_FROM: usize = 64 * 1024;

/// A call of `api`, parsed from the client's `body`, for the upstream model
/// `upstream_model`.
pub fn prepare(
    api: Api,
    body: &Bytes,
    request: &ChatRequest<'_>,
    upstream_model: &str,
) -> Prepared {
    let asks_usage_chunk = matches!(api, Api::ChatCompletions | Api::Completions)
        && request.stream
        && !request.stream_usage;
    let options = asks_usage_chunk.then(|| with_usage(request));
    let set = options
        .as_deref()
        .map(|options| ("stream_options", options));
    let pieces = request.upstream_pieces(upstream_model, set);
    let body = if body.len() < SPLICE_FROM {
        vec![Bytes::from(request.joined(&pieces))]
    } else {
        pieces_of(body, pieces)
    };
    Prepared {
        api,
        path: path(api),
        body,
        asked: request.model.clone(),
        user: request.user.clone(),
        answer: AnswerEdit::Rename {
            hide_usage: asks_usage_chunk,
        },
        max_output: request.max_output,
    }
}

/// An upstream's failed answer as the OpenAI SDKs read one: itself when it is a JSON object
/// (an upstream's own error, relayed unchanged), else the OpenAI error shape around its text
/// (a proxy's HTML page, a plain-text message, nothing), as LiteLLM's proxy answers it too.
pub fn error(status: u16, body: Bytes) -> Bytes {
    let is_object = body.iter().find(|byte| !byte.is_ascii_whitespace()) == Some(&b'{')
        && serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_ok();
    if is_object {
        return body;
    }
    let text = crate::messages::upstream_text(&body);
    let message = if text.trim().is_empty() {
        format!("the upstream answered {status} without a message")
    } else {
        text
    };
    Bytes::from(sandgate_proto::models::openai_error(status, &message, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_of(prepared: &Prepared) -> Value {
        let joined: Vec<u8> = prepared
            .body
            .iter()
            .flat_map(|piece| piece.to_vec())
            .collect();
        serde_json::from_slice(&joined).expect("JSON")
    }

    #[test]
    fn an_upstream_error_object_is_relayed_and_anything_else_wrapped() {
        let own = Bytes::from_static(br#" {"error": {"message": "quota", "code": "x"}}"#);
        assert_eq!(error(429, own.clone()), own);
        for (status, body, message, kind) in [
            (
                404,
                &b"<html>File not found</html>"[..],
                "<html>File not found</html>",
                "not_found_error",
            ),
            (
                502,
                b"",
                "the upstream answered 502 without a message",
                "api_error",
            ),
            (400, b"[1, 2]", "[1, 2]", "invalid_request_error"),
            (503, b"{broken", "{broken", "api_error"),
            (500, b"bad \xff byte", "bad \u{fffd} byte", "api_error"),
        ] {
            let wrapped: Value = serde_json::from_slice(&error(status, Bytes::from(body))).unwrap();
            assert_eq!(wrapped["error"]["message"], message, "{status}");
            assert_eq!(wrapped["error"]["type"], kind, "{status}");
            assert_eq!(wrapped["error"]["code"], status.to_string());
            assert!(wrapped["error"]["param"].is_null());
        }
    }

    #[test]
    fn a_stream_without_usage_asks_for_it_and_hides_it() {
        let body = Bytes::from_static(
            br#"{"model":"gpt","stream":true,"stream_options":{"include_obfuscation":false},"messages":[]}"#,
        );
        let request = ChatRequest::parse(&body).expect("parsed");
        let prepared = prepare(Api::ChatCompletions, &body, &request, "openai/gpt-4o");
        assert_eq!(
            body_of(&prepared)["stream_options"],
            serde_json::json!({"include_obfuscation": false, "include_usage": true})
        );
        assert_eq!(prepared.answer, AnswerEdit::Rename { hide_usage: true });

        let asked = Bytes::from_static(
            br#"{"model":"gpt","stream":true,"stream_options":{"include_usage":true}}"#,
        );
        let request = ChatRequest::parse(&asked).expect("parsed");
        let prepared = prepare(Api::ChatCompletions, &asked, &request, "up");
        assert_eq!(prepared.answer, AnswerEdit::Rename { hide_usage: false });
        // Responses streams report usage in their last event: nothing to ask.
        let responses = Bytes::from_static(br#"{"model":"gpt","stream":true,"input":"hi"}"#);
        let request = ChatRequest::parse(&responses).expect("parsed");
        let prepared = prepare(Api::Responses, &responses, &request, "up");
        assert_eq!(prepared.path, "/responses");
        assert_eq!(
            body_of(&prepared),
            serde_json::json!({"model": "up", "stream": true, "input": "hi"})
        );
    }

    #[test]
    fn a_large_body_travels_as_the_clients_bytes() {
        let image = "A".repeat(1024 * 1024);
        let body = Bytes::from(format!(
            r#"{{"model":"gpt","user":"u","messages":[{{"role":"user","content":[{{"type":"image_url","image_url":{{"url":"data:image/png;base64,{image}"}}}}]}}]}}"#
        ));
        let request = ChatRequest::parse(&body).expect("parsed");
        let prepared = prepare(Api::ChatCompletions, &body, &request, "up");
        let image_piece = prepared
            .body
            .iter()
            .find(|piece| piece.len() > 1024 * 1024)
            .expect("the image's piece");
        // A slice of the client's buffer, not a copy of it.
        let start = image_piece.as_ptr() as usize - body.as_ptr() as usize;
        assert!(start < body.len());
        let value = body_of(&prepared);
        assert_eq!(value["model"], "up");
        assert!(value.get("user").is_none());
    }
}
