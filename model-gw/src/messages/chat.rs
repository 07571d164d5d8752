//! The chat completion a Messages API request becomes, as the translation writes it:
//! typed structs, serialized once.

use std::borrow::Cow;

use serde::Serialize;
use serde_json_borrow::Value;

/// A chat completion message, as the translation writes it.
#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub(super) enum ChatMessage<'a> {
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
pub(super) enum UserContent<'a> {
    Text(&'a str),
    Parts(Vec<Part<'a>>),
}

/// A chat completion content part.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Part<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: Url<'a> },
    File { file: FileData<'a> },
}

#[derive(Serialize)]
pub(super) struct Url<'a> {
    pub(super) url: Cow<'a, str>,
}

#[derive(Serialize)]
pub(super) struct FileData<'a> {
    pub(super) file_data: Cow<'a, str>,
}

#[derive(Serialize)]
pub(super) struct ToolCall<'a> {
    pub(super) id: &'a str,
    pub(super) r#type: &'static str,
    pub(super) function: FunctionCall<'a>,
}

#[derive(Serialize)]
pub(super) struct FunctionCall<'a> {
    pub(super) name: &'a str,
    pub(super) arguments: String,
}

#[derive(Serialize)]
pub(super) struct Tool<'a> {
    pub(super) r#type: &'static str,
    pub(super) function: FunctionDefinition<'a>,
}

#[derive(Serialize)]
pub(super) struct FunctionDefinition<'a> {
    pub(super) name: &'a str,
    pub(super) parameters: Parameters<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) description: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum Parameters<'a> {
    /// The tool's `input_schema`, as the client wrote it.
    Given(&'a Value<'a>),
    /// None given: any object.
    AnyObject { r#type: &'static str },
}

#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum ToolChoice<'a> {
    Mode(&'static str),
    Function {
        r#type: &'static str,
        function: FunctionName<'a>,
    },
}

#[derive(Serialize)]
pub(super) struct FunctionName<'a> {
    pub(super) name: &'a str,
}

#[derive(Serialize)]
pub(super) struct StreamOptions {
    pub(super) include_usage: bool,
}

/// The chat completion a Messages API request becomes.
#[derive(Serialize)]
pub(super) struct ChatBody<'a> {
    pub(super) model: &'a str,
    pub(super) messages: Vec<ChatMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) max_tokens: Option<&'a Value<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) temperature: Option<&'a Value<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) top_p: Option<&'a Value<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) stop: Option<&'a Value<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) tools: Option<Vec<Tool<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) tool_choice: Option<ToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) reasoning_effort: Option<&'static str>,
}
