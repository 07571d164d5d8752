//! A Messages API request translated to a chat completion: every block the translation
//! knows, in the order chat completions need; what it cannot translate named in the error.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json_borrow::Value;

use super::chat::{
    ChatBody, ChatMessage, FileData, FunctionCall, FunctionDefinition, FunctionName, Parameters,
    Part, StreamOptions, Tool, ToolCall, ToolChoice, Url, UserContent,
};
use super::extras;

/// A translated request: the chat completion body, and what the answer's translation and
/// the spend log need.
#[derive(Debug)]
pub struct Translated {
    pub body: Vec<u8>,
    pub stream: bool,
    /// `metadata.user_id`, for the spend log.
    pub user: Option<String>,
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
