//! The Messages API translation, both ways, on requests and answers Claude Code and the
//! Anthropic SDK send and read.

use serde_json::{Value, json};

use super::*;

fn translated(request: Value) -> Value {
    let body = serde_json::to_vec(&request).expect("JSON");
    let translated = chat_request(&body, "up/model", false).unwrap_or_else(|err| panic!("{err}"));
    serde_json::from_slice(&translated.body).expect("JSON")
}

#[test]
fn system_text_images_and_tools_become_a_chat_completion() {
    let chat = translated(json!({
        "model": "claude",
        "max_tokens": 100,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "What is in it?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "x"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "look", "input": {"zoom": 2}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "a cat"}]},
                {"type": "text", "text": "And now?"},
            ]},
        ],
        "tools": [{"name": "look", "description": "Looks", "input_schema": {"type": "object", "properties": {"zoom": {"type": "integer"}}}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        "stop_sequences": ["END"],
        "top_k": 5,
        "metadata": {"user_id": "u-1"},
        "stream": true,
    }));
    assert_eq!(
        chat,
        json!({
            "model": "up/model",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [
                    {"type": "text", "text": "What is in it?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
                ]},
                {"role": "assistant", "content": "Let me look.", "tool_calls": [
                    {"id": "toolu_1", "type": "function", "function": {"name": "look", "arguments": "{\"zoom\":2}"}},
                ]},
                {"role": "tool", "tool_call_id": "toolu_1", "content": "a cat"},
                {"role": "user", "content": [{"type": "text", "text": "And now?"}]},
            ],
            "max_tokens": 100,
            "stop": ["END"],
            "tools": [{"type": "function", "function": {"name": "look", "parameters": {"type": "object", "properties": {"zoom": {"type": "integer"}}}, "description": "Looks"}}],
            "tool_choice": "required",
            "parallel_tool_calls": false,
            "stream": true,
            "stream_options": {"include_usage": true},
        })
    );
}

#[test]
fn claude_codes_system_message_stays_where_it_is_and_its_effort_is_kept() {
    // The shape of Claude Code 2.1's requests: its environment as a system message
    // after the first user turn, thinking, effort and context management.
    let request = json!({
        "model": "claude",
        "max_tokens": 32000,
        "system": [{"type": "text", "text": "You are Claude Code."}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Make a file."}]},
            {"role": "system", "content": [{"type": "text", "text": "<env>cwd: /w</env>"}]},
        ],
        "thinking": {"type": "enabled", "budget_tokens": 31999},
        "output_config": {"effort": "medium"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015"}]},
    });
    let body = serde_json::to_vec(&request).expect("JSON");
    let chat = |takes_reasoning| -> Value {
        let translated = chat_request_for(&body, "up/model", false, takes_reasoning)
            .unwrap_or_else(|err| panic!("{err}"));
        serde_json::from_slice(&translated.body).expect("JSON")
    };
    let with = chat(true);
    assert_eq!(
        with["messages"],
        json!([
            {"role": "system", "content": "You are Claude Code."},
            {"role": "user", "content": [{"type": "text", "text": "Make a file."}]},
            {"role": "system", "content": "<env>cwd: /w</env>"},
        ])
    );
    assert_eq!(with["reasoning_effort"], "medium");
    assert!(chat(false).get("reasoning_effort").is_none());
    let count = chat_request(&body, "up/model", true).expect("count_tokens translated");
    let count: Value = serde_json::from_slice(&count.body).expect("JSON");
    assert_eq!(count["messages"][2]["role"], "system");
}

#[test]
fn what_cannot_be_translated_is_named() {
    for (request, field) in [
        (json!({"model": "m"}), "`messages`"),
        (
            json!({"model": "m", "messages": [{"role": "developer", "content": "x"}]}),
            "`messages[0].role`",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "server_tool_use"}]}]}),
            "`messages[0].content[0].type`",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}]}),
            "`messages[0].content[0].source.type`",
        ),
        (
            json!({"model": "m", "messages": [], "tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
            "`tools[0].type`",
        ),
        (
            json!({"model": "m", "messages": [], "tool_choice": {"type": "maybe"}}),
            "`tool_choice.type`",
        ),
    ] {
        let body = serde_json::to_vec(&request).expect("JSON");
        let err = chat_request(&body, "up", false).expect_err("refused");
        assert!(err.contains(field), "{field}: {err}");
    }
}

#[test]
fn an_answer_becomes_a_message() {
    let chat = json!({
        "id": "chatcmpl-1",
        "model": "up/model",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Looking.",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "look", "arguments": "{\"zoom\":2}"}}],
        }}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37, "prompt_tokens_details": {"cached_tokens": 10}},
    });
    let message = message(&serde_json::to_vec(&chat).expect("JSON"), "claude")
        .map(|body| serde_json::from_slice::<Value>(&body).expect("JSON"));
    assert_eq!(
        message,
        Some(json!({
            "id": "msg_chatcmpl-1",
            "type": "message",
            "role": "assistant",
            "model": "claude",
            "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "call_1", "name": "look", "input": {"zoom": 2}},
            ],
            "stop_reason": "tool_use",
            "stop_sequence": null,
            "usage": {"input_tokens": 20, "output_tokens": 7, "cache_read_input_tokens": 10},
        }))
    );
}

#[test]
fn errors_take_anthropics_shape() {
    let body = error(
        429,
        br#"{"error":{"message":"slow down","type":"rate_limit"}}"#,
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&body).expect("JSON"),
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
    );
}
