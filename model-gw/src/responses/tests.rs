//! The Responses bridge against what Codex sends and what a chat completion upstream
//! streams, both recorded (`tests/fixtures/coding_agents/`).

use serde_json::{Value, json};

use super::stream::ResponsesTranslator;
use super::*;

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/../tests/fixtures/coding_agents/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path}: {err}"))
}

/// The events of a translated stream, as (type, data).
fn events(out: &[u8]) -> Vec<(String, Value)> {
    String::from_utf8_lossy(out)
        .split("\n\n")
        .filter(|event| !event.trim().is_empty())
        .map(|event| {
            let mut lines = event.lines();
            let kind = lines.next().and_then(|line| line.strip_prefix("event: "));
            let data = lines.next().and_then(|line| line.strip_prefix("data: "));
            let data: Value = serde_json::from_str(data.expect("data")).expect("JSON");
            assert_eq!(data["type"], kind.expect("event"));
            (kind.expect("event").to_owned(), data)
        })
        .collect()
}

#[test]
fn codexs_request_becomes_a_chat_completion_with_its_calls_and_their_outputs() {
    let body = fixture("codex_responses_request.json");
    let translated = chat_request(body.as_bytes(), "up/model", true).expect("translated");
    assert!(translated.stream);
    let chat: Value = serde_json::from_slice(&translated.body).expect("JSON");
    assert_eq!(chat["model"], "up/model");
    assert_eq!(chat["stream_options"], json!({"include_usage": true}));
    let roles: Vec<&str> = chat["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|message| message["role"].as_str())
        .collect();
    assert_eq!(roles.first(), Some(&"system"), "{roles:?}");
    assert_eq!(&roles[roles.len() - 2..], ["assistant", "tool"]);
    let messages = chat["messages"].as_array().expect("messages");
    let call = &messages[messages.len() - 2]["tool_calls"][0];
    let output = &messages[messages.len() - 1];
    assert_eq!(call["function"]["name"], "exec_command");
    assert_eq!(output["tool_call_id"], call["id"]);
    // Functions only: a chat completion upstream cannot run web search.
    let tools = chat["tools"].as_array().expect("tools");
    assert!(
        tools
            .iter()
            .any(|tool| tool["function"]["name"] == "exec_command")
    );
    assert!(tools.iter().all(|tool| tool["type"] == "function"));
}

#[test]
fn a_previous_response_id_is_refused_with_the_way_out() {
    let err = chat_request(
        br#"{"model":"m","input":"hi","previous_response_id":"resp_1"}"#,
        "up",
        false,
    )
    .expect_err("refused");
    assert!(err.contains("previous_response_id"), "{err}");
    assert!(err.contains("whole conversation"), "{err}");
}

#[test]
fn a_streamed_tool_call_becomes_the_responses_events_in_order() {
    let mut translator = ResponsesTranslator::new("agent");
    let stream = fixture("chat_exec_command_call.sse");
    let mut out = Vec::new();
    // Cut anywhere: the same events.
    for piece in stream.as_bytes().chunks(7) {
        out.extend(translator.push(piece));
    }
    out.extend(translator.finish());
    assert!(translator.ended());
    let events = events(&out);
    let kinds: Vec<&str> = events.iter().map(|(kind, _)| kind.as_str()).collect();
    let deltas = kinds
        .iter()
        .filter(|kind| **kind == "response.function_call_arguments.delta")
        .count();
    assert!(deltas > 1, "{kinds:?}");
    let mut expected = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
    ];
    expected.extend(std::iter::repeat_n(
        "response.function_call_arguments.delta",
        deltas,
    ));
    expected.extend([
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(kinds, expected);
    for (number, (_, data)) in events.iter().enumerate() {
        assert_eq!(data["sequence_number"], number as u64);
    }
    let (_, completed) = events.last().expect("events");
    let item = &completed["response"]["output"][0];
    assert_eq!(item["type"], "function_call");
    assert_eq!(item["name"], "exec_command");
    assert_eq!(item["arguments"], r#"{"cmd":"echo hello > made.txt"}"#);
    assert_eq!(completed["response"]["model"], "agent");
    assert_eq!(completed["response"]["usage"]["input_tokens"], 2712);
    assert_eq!(
        translator.usage.and_then(|usage| usage.total_tokens),
        Some(2743)
    );
}

#[test]
fn reasoning_then_text_stream_as_a_summary_and_a_message() {
    let mut translator = ResponsesTranslator::new("agent");
    let chunks = [
        json!({"id": "c1", "created": 5, "choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": "Think"}}]}),
        json!({"id": "c1", "choices": [{"index": 0, "delta": {"reasoning_content": "ing."}}]}),
        json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "Done"}}]}),
        json!({"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),
    ];
    let mut out = Vec::new();
    for chunk in chunks {
        out.extend(translator.push(format!("data: {chunk}\n\n").as_bytes()));
    }
    out.extend(translator.push(b"data: [DONE]\n\n"));
    let events = events(&out);
    let kinds: Vec<&str> = events.iter().map(|(kind, _)| kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.reasoning_summary_part.added",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.done",
            "response.reasoning_summary_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.incomplete",
        ]
    );
    let (_, last) = events.last().expect("events");
    assert_eq!(
        last["response"]["output"][0]["summary"][0]["text"],
        "Thinking."
    );
    assert_eq!(last["response"]["output"][1]["content"][0]["text"], "Done");
    assert_eq!(
        last["response"]["output"][1]["id"],
        events[9].1["item"]["id"]
    );
}

#[test]
fn a_whole_answer_becomes_a_response() {
    let chat = json!({
        "id": "c1", "created": 7,
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "exec_command", "arguments": "{\"cmd\":\"ls\"}"}}]}}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37},
    });
    let response =
        response(&serde_json::to_vec(&chat).expect("JSON"), "agent").expect("a response");
    let response: Value = serde_json::from_slice(&response).expect("JSON");
    assert_eq!(response["id"], "resp_c1");
    assert_eq!(response["status"], "completed");
    assert_eq!(response["model"], "agent");
    assert_eq!(
        response["output"][0],
        json!({"id": "fc_c1_0", "type": "function_call", "status": "completed", "call_id": "call_1", "name": "exec_command", "arguments": "{\"cmd\":\"ls\"}"})
    );
    assert_eq!(response["usage"]["total_tokens"], 37);
}

mod properties {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::events;
    use crate::responses::stream::ResponsesTranslator;

    /// One chat completion chunk's delta: reasoning, text, or a piece of a tool call.
    fn delta() -> impl Strategy<Value = Value> {
        prop_oneof![
            "[a-z ]{0,8}".prop_map(|text| json!({"reasoning_content": text})),
            "[a-z ]{0,8}".prop_map(|text| json!({"content": text})),
            (0_u64..3, "[a-z{}\":]{0,8}").prop_map(|(index, arguments)| json!({"tool_calls": [
                {"index": index, "id": format!("call_{index}"), "function": {"name": "f", "arguments": arguments}}
            ]})),
        ]
    }

    fn stream() -> impl Strategy<Value = (Vec<u8>, usize)> {
        (
            prop::collection::vec(delta(), 0..12),
            prop::option::of(prop_oneof![Just("stop"), Just("length"), Just("tool_calls")]),
            any::<bool>(),
            any::<prop::sample::Index>(),
        )
            .prop_map(|(deltas, finish, done, cut)| {
                let mut text = String::new();
                for delta in deltas {
                    let chunk = json!({"id": "c", "created": 1, "choices": [{"index": 0, "delta": delta}]});
                    text.push_str(&format!("data: {chunk}\n\n"));
                }
                if let Some(reason) = finish {
                    let chunk = json!({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]});
                    text.push_str(&format!("data: {chunk}\n\n"));
                }
                if done {
                    text.push_str("data: [DONE]\n\n");
                }
                let cut = cut.index(text.len() + 1);
                (text.into_bytes(), cut)
            })
    }

    fn translated(pieces: &[&[u8]]) -> Vec<u8> {
        let mut translator = ResponsesTranslator::new("asked");
        let mut out = Vec::new();
        for piece in pieces {
            out.extend(translator.push(piece));
        }
        out.extend(translator.finish());
        out
    }

    proptest! {
        /// However the upstream's stream is cut, the same events: numbered from 0, one
        /// final event, items opened and closed in turn, and the final response holding
        /// each item as its `done` event said it.
        #[test]
        fn any_stream_becomes_well_formed_events((stream, cut) in stream()) {
            let whole = translated(&[&stream]);
            let (head, tail) = stream.split_at(cut);
            prop_assert_eq!(&translated(&[head, tail]), &whole);
            let events = events(&whole);
            let mut done_items = Vec::new();
            let mut open = None;
            for (number, (kind, data)) in events.iter().enumerate() {
                prop_assert_eq!(&data["sequence_number"], &json!(number));
                match kind.as_str() {
                    "response.output_item.added" => {
                        prop_assert!(open.is_none());
                        prop_assert_eq!(&data["output_index"], &json!(done_items.len()));
                        open = Some(done_items.len());
                    }
                    "response.output_item.done" => {
                        prop_assert_eq!(data["output_index"].as_u64(), open.map(|index| index as u64));
                        done_items.push(data["item"].clone());
                        open = None;
                    }
                    _ => {}
                }
            }
            let (last, final_event) = events.last().expect("events");
            prop_assert!(last == "response.completed" || last == "response.incomplete");
            prop_assert!(open.is_none());
            prop_assert_eq!(&final_event["response"]["output"], &json!(done_items));
        }
    }
}
