//! The model gateway's only edits to bodies: the request's `model` (and `user`) on the
//! way up, the answer's `model` on the way back, whole or as a stream of events.

use std::borrow::Cow;

use sandgate_model_gw::{ChatRequest, SseRenamer, rename_model};
use serde_json::{Map, Value};

/// Upstream model names: a routed one, and one every JSON escape is needed for.
const UPSTREAM_MODELS: [&str; 2] = ["claude-sonnet", "q\"\\/\u{1}\u{7f}é\u{2028}😀"];

/// The name the client asked for, written into answers.
const ASKED_MODEL: &str = "claude \"asked\"";

/// A client's chat completion request, as `POST /v1/chat/completions` reads and forwards
/// it.
pub fn chat_request(data: &[u8]) {
    let Ok(request) = ChatRequest::parse(data) else {
        return;
    };
    let input = json_object(data);
    for upstream in UPSTREAM_MODELS {
        let body = request.upstream_body(upstream);
        let again = ChatRequest::parse(&body).unwrap_or_else(|err| {
            panic!(
                "the upstream body does not parse: {err}: {}",
                String::from_utf8_lossy(&body)
            )
        });
        assert_eq!(again.model, upstream);
        assert_eq!(again.user, None, "`user` was forwarded");
        assert_eq!(
            again.upstream_body(upstream),
            body,
            "rewriting is not idempotent"
        );
        // Whatever a JSON reader makes of the two bodies, they differ only in `model` and
        // `user`, members in the same order.
        if let Some(input) = &input {
            let mut expected = input.clone();
            expected.shift_remove("user");
            expected.insert("model".to_owned(), Value::from(upstream));
            assert_object(&body, expected, "the upstream body", "model and user");
        }
    }
}

/// An upstream's answer: the first byte picks where the stream is cut, the rest is both a
/// whole response body and a server-sent event stream.
pub fn upstream_answer(data: &[u8]) {
    let Some((&cut, answer)) = data.split_first() else {
        return;
    };
    whole_answer(answer);
    let whole = renamed_stream(&[answer]);
    let at = usize::from(cut) * answer.len() / usize::from(u8::MAX);
    let (head, tail) = answer.split_at(at);
    assert_eq!(
        renamed_stream(&[head, tail]),
        whole,
        "cutting the stream at {at} changed the output"
    );
    if answer.len() <= 4096 {
        let bytes: Vec<&[u8]> = answer.chunks(1).collect();
        assert_eq!(
            renamed_stream(&bytes),
            whole,
            "a byte at a time changed the output"
        );
    }
}

/// `rename_model` sets `model` and changes nothing else; its own output needs no edit.
fn whole_answer(answer: &[u8]) {
    let (renamed, usage) = rename_model(answer, ASKED_MODEL);
    let Cow::Owned(renamed) = renamed else {
        return;
    };
    let (again, usage_again) = rename_model(&renamed, ASKED_MODEL);
    assert!(
        matches!(again, Cow::Borrowed(_)),
        "the renamed answer was renamed again"
    );
    assert_eq!(usage_again, usage, "renaming changed the usage");
    if let Some(input) = json_object(answer) {
        let mut expected = input;
        expected.insert("model".to_owned(), Value::from(ASKED_MODEL));
        assert_object(&renamed, expected, "the renamed answer", "model");
    }
}

/// The stream renamer's output and last usage for `chunks` as they arrive.
fn renamed_stream(chunks: &[&[u8]]) -> (Vec<u8>, Option<sandgate_model_gw::Usage>) {
    let mut renamer = SseRenamer::new(ASKED_MODEL);
    let mut out = Vec::new();
    for chunk in chunks {
        out.extend(renamer.push(chunk));
    }
    out.extend(renamer.finish());
    (out, renamer.usage)
}

/// `data` as a JSON object, if it is one (and nests at most serde_json's 128 levels: the
/// comparisons skip deeper bodies rather than recurse without bound).
/// `output` is the JSON object `expected`, member order included: the rewrite called
/// `what` changed nothing but `allowed`.
fn assert_object(output: &[u8], expected: Map<String, Value>, what: &str, allowed: &str) {
    let output_object = json_object(output).unwrap_or_else(|| {
        panic!(
            "{what} is not a JSON object: {}",
            String::from_utf8_lossy(output)
        )
    });
    assert_eq!(
        Value::Object(output_object).to_string(),
        Value::Object(expected).to_string(),
        "{what} changed more than {allowed}"
    );
}

fn json_object(data: &[u8]) -> Option<Map<String, Value>> {
    match serde_json::from_slice(data).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}
