//! OpenAI's Responses API (`/v1/responses`) over an upstream that serves chat completions
//! only (vLLM, Ollama, many OpenAI-compatible gateways): an `openai/` entry with
//! `responses_api: chat` gets Responses calls translated to a chat completion, and its
//! answer back (whole here, streamed in [`stream`]). Codex 0.171 speaks nothing else.
//! The setting is per entry, not detected: a probe would cost a call, and an upstream's
//! 404 for `/responses` cannot be told from a 404 for an unknown model.
//!
//! What is translated: `instructions` (a system message first); `input` as a string or
//! items: messages of every role (`developer` as `system`), text and image parts,
//! `function_call` items as an assistant's tool calls and `function_call_output` items as
//! `tool` messages; function tools, `tool_choice`, `parallel_tool_calls`,
//! `max_output_tokens`, `temperature`, `top_p`, and `reasoning.effort` as
//! `reasoning_effort` where the entry's model takes it. Answers: text, tool calls, the
//! upstream's reasoning (`reasoning_content`, or `reasoning`) as a reasoning item's
//! summary, usage, `length` as an incomplete response. Left out, named at debug level:
//! reasoning items of earlier turns, tools other than functions (`web_search`, …) that
//! a chat completion upstream cannot run, `store`, `include`, `prompt_cache_key`, `text`.
//! `previous_response_id` is refused: the gateway keeps no conversation, and a client
//! that sends the whole conversation each turn (as Codex does, `store: false`) needs none.

pub mod stream;

use serde::Serialize;
use serde_json_borrow::Value;

use crate::sse::chat_stream::reasoning_of;

/// A translated request: the chat completion body, and whether it streams.
#[derive(Debug)]
pub struct Translated {
    pub body: Vec<u8>,
    pub stream: bool,
    pub user: Option<String>,
}

/// The request's fields the translation reads; the rest are dropped (logged at debug).
const TRANSLATED: &[&str] = &[
    "model",
    "instructions",
    "input",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_output_tokens",
    "temperature",
    "top_p",
    "reasoning",
    "stream",
    "user",
];

#[derive(Serialize)]
struct ChatBody<'a> {
    model: &'a str,
    messages: Vec<serde_json::Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<serde_json::Value>,
}

/// A message's content (a string, or parts) as a chat completion's: text parts joined
/// when there is no image, parts otherwise.
fn content(value: &Value, path: &str) -> Result<serde_json::Value, String> {
    let parts = match value {
        Value::Str(text) => return Ok(serde_json::Value::from(text.as_ref())),
        Value::Array(parts) => parts,
        Value::Null => return Ok(serde_json::Value::from("")),
        _ => return Err(format!("`{path}` must be a string or a list of parts")),
    };
    let mut texts = Vec::new();
    let mut chat_parts = Vec::new();
    for (index, part) in parts.iter().enumerate() {
        match part.get("type").as_str() {
            Some("input_text" | "output_text" | "text" | "refusal") => {
                let text = part
                    .get("text")
                    .as_str()
                    .or_else(|| part.get("refusal").as_str())
                    .ok_or_else(|| format!("`{path}[{index}].text` must be a string"))?;
                texts.push(text);
                chat_parts.push(serde_json::json!({"type": "text", "text": text}));
            }
            Some("input_image") => {
                let url = part.get("image_url").as_str().ok_or_else(|| {
                    format!("`{path}[{index}].image_url` must be a URL (file ids are not supported on a bridged model)")
                })?;
                chat_parts
                    .push(serde_json::json!({"type": "image_url", "image_url": {"url": url}}));
            }
            other => {
                return Err(format!(
                    "`{path}[{index}].type` {other:?} is not supported on a model bridged to chat completions"
                ));
            }
        }
    }
    if chat_parts.len() == texts.len() {
        Ok(serde_json::Value::from(texts.concat()))
    } else {
        Ok(serde_json::Value::Array(chat_parts))
    }
}

/// The input items as chat messages: consecutive function calls are one assistant
/// message's tool calls (after the assistant's text of the same turn, if any).
fn input_messages(input: &Value, messages: &mut Vec<serde_json::Value>) -> Result<(), String> {
    let items = match input {
        Value::Str(text) => {
            messages.push(serde_json::json!({"role": "user", "content": text.as_ref()}));
            return Ok(());
        }
        Value::Array(items) => items,
        _ => return Err("`input` must be a string or a list of items".to_owned()),
    };
    // Whether the last message is an assistant's that tool calls may join.
    let mut open_assistant = false;
    for (index, item) in items.iter().enumerate() {
        let path = format!("input[{index}]");
        let kind = item.get("type").as_str();
        match kind {
            Some("message") | None if !item.get("role").is_null() => {
                let role = match item.get("role").as_str() {
                    Some("developer" | "system") => "system",
                    Some("user") => "user",
                    Some("assistant") => "assistant",
                    other => return Err(format!("`{path}.role` {other:?} is not a role")),
                };
                let content = content(item.get("content"), &format!("{path}.content"))?;
                messages.push(serde_json::json!({"role": role, "content": content}));
                open_assistant = role == "assistant";
            }
            Some("function_call") => {
                let call = serde_json::json!({
                    "id": item.get("call_id").as_str().ok_or_else(|| format!("`{path}.call_id` must be a string"))?,
                    "type": "function",
                    "function": {
                        "name": item.get("name").as_str().ok_or_else(|| format!("`{path}.name` must be a string"))?,
                        "arguments": item.get("arguments").as_str().unwrap_or("{}"),
                    },
                });
                match messages.last_mut() {
                    Some(last) if open_assistant => {
                        if let Some(calls) = last
                            .as_object_mut()
                            .map(|last| {
                                last.entry("tool_calls")
                                    .or_insert_with(|| serde_json::json!([]))
                            })
                            .and_then(serde_json::Value::as_array_mut)
                        {
                            calls.push(call);
                        }
                    }
                    _ => {
                        messages.push(serde_json::json!({"role": "assistant", "content": null, "tool_calls": [call]}));
                        open_assistant = true;
                    }
                }
            }
            Some("function_call_output") => {
                let id = item
                    .get("call_id")
                    .as_str()
                    .ok_or_else(|| format!("`{path}.call_id` must be a string"))?;
                let output = match item.get("output") {
                    Value::Str(text) => serde_json::Value::from(text.as_ref()),
                    other => content(other, &format!("{path}.output"))?,
                };
                messages.push(
                    serde_json::json!({"role": "tool", "tool_call_id": id, "content": output}),
                );
                open_assistant = false;
            }
            // The model's reasoning of an earlier turn: not an input a chat completion
            // takes.
            Some("reasoning") => {
                tracing::debug!(item = %path, "a reasoning item is left out of the chat completion");
            }
            other => {
                return Err(format!(
                    "`{path}.type` {other:?} is not supported on a model bridged to chat completions"
                ));
            }
        }
    }
    Ok(())
}

/// Function tools as chat completion tools; the others are dropped (said at debug).
fn tools(tools: &Value) -> Vec<serde_json::Value> {
    let mut translated = Vec::new();
    for tool in tools.as_array().into_iter().flatten() {
        match (tool.get("type").as_str(), tool.get("name").as_str()) {
            (Some("function"), Some(name)) => {
                let mut function = serde_json::json!({"name": name});
                for key in ["description", "parameters", "strict"] {
                    let value = tool.get(key);
                    if !value.is_null() {
                        function[key] = serde_json::to_value(value).unwrap_or_default();
                    }
                }
                translated.push(serde_json::json!({"type": "function", "function": function}));
            }
            (kind, _) => tracing::debug!(
                tool = kind.unwrap_or("(none)"),
                "a tool other than a function is left out: a chat completion upstream cannot run it"
            ),
        }
    }
    translated
}

fn tool_choice(choice: &Value) -> Option<serde_json::Value> {
    match choice {
        Value::Str(mode) => Some(serde_json::Value::from(mode.as_ref())),
        _ => match (choice.get("type").as_str(), choice.get("name").as_str()) {
            (Some("function"), Some(name)) => {
                Some(serde_json::json!({"type": "function", "function": {"name": name}}))
            }
            _ => None,
        },
    }
}

/// The chat completion a Responses API request asks for, with `model` set to
/// `upstream_model`; the error names what cannot be translated.
pub fn chat_request(
    body: &[u8],
    upstream_model: &str,
    takes_reasoning: bool,
) -> Result<Translated, String> {
    let request: Value = serde_json::from_slice(body)
        .map_err(|err| format!("the request body is not a JSON object: {err}"))?;
    let Some(object) = request.as_object() else {
        return Err("the request body is not a JSON object".to_owned());
    };
    if !request.get("previous_response_id").is_null() {
        return Err("`previous_response_id` is not supported on a model bridged to chat completions: the gateway keeps no conversation; send the whole conversation in `input` (with `store: false`)".to_owned());
    }
    if tracing::enabled!(tracing::Level::DEBUG) {
        for (field, _) in object.iter().filter(|(key, _)| !TRANSLATED.contains(key)) {
            tracing::debug!(
                field,
                "a Responses API field is left out of the chat completion"
            );
        }
    }
    let mut messages = Vec::new();
    if let Some(instructions) = request.get("instructions").as_str() {
        messages.push(serde_json::json!({"role": "system", "content": instructions}));
    }
    input_messages(request.get("input"), &mut messages)?;
    let stream = request.get("stream").as_bool() == Some(true);
    let effort = request.get("reasoning").get("effort").as_str();
    let chat = ChatBody {
        model: upstream_model,
        messages,
        tools: tools(request.get("tools")),
        tool_choice: tool_choice(request.get("tool_choice")),
        parallel_tool_calls: request.get("parallel_tool_calls").as_bool(),
        max_tokens: request.get("max_output_tokens").as_u64(),
        temperature: request.get("temperature").as_f64(),
        top_p: request.get("top_p").as_f64(),
        reasoning_effort: effort.filter(|_| takes_reasoning),
        stream,
        stream_options: stream.then(|| serde_json::json!({"include_usage": true})),
    };
    Ok(Translated {
        // Writing values into a Vec cannot fail.
        body: serde_json::to_vec(&chat).unwrap_or_default(),
        stream,
        user: request.get("user").as_str().map(str::to_owned),
    })
}

/// The Responses API's usage, from a chat completion's.
pub(crate) fn usage(chat: &Value) -> serde_json::Value {
    let input = chat.get("prompt_tokens").as_u64().unwrap_or(0);
    let output = chat.get("completion_tokens").as_u64().unwrap_or(0);
    serde_json::json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": chat.get("prompt_tokens_details").get("cached_tokens").as_u64().unwrap_or(0)},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": chat.get("completion_tokens_details").get("reasoning_tokens").as_u64().unwrap_or(0)},
        "total_tokens": chat.get("total_tokens").as_u64().unwrap_or(input + output),
    })
}

/// A response object named `model`, its id from the chat completion's.
pub(crate) fn response_object(
    id: &str,
    model: &str,
    created: u64,
    status: &str,
    output: Vec<serde_json::Value>,
    usage: Option<serde_json::Value>,
) -> serde_json::Value {
    let id = if id.starts_with("resp_") {
        id.to_owned()
    } else {
        format!("resp_{id}")
    };
    serde_json::json!({
        "id": id,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": null,
        "incomplete_details": (status == "incomplete").then(|| serde_json::json!({"reason": "max_output_tokens"})),
        "model": model,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "store": false,
        "usage": usage,
    })
}

/// A whole chat completion answer as a response named `model`.
pub fn response(chat: &[u8], model: &str) -> Option<Vec<u8>> {
    let chat: Value = serde_json::from_slice(chat).ok()?;
    let choices = chat.get("choices");
    let choice = choices.get(0);
    if !choice.is_object() {
        return None;
    }
    let message = choice.get("message");
    let id = chat.get("id").as_str().unwrap_or_default();
    let mut output = Vec::new();
    if let Some(reasoning) = reasoning_of(message) {
        output.push(serde_json::json!({"id": format!("rs_{id}"), "type": "reasoning", "summary": [{"type": "summary_text", "text": reasoning}]}));
    }
    if let Some(text) = message
        .get("content")
        .as_str()
        .filter(|text| !text.is_empty())
    {
        output.push(serde_json::json!({
            "id": format!("msg_{id}"), "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }));
    }
    for (index, call) in message
        .get("tool_calls")
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let function = call.get("function");
        output.push(serde_json::json!({
            "id": format!("fc_{id}_{index}"), "type": "function_call", "status": "completed",
            "call_id": call.get("id").as_str().unwrap_or_default(),
            "name": function.get("name").as_str().unwrap_or_default(),
            "arguments": function.get("arguments").as_str().unwrap_or("{}"),
        }));
    }
    let status = match choice.get("finish_reason").as_str() {
        Some("length") => "incomplete",
        _ => "completed",
    };
    let response = response_object(
        id,
        model,
        chat.get("created").as_u64().unwrap_or(0),
        status,
        output,
        Some(usage(chat.get("usage"))),
    );
    serde_json::to_vec(&response).ok()
}

/// An upstream's error answer as an OpenAI error object (the Responses API's shape).
pub fn error(status: u16, body: &[u8]) -> Vec<u8> {
    crate::openai::error(status, bytes::Bytes::copy_from_slice(body)).to_vec()
}

#[cfg(test)]
mod tests;
