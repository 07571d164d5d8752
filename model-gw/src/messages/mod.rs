//! Anthropic's Messages API (`/v1/messages`) over an OpenAI-compatible upstream, which
//! speaks chat completions only: the request is translated to a chat completion, and its
//! answer back to a message (whole here, streamed in [`stream`]).
//!
//! What is translated: the system prompt; text, image (base64 and URL) and document
//! (base64 PDF) blocks; tool definitions, `tool_choice` and parallel tool use; tool use
//! and tool results (results become `tool` messages right after the assistant's call, as
//! chat completions need them); `max_tokens`, `stop_sequences`, `temperature`, `top_p`,
//! `metadata.user_id`; stop reasons and usage (cache reads included). What has no chat
//! completion equivalent is left out: `top_k`, `thinking` and thinking blocks (a model
//! behind an OpenAI-compatible API reasons, or not, on its own settings), `cache_control`
//! marks. Server tools (web search, code execution) and blocks this gateway does not know
//! are refused, naming the field. LiteLLM's adapter (`litellm/llms/anthropic/
//! experimental_pass_through/adapters/`) was the reference for the choices made.

pub mod stream;

use serde_json::{Map, Value, json};

/// A translated request: the chat completion body, and what the answer's translation and
/// the spend log need.
#[derive(Debug)]
pub struct Translated {
    pub body: Vec<u8>,
    pub stream: bool,
}

/// Where in the request a value is, for errors: `messages[2].content[0].source`.
fn at(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn text_of<'v>(value: &'v Value, path: &str) -> Result<&'v str, String> {
    value
        .as_str()
        .ok_or_else(|| format!("`{path}` must be a string"))
}

/// Text blocks (a system prompt, a tool result's content) as one string.
fn joined_text(value: &Value, path: &str) -> Result<String, String> {
    match value {
        Value::String(text) => Ok(text.clone()),
        Value::Array(blocks) => {
            let mut texts = Vec::with_capacity(blocks.len());
            for (index, block) in blocks.iter().enumerate() {
                let path = format!("{path}[{index}]");
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => texts.push(text_of(&block["text"], &at(&path, "text"))?),
                    _ => return Err(format!("`{path}` must be a text block")),
                }
            }
            Ok(texts.join("\n"))
        }
        Value::Null => Ok(String::new()),
        _ => Err(format!(
            "`{path}` must be a string or a list of text blocks"
        )),
    }
}

/// An image or document block as a chat completion content part.
fn media_part(block: &Value, path: &str) -> Result<Value, String> {
    let source = &block["source"];
    let source_path = at(path, "source");
    let url = match source.get("type").and_then(Value::as_str) {
        Some("base64") => {
            let media_type = text_of(&source["media_type"], &at(&source_path, "media_type"))?;
            let data = text_of(&source["data"], &at(&source_path, "data"))?;
            format!("data:{media_type};base64,{data}")
        }
        Some("url") => text_of(&source["url"], &at(&source_path, "url"))?.to_owned(),
        _ => {
            return Err(format!(
                "`{source_path}.type` must be \"base64\" or \"url\""
            ));
        }
    };
    Ok(match block["type"].as_str() {
        Some("document") => json!({ "type": "file", "file": { "file_data": url } }),
        _ => json!({ "type": "image_url", "image_url": { "url": url } }),
    })
}

/// A user turn: its tool results as `tool` messages first, then the rest as one user
/// message.
fn user_messages(content: &Value, path: &str, out: &mut Vec<Value>) -> Result<(), String> {
    let blocks = match content {
        Value::String(text) => {
            out.push(json!({ "role": "user", "content": text }));
            return Ok(());
        }
        Value::Array(blocks) => blocks,
        _ => return Err(format!("`{path}` must be a string or a list of blocks")),
    };
    let mut parts = Vec::new();
    // Images a tool returned: a `tool` message holds text only, so they follow in the
    // user message.
    let mut tool_media = Vec::new();
    for (index, block) in blocks.iter().enumerate() {
        let path = format!("{path}[{index}]");
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = text_of(&block["text"], &at(&path, "text"))?;
                parts.push(json!({ "type": "text", "text": text }));
            }
            Some("image" | "document") => parts.push(media_part(block, &path)?),
            Some("tool_result") => {
                let id = text_of(&block["tool_use_id"], &at(&path, "tool_use_id"))?;
                let mut texts = Vec::new();
                match &block["content"] {
                    Value::Array(items) => {
                        for (item_index, item) in items.iter().enumerate() {
                            let item_path = format!("{path}.content[{item_index}]");
                            match item.get("type").and_then(Value::as_str) {
                                Some("text") => texts.push(
                                    text_of(&item["text"], &at(&item_path, "text"))?.to_owned(),
                                ),
                                Some("image" | "document") => {
                                    tool_media.push(media_part(item, &item_path)?);
                                }
                                _ => {
                                    return Err(format!(
                                        "`{item_path}` must be a text, image or document block"
                                    ));
                                }
                            }
                        }
                    }
                    other => texts.push(joined_text(other, &at(&path, "content"))?),
                }
                let mut text = texts.join("\n");
                if block["is_error"] == Value::Bool(true) {
                    text = format!("Error: {text}");
                }
                out.push(json!({ "role": "tool", "tool_call_id": id, "content": text }));
            }
            Some(other) => {
                return Err(format!(
                    "`{path}.type` {other:?} is not supported on a translated model"
                ));
            }
            None => return Err(format!("`{path}.type` is required")),
        }
    }
    tool_media.extend(parts);
    if !tool_media.is_empty() {
        out.push(json!({ "role": "user", "content": tool_media }));
    }
    Ok(())
}

/// An assistant turn: its text, and its tool uses as tool calls.
fn assistant_message(content: &Value, path: &str) -> Result<Value, String> {
    let blocks = match content {
        Value::String(text) => return Ok(json!({ "role": "assistant", "content": text })),
        Value::Array(blocks) => blocks,
        _ => return Err(format!("`{path}` must be a string or a list of blocks")),
    };
    let mut text = String::new();
    let mut calls = Vec::new();
    for (index, block) in blocks.iter().enumerate() {
        let path = format!("{path}[{index}]");
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(text_of(&block["text"], &at(&path, "text"))?),
            Some("tool_use") => {
                let id = text_of(&block["id"], &at(&path, "id"))?;
                let name = text_of(&block["name"], &at(&path, "name"))?;
                let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                calls.push(json!({
                    "id": id,
                    "type": "function",
                    "function": { "name": name, "arguments": input.to_string() },
                }));
            }
            // The model's reasoning of an earlier turn: not an input a chat completion
            // takes.
            Some("thinking" | "redacted_thinking") => {}
            Some(other) => {
                return Err(format!(
                    "`{path}.type` {other:?} is not supported on a translated model"
                ));
            }
            None => return Err(format!("`{path}.type` is required")),
        }
    }
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { Value::String(text) },
    });
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    Ok(message)
}

fn tools(tools: &Value) -> Result<Vec<Value>, String> {
    let Value::Array(tools) = tools else {
        return Err("`tools` must be a list".to_owned());
    };
    tools
        .iter()
        .enumerate()
        .map(|(index, tool)| {
            let path = format!("tools[{index}]");
            match tool.get("type").and_then(Value::as_str) {
                None | Some("custom") => {}
                Some(other) => {
                    return Err(format!(
                        "`{path}.type` {other:?}: server tools are not supported on a translated model"
                    ));
                }
            }
            let name = text_of(&tool["name"], &at(&path, "name"))?;
            let mut function = json!({
                "name": name,
                "parameters": tool.get("input_schema").cloned().unwrap_or_else(|| json!({"type": "object"})),
            });
            if let Some(description) = tool.get("description").and_then(Value::as_str) {
                function["description"] = description.into();
            }
            Ok(json!({ "type": "function", "function": function }))
        })
        .collect()
}

/// `tool_choice`, and whether parallel tool use is off.
fn tool_choice(choice: &Value) -> Result<(Value, bool), String> {
    let parallel_off = choice["disable_parallel_tool_use"] == Value::Bool(true);
    let translated = match choice.get("type").and_then(Value::as_str) {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => {
            let name = text_of(&choice["name"], "tool_choice.name")?;
            json!({ "type": "function", "function": { "name": name } })
        }
        _ => {
            return Err(
                "`tool_choice.type` must be \"auto\", \"any\", \"tool\" or \"none\"".to_owned(),
            );
        }
    };
    Ok((translated, parallel_off))
}

/// The chat completion a Messages API request asks for, with `model` set to
/// `upstream_model`; the error names the field that cannot be translated. With
/// `count_tokens` (a `/v1/messages/count_tokens` request), a one-token completion whose
/// usage says how many input tokens the upstream counts: an OpenAI-compatible API has no
/// token counting of its own, and the upstream's tokenizer is the one that matters.
pub fn chat_request(
    body: &[u8],
    upstream_model: &str,
    count_tokens: bool,
) -> Result<Translated, String> {
    let request: Map<String, Value> = serde_json::from_slice(body)
        .map_err(|err| format!("the request body is not a JSON object: {err}"))?;
    let mut messages = Vec::new();
    if let Some(system) = request.get("system") {
        let system = joined_text(system, "system")?;
        if !system.is_empty() {
            messages.push(json!({ "role": "system", "content": system }));
        }
    }
    let Some(Value::Array(turns)) = request.get("messages") else {
        return Err("`messages` is required, a list".to_owned());
    };
    for (index, turn) in turns.iter().enumerate() {
        let path = format!("messages[{index}]");
        let content = &turn["content"];
        let content_path = at(&path, "content");
        match turn.get("role").and_then(Value::as_str) {
            Some("user") => user_messages(content, &content_path, &mut messages)?,
            Some("assistant") => messages.push(assistant_message(content, &content_path)?),
            _ => return Err(format!("`{path}.role` must be \"user\" or \"assistant\"")),
        }
    }
    let stream = !count_tokens && request.get("stream") == Some(&Value::Bool(true));
    let mut chat = Map::new();
    chat.insert("model".into(), upstream_model.into());
    chat.insert("messages".into(), Value::Array(messages));
    for (from, to) in [
        ("max_tokens", "max_tokens"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("stop_sequences", "stop"),
    ] {
        if let Some(value) = request.get(from).filter(|value| !value.is_null()) {
            chat.insert(to.into(), value.clone());
        }
    }
    if let Some(list) = request.get("tools").filter(|value| !value.is_null()) {
        chat.insert("tools".into(), Value::Array(tools(list)?));
    }
    if let Some(choice) = request.get("tool_choice").filter(|value| !value.is_null()) {
        let (choice, parallel_off) = tool_choice(choice)?;
        chat.insert("tool_choice".into(), choice);
        if parallel_off {
            chat.insert("parallel_tool_calls".into(), Value::Bool(false));
        }
    }
    if count_tokens {
        chat.insert("max_tokens".into(), 1.into());
    }
    if stream {
        chat.insert("stream".into(), Value::Bool(true));
        chat.insert("stream_options".into(), json!({ "include_usage": true }));
    }
    Ok(Translated {
        body: serde_json::to_vec(&chat).unwrap_or_default(),
        stream,
    })
}

/// The `user` a Messages API request names (`metadata.user_id`), for the spend log.
pub fn user(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Request {
        metadata: Option<Metadata>,
    }
    #[derive(serde::Deserialize)]
    struct Metadata {
        user_id: Option<String>,
    }
    serde_json::from_slice::<Request>(body)
        .ok()?
        .metadata?
        .user_id
}

/// A chat completion's `finish_reason` as a message's `stop_reason`.
pub fn stop_reason(finish_reason: &str) -> &'static str {
    match finish_reason {
        "length" => "max_tokens",
        "tool_calls" | "function_call" => "tool_use",
        "content_filter" => "refusal",
        _ => "end_turn",
    }
}

/// A chat completion's `usage` as a message's: the input tokens without the cache reads,
/// which Anthropic counts apart.
pub fn usage(usage: &Value) -> Value {
    let prompt = usage["prompt_tokens"].as_u64().unwrap_or(0);
    let cached = usage["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    let mut translated = json!({
        "input_tokens": prompt.saturating_sub(cached),
        "output_tokens": usage["completion_tokens"].as_u64().unwrap_or(0),
    });
    if cached > 0 {
        translated["cache_read_input_tokens"] = cached.into();
    }
    translated
}

/// A tool call's arguments as a tool use's input: an object, or `{}` when the model wrote
/// something else.
fn tool_input(arguments: &Value) -> Value {
    arguments
        .as_str()
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}))
}

/// A whole chat completion answer as a message named `model`.
pub fn message(chat: &[u8], model: &str) -> Option<Vec<u8>> {
    let chat: Value = serde_json::from_slice(chat).ok()?;
    let choice = &chat["choices"][0];
    let answer = &choice["message"];
    let mut content = Vec::new();
    if let Some(text) = answer["content"].as_str().filter(|text| !text.is_empty()) {
        content.push(json!({ "type": "text", "text": text }));
    }
    for call in answer["tool_calls"].as_array().into_iter().flatten() {
        content.push(json!({
            "type": "tool_use",
            "id": call["id"],
            "name": call["function"]["name"],
            "input": tool_input(&call["function"]["arguments"]),
        }));
    }
    let id = chat["id"].as_str().unwrap_or_default();
    let message = json!({
        "id": if id.starts_with("msg_") { id.to_owned() } else { format!("msg_{id}") },
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(choice["finish_reason"].as_str().unwrap_or("stop")),
        "stop_sequence": Value::Null,
        "usage": usage(&chat["usage"]),
    });
    serde_json::to_vec(&message).ok()
}

/// A one-token chat completion's answer as a `count_tokens` answer.
pub fn token_count(chat: &[u8]) -> Option<Vec<u8>> {
    let chat: Value = serde_json::from_slice(chat).ok()?;
    let input_tokens = chat["usage"]["prompt_tokens"].as_u64()?;
    serde_json::to_vec(&json!({ "input_tokens": input_tokens })).ok()
}

/// An error answer (an OpenAI error object, or any body) in Anthropic's shape.
pub fn error(status: u16, body: &[u8]) -> Vec<u8> {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|body| {
            body["error"]["message"]
                .as_str()
                .or_else(|| body["error"].as_str())
                .or_else(|| body["detail"].as_str())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(2000).collect());
    serde_json::to_vec(&json!({
        "type": "error",
        "error": {
            "type": sandgate_proto::models::anthropic_error_type(status),
            "message": message,
        },
    }))
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn translated(request: Value) -> Value {
        let body = serde_json::to_vec(&request).expect("JSON");
        let translated =
            chat_request(&body, "up/model", false).unwrap_or_else(|err| panic!("{err}"));
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
    fn what_cannot_be_translated_is_named() {
        for (request, field) in [
            (json!({"model": "m"}), "`messages`"),
            (
                json!({"model": "m", "messages": [{"role": "system", "content": "x"}]}),
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
}
