//! A chat completion's answer as Anthropic's: a whole message, a token count, an error;
//! and the message types the stream's events ([`super::stream`]) carry too.

use std::borrow::Cow;

use serde::Serialize;
use serde_json_borrow::Value;

/// A message (a whole answer, or a stream's `message_start`), as Anthropic's API writes it.
#[derive(Serialize)]
pub(super) struct Message<'a> {
    pub(super) id: Cow<'a, str>,
    pub(super) r#type: &'static str,
    pub(super) role: &'static str,
    pub(super) model: &'a str,
    pub(super) content: Vec<ContentBlock<'a>>,
    pub(super) stop_reason: Option<&'static str>,
    pub(super) stop_sequence: Option<&'static str>,
    pub(super) usage: MessageUsage,
}

impl<'a> Message<'a> {
    /// A message named `model` with a chat completion's `id`.
    pub(super) fn new(id: &'a str, model: &'a str) -> Self {
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
pub(super) enum ContentBlock<'a> {
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
pub(super) enum ToolInput<'a> {
    Object(Value<'a>),
    /// `{}`.
    Empty {},
}

/// A message's token counts.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(super) struct MessageUsage {
    pub(super) input_tokens: u64,
    pub(super) output_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) cache_read_input_tokens: Option<u64>,
}

/// Anthropic's error object: an error answer's body, and a stream's `error` event.
#[derive(Serialize)]
#[serde(tag = "type", rename = "error")]
pub(super) struct ErrorObject<'a> {
    pub(super) error: ErrorBody<'a>,
}

#[derive(Serialize)]
pub(super) struct ErrorBody<'a> {
    pub(super) r#type: &'a str,
    pub(super) message: &'a str,
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
pub(super) fn usage(usage: &Value) -> MessageUsage {
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
