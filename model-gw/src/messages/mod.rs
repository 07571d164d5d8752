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

mod answer;
mod chat;
mod extras;
mod request;
pub mod stream;
#[cfg(test)]
mod tests;

pub(crate) use answer::upstream_text;
pub use answer::{error, message, stop_reason, token_count};
pub use request::{Translated, chat_request, chat_request_for, user};
