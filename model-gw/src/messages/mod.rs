//! Anthropic's Messages API (`/v1/messages`) over an OpenAI-compatible upstream, which
//! speaks chat completions only: the request is translated to a chat completion, and its
//! answer back to a message (whole here, streamed in [`stream`]).
//!
//! What is translated: the system prompt; text, image (base64 and URL) and document
//! (base64 PDF) blocks; tool definitions, `tool_choice` and parallel tool use; tool use
//! and tool results (results become `tool` messages right after the assistant's call, as
//! chat completions need them); `max_tokens`, `stop_sequences`, `temperature`, `top_p`,
//! `metadata.user_id`; system messages inside `messages` (Claude Code sends its
//! environment so, after the first user turn), kept where they are, as chat completions
//! allow; `thinking` and `output_config.effort` as `reasoning_effort` where the entry's
//! model takes it ([`extras`]); stop reasons and usage (cache reads included). What has no
//! chat completion equivalent is left out, and named at debug level: `top_k`, thinking
//! blocks, `context_management`, `cache_control` marks. Server tools (web search, code execution) and blocks this gateway does not know
//! are refused, naming the field. LiteLLM's adapter (`litellm/llms/anthropic/
//! experimental_pass_through/adapters/`) was the reference for the choices made.
//!
//! Both directions read JSON into `serde_json_borrow`'s tree (strings borrowed from the
//! body, objects as short lists: no hashing, few allocations) and write typed structs:
//! this is on the path of every translated call, streamed chunk by chunk.

mod extras;
pub mod stream;

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json_borrow::Value;

/// A translated request: the chat completion body, and what the answer's translation and
/// the spend log need.
#[derive(Debug)]
pub struct Translated {
    pub body: Vec<u8>,
    pub stream: bool,
    /// `metadata.user_id`, for the spend log.
    pub user: Option<String>,
}

/// A chat completion message, as the translation writes it.
#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum ChatMessage<'a> {
    System {
        content: Cow<'a, str>,
    },
    User {
        content: UserContent<'a>,
    },
    Assistant {
        /// `null` when the turn is tool calls only.
        content: Option<Cow<'a, str>>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: String,
    },
}

#[derive(Serialize)]
#[serde(untagged)]
enum UserContent<'a> {
    Text(&'a str),
    Parts(Vec<Part<'a>>),
}

/// A chat completion content part.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: Url<'a> },
    File { file: FileData<'a> },
}

#[derive(Serialize)]
struct Url<'a> {
    url: Cow<'a, str>,
}

#[derive(Serialize)]
struct FileData<'a> {
    file_data: Cow<'a, str>,
}

#[derive(Serialize)]
struct ToolCall<'a> {
    id: &'a str,
    r#type: &'static str,
    function: FunctionCall<'a>,
}

#[derive(Serialize)]
struct FunctionCall<'a> {
    name: &'a str,
    arguments: String,
}

#[derive(Serialize)]
struct Tool<'a> {
    r#type: &'static str,
    function: FunctionDefinition<'a>,
}

#[derive(Serialize)]
struct FunctionDefinition<'a> {
    name: &'a str,
    parameters: Parameters<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Parameters<'a> {
    /// The tool's `input_schema`, as the client wrote it.
    Given(&'a Value<'a>),
    /// None given: any object.
    AnyObject { r#type: &'static str },
}

#[derive(Serialize)]
#[serde(untagged)]
enum ToolChoice<'a> {
    Mode(&'static str),
    Function {
        r#type: &'static str,
        function: FunctionName<'a>,
    },
}

#[derive(Serialize)]
struct FunctionName<'a> {
    name: &'a str,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// The chat completion a Messages API request becomes.
#[derive(Serialize)]
struct ChatBody<'a> {
    model: &'a str,
    messages: Vec<ChatMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<&'a Value<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<&'a Value<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<&'a Value<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop: Option<&'a Value<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<Tool<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'static str>,
}

/// A message (a whole answer, or a stream's `message_start`), as Anthropic's API writes it.
#[derive(Serialize)]
struct Message<'a> {
    id: Cow<'a, str>,
    r#type: &'static str,
    role: &'static str,
    model: &'a str,
    content: Vec<ContentBlock<'a>>,
    stop_reason: Option<&'static str>,
    stop_sequence: Option<&'static str>,
    usage: MessageUsage,
}

impl<'a> Message<'a> {
    /// A message named `model` with a chat completion's `id`.
    fn new(id: &'a str, model: &'a str) -> Self {
        Self {
            id: if id.starts_with("msg_") {
                Cow::Borrowed(id)
            } else {
                Cow::Owned(format!("msg_{id}"))
            },
            r#type: "message",
            role: "assistant",
            model,
            content: Vec::new(),
            stop_reason: None,
            stop_sequence: None,
            usage: MessageUsage::default(),
        }
    }
}

/// A message's content block.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ContentBlock<'a> {
    Text {
        text: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: ToolInput<'a>,
    },
}

#[derive(Serialize)]
#[serde(untagged)]
enum ToolInput<'a> {
    Object(Value<'a>),
    /// `{}`.
    Empty {},
}

/// A message's token counts.
#[derive(Clone, Copy, Debug, Default, Serialize)]
struct MessageUsage {
    input_tokens: u64,
    output_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_read_input_tokens: Option<u64>,
}

/// Anthropic's error object: an error answer's body, and a stream's `error` event.
#[derive(Serialize)]
#[serde(tag = "type", rename = "error")]
struct ErrorObject<'a> {
    error: ErrorBody<'a>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    r#type: &'a str,
    message: &'a str,
}

/// Where in the request a value is, for errors: `messages[2].content[0].source`.
fn at(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn text_of<'v>(value: &'v Value<'v>, path: &str) -> Result<&'v str, String> {
    value
        .as_str()
        .ok_or_else(|| format!("`{path}` must be a string"))
}

/// `value`, unless it is `null` (or absent).
fn given<'v>(value: &'v Value<'v>) -> Option<&'v Value<'v>> {
    (!value.is_null()).then_some(value)
}

/// Text blocks (a system prompt, a tool result's content) as one string.
fn joined_text<'v>(value: &'v Value<'v>, path: &str) -> Result<Cow<'v, str>, String> {
    match value {
        Value::Str(text) => Ok(Cow::Borrowed(text)),
        Value::Array(blocks) => {
            let mut texts = Vec::with_capacity(blocks.len());
            for (index, block) in blocks.iter().enumerate() {
                let path = format!("{path}[{index}]");
                match block.get("type").as_str() {
                    Some("text") => texts.push(text_of(block.get("text"), &at(&path, "text"))?),
                    _ => return Err(format!("`{path}` must be a text block")),
                }
            }
            Ok(match texts.as_slice() {
                [text] => Cow::Borrowed(*text),
                _ => Cow::Owned(texts.join("\n")),
            })
        }
        Value::Null => Ok(Cow::Borrowed("")),
        _ => Err(format!(
            "`{path}` must be a string or a list of text blocks"
        )),
    }
}

/// An image or document block as a chat completion content part.
fn media_part<'v>(block: &'v Value<'v>, path: &str) -> Result<Part<'v>, String> {
    let source = block.get("source");
    let source_path = at(path, "source");
    let url = match source.get("type").as_str() {
        Some("base64") => {
            let media_type = text_of(source.get("media_type"), &at(&source_path, "media_type"))?;
            let data = text_of(source.get("data"), &at(&source_path, "data"))?;
            Cow::Owned(format!("data:{media_type};base64,{data}"))
        }
        Some("url") => Cow::Borrowed(text_of(source.get("url"), &at(&source_path, "url"))?),
        _ => {
            return Err(format!(
                "`{source_path}.type` must be \"base64\" or \"url\""
            ));
        }
    };
    Ok(match block.get("type").as_str() {
        Some("document") => Part::File {
            file: FileData { file_data: url },
        },
        _ => Part::ImageUrl {
            image_url: Url { url },
        },
    })
}

/// A user turn: its tool results as `tool` messages first, then the rest as one user
/// message.
fn user_messages<'v>(
    content: &'v Value<'v>,
    path: &str,
    out: &mut Vec<ChatMessage<'v>>,
) -> Result<(), String> {
    let blocks = match content {
        Value::Str(text) => {
            out.push(ChatMessage::User {
                content: UserContent::Text(text),
            });
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
        match block.get("type").as_str() {
            Some("text") => {
                let text = text_of(block.get("text"), &at(&path, "text"))?;
                parts.push(Part::Text { text });
            }
            Some("image" | "document") => parts.push(media_part(block, &path)?),
            Some("tool_result") => {
                let id = text_of(block.get("tool_use_id"), &at(&path, "tool_use_id"))?;
                let mut texts = Vec::new();
                match block.get("content") {
                    Value::Array(items) => {
                        for (item_index, item) in items.iter().enumerate() {
                            let item_path = format!("{path}.content[{item_index}]");
                            match item.get("type").as_str() {
                                Some("text") => texts.push(Cow::Borrowed(text_of(
                                    item.get("text"),
                                    &at(&item_path, "text"),
                                )?)),
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
                if block.get("is_error").as_bool() == Some(true) {
                    text.insert_str(0, "Error: ");
                }
                out.push(ChatMessage::Tool {
                    tool_call_id: id,
                    content: text,
                });
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
        out.push(ChatMessage::User {
            content: UserContent::Parts(tool_media),
        });
    }
    Ok(())
}

/// An assistant turn: its text, and its tool uses as tool calls.
fn assistant_message<'v>(content: &'v Value<'v>, path: &str) -> Result<ChatMessage<'v>, String> {
    let blocks = match content {
        Value::Str(text) => {
            return Ok(ChatMessage::Assistant {
                content: Some(Cow::Borrowed(text)),
                tool_calls: Vec::new(),
            });
        }
        Value::Array(blocks) => blocks,
        _ => return Err(format!("`{path}` must be a string or a list of blocks")),
    };
    let mut text = Cow::Borrowed("");
    let mut calls = Vec::new();
    for (index, block) in blocks.iter().enumerate() {
        let path = format!("{path}[{index}]");
        match block.get("type").as_str() {
            Some("text") => {
                let piece = text_of(block.get("text"), &at(&path, "text"))?;
                if text.is_empty() {
                    text = Cow::Borrowed(piece);
                } else {
                    text.to_mut().push_str(piece);
                }
            }
            Some("tool_use") => {
                let id = text_of(block.get("id"), &at(&path, "id"))?;
                let name = text_of(block.get("name"), &at(&path, "name"))?;
                let arguments = match block.as_object().and_then(|block| block.get("input")) {
                    // Writing a tree into a string cannot fail.
                    Some(input) => serde_json::to_string(input).unwrap_or_default(),
                    None => "{}".to_owned(),
                };
                calls.push(ToolCall {
                    id,
                    r#type: "function",
                    function: FunctionCall { name, arguments },
                });
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
    Ok(ChatMessage::Assistant {
        content: (calls.is_empty() || !text.is_empty()).then_some(text),
        tool_calls: calls,
    })
}

fn tools<'v>(tools: &'v Value<'v>) -> Result<Vec<Tool<'v>>, String> {
    let Value::Array(tools) = tools else {
        return Err("`tools` must be a list".to_owned());
    };
    tools
        .iter()
        .enumerate()
        .map(|(index, tool)| {
            let path = format!("tools[{index}]");
            match tool.get("type").as_str() {
                None | Some("custom") => {}
                Some(other) => {
                    return Err(format!(
                        "`{path}.type` {other:?}: server tools are not supported on a translated model"
                    ));
                }
            }
            let name = text_of(tool.get("name"), &at(&path, "name"))?;
            let parameters = match tool.as_object().and_then(|tool| tool.get("input_schema")) {
                Some(schema) => Parameters::Given(schema),
                None => Parameters::AnyObject { r#type: "object" },
            };
            Ok(Tool {
                r#type: "function",
                function: FunctionDefinition {
                    name,
                    parameters,
                    description: tool.get("description").as_str(),
                },
            })
        })
        .collect()
}

/// `tool_choice`, and whether parallel tool use is off.
fn tool_choice<'v>(choice: &'v Value<'v>) -> Result<(ToolChoice<'v>, bool), String> {
    let parallel_off = choice.get("disable_parallel_tool_use").as_bool() == Some(true);
    let translated = match choice.get("type").as_str() {
        Some("auto") => ToolChoice::Mode("auto"),
        Some("any") => ToolChoice::Mode("required"),
        Some("none") => ToolChoice::Mode("none"),
        Some("tool") => ToolChoice::Function {
            r#type: "function",
            function: FunctionName {
                name: text_of(choice.get("name"), "tool_choice.name")?,
            },
        },
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
    chat_request_for(body, upstream_model, count_tokens, false)
}

/// [`chat_request`], for an upstream whose model takes `reasoning_effort` when
/// `takes_reasoning`.
pub fn chat_request_for(
    body: &[u8],
    upstream_model: &str,
    count_tokens: bool,
    takes_reasoning: bool,
) -> Result<Translated, String> {
    let request: Value = serde_json::from_slice(body)
        .map_err(|err| format!("the request body is not a JSON object: {err}"))?;
    if !request.is_object() {
        return Err("the request body is not a JSON object".to_owned());
    }
    let mut messages = Vec::new();
    let system = joined_text(request.get("system"), "system")?;
    if !system.is_empty() {
        messages.push(ChatMessage::System { content: system });
    }
    let Some(turns) = request.get("messages").as_array() else {
        return Err("`messages` is required, a list".to_owned());
    };
    for (index, turn) in turns.iter().enumerate() {
        let path = format!("messages[{index}]");
        let content = turn.get("content");
        let content_path = at(&path, "content");
        match turn.get("role").as_str() {
            Some("user") => user_messages(content, &content_path, &mut messages)?,
            Some("assistant") => messages.push(assistant_message(content, &content_path)?),
            Some("system") => messages.push(ChatMessage::System {
                content: joined_text(content, &content_path)?,
            }),
            _ => {
                return Err(format!(
                    "`{path}.role` must be \"user\", \"assistant\" or \"system\""
                ));
            }
        }
    }
    let stream = !count_tokens && request.get("stream").as_bool() == Some(true);
    let tools = given(request.get("tools")).map(tools).transpose()?;
    let (tool_choice, parallel_off) = match given(request.get("tool_choice")) {
        Some(choice) => {
            let (choice, parallel_off) = tool_choice(choice)?;
            (Some(choice), parallel_off)
        }
        None => (None, false),
    };
    let one = Value::from(1_u64);
    let reasoning_effort = extras::reasoning_effort(&request, takes_reasoning);
    extras::log_dropped(&request, reasoning_effort.is_some());
    let chat = ChatBody {
        model: upstream_model,
        messages,
        max_tokens: if count_tokens {
            Some(&one)
        } else {
            given(request.get("max_tokens"))
        },
        temperature: given(request.get("temperature")),
        top_p: given(request.get("top_p")),
        stop: given(request.get("stop_sequences")),
        tools,
        tool_choice,
        parallel_tool_calls: parallel_off.then_some(false),
        stream: stream.then_some(true),
        stream_options: stream.then_some(StreamOptions {
            include_usage: true,
        }),
        reasoning_effort,
    };
    Ok(Translated {
        // Writing typed values into a Vec cannot fail.
        body: serde_json::to_vec(&chat).unwrap_or_default(),
        stream,
        user: request
            .get("metadata")
            .get("user_id")
            .as_str()
            .map(str::to_owned),
    })
}

/// The `user` a Messages API request names (`metadata.user_id`), for the spend log.
pub fn user(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Request {
        metadata: Option<Metadata>,
    }
    #[derive(Deserialize)]
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
fn usage(usage: &Value) -> MessageUsage {
    let prompt = usage.get("prompt_tokens").as_u64().unwrap_or(0);
    let cached = usage
        .get("prompt_tokens_details")
        .get("cached_tokens")
        .as_u64()
        .unwrap_or(0);
    MessageUsage {
        input_tokens: prompt.saturating_sub(cached),
        output_tokens: usage.get("completion_tokens").as_u64().unwrap_or(0),
        cache_read_input_tokens: (cached > 0).then_some(cached),
    }
}

/// A tool call's arguments as a tool use's input: an object, or `{}` when the model wrote
/// something else.
fn tool_input<'v>(arguments: &'v Value<'v>) -> ToolInput<'v> {
    arguments
        .as_str()
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .filter(Value::is_object)
        .map_or(ToolInput::Empty {}, ToolInput::Object)
}

/// A whole chat completion answer as a message named `model`.
pub fn message(chat: &[u8], model: &str) -> Option<Vec<u8>> {
    let chat: Value = serde_json::from_slice(chat).ok()?;
    let choice = chat.get("choices").get(0);
    let answer = choice.get("message");
    let mut message = Message::new(chat.get("id").as_str().unwrap_or_default(), model);
    if let Some(text) = answer
        .get("content")
        .as_str()
        .filter(|text| !text.is_empty())
    {
        message.content.push(ContentBlock::Text { text });
    }
    for call in answer.get("tool_calls").as_array().into_iter().flatten() {
        let function = call.get("function");
        message.content.push(ContentBlock::ToolUse {
            id: call.get("id").as_str().unwrap_or_default(),
            name: function.get("name").as_str().unwrap_or_default(),
            input: tool_input(function.get("arguments")),
        });
    }
    message.stop_reason = Some(stop_reason(
        choice.get("finish_reason").as_str().unwrap_or("stop"),
    ));
    message.usage = usage(chat.get("usage"));
    serde_json::to_vec(&message).ok()
}

/// A one-token chat completion's answer as a `count_tokens` answer.
pub fn token_count(chat: &[u8]) -> Option<Vec<u8>> {
    #[derive(Serialize)]
    struct TokenCount {
        input_tokens: u64,
    }
    let chat: Value = serde_json::from_slice(chat).ok()?;
    let input_tokens = chat.get("usage").get("prompt_tokens").as_u64()?;
    serde_json::to_vec(&TokenCount { input_tokens }).ok()
}

/// An error answer (an OpenAI error object, or any body) in Anthropic's shape.
pub fn error(status: u16, body: &[u8]) -> Vec<u8> {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let message = parsed.as_ref().and_then(|body| {
        let error = body.get("error");
        error
            .get("message")
            .as_str()
            .or_else(|| error.as_str())
            .or_else(|| body.get("detail").as_str())
    });
    let fallback;
    let message = match message {
        Some(message) => message,
        None => {
            fallback = upstream_text(body);
            &fallback
        }
    };
    let error = ErrorObject {
        error: ErrorBody {
            r#type: sandgate_proto::models::anthropic_error_type(status),
            message,
        },
    };
    serde_json::to_vec(&error).unwrap_or_default()
}

/// An upstream's answer as the text of an error message: at most 2,000 characters of it,
/// its invalid UTF-8 replaced.
pub(crate) fn upstream_text(body: &[u8]) -> String {
    String::from_utf8_lossy(body).chars().take(2000).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

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
}
