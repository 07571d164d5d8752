//! One client call as the forwarding core takes it: what each API (`openai`, `messages`,
//! `responses`) prepares from the client's request, and how its answer is edited on the
//! way back. The APIs make it; `forward` sends it.

use bytes::Bytes;
use sandgate_proto::models::v1::Api;

/// One client call, ready to go upstream.
pub struct Prepared {
    pub api: Api,
    /// The path on the upstream: `/chat/completions`, `/responses`, …
    pub path: &'static str,
    /// The body, in pieces sent one after the other (the client's own bytes and the
    /// gateway's edits): a retry sends them again without a copy.
    pub body: Vec<Bytes>,
    /// The model the client asked for: answers name it.
    pub asked: String,
    pub user: Option<String>,
    pub answer: AnswerEdit,
    /// The client's bound on the output tokens (`max_tokens` and its kin): the bound of
    /// the estimate charged when the answer reports no usage.
    pub max_output: Option<u64>,
}

/// What the gateway does to an answer on its way to the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerEdit {
    /// `model` renamed; with `hide_usage`, a stream's usage-only chunk (which the gateway
    /// asked for, the client did not) is recorded and kept from the client.
    Rename { hide_usage: bool },
    /// A chat completion translated to an Anthropic message.
    Message,
    /// A one-token chat completion's usage as a `count_tokens` answer.
    CountTokens,
    /// A chat completion bridged back to a Responses API answer.
    Response,
}

/// The spend log's name of an API (LiteLLM's `call_type`).
pub(crate) fn api_name(api: Api) -> &'static str {
    match api {
        // Refused before a call is prepared.
        Api::ChatCompletions | Api::Unspecified => "completion",
        Api::Responses => "responses",
        Api::Messages => "anthropic_messages",
        Api::MessagesCountTokens => "count_tokens",
        Api::Embeddings => "embedding",
        Api::Completions => "text_completion",
    }
}
