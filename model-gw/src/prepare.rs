//! A client's call prepared for its upstream by the API it speaks: the OpenAI-shaped APIs
//! as they are (`openai`), the Messages API translated to a chat completion for an
//! OpenAI-compatible upstream (`messages`), the Responses API bridged to one for an
//! upstream that serves chat completions only (`responses`).

use bytes::Bytes;
use sandgate_proto::error::ErrorCode;
use sandgate_proto::models::v1::Api;
use tonic::Status;

use crate::call::{AnswerEdit, Prepared};
use crate::rewrite::ChatRequest;
use crate::routing::{Kind, Upstream};
use crate::support::error;
use crate::{messages, openai};

/// The call of `api` the client's `body` (read as `request`) makes of `upstream`; the error
/// names what cannot be translated.
pub(crate) fn prepare(
    api: Api,
    body: &Bytes,
    request: &ChatRequest<'_>,
    upstream: &Upstream,
) -> Result<Prepared, Status> {
    // A translated call: a chat completion in place of the client's `api`, its answer
    // edited back as `answer` says.
    let chat = |body: Vec<u8>, user: Option<String>, answer: AnswerEdit| Prepared {
        api,
        path: openai::path(Api::ChatCompletions),
        body: vec![Bytes::from(body)],
        asked: request.model.clone(),
        user,
        answer,
        max_output: request.max_output,
    };
    let refused = |err: String| error(ErrorCode::BadRequest, err);
    let anthropic = matches!(api, Api::Messages | Api::MessagesCountTokens);
    if anthropic && upstream.kind == Kind::OpenAi && !upstream.params.native_messages {
        // An OpenAI-compatible upstream has no Messages API: a chat completion in its
        // place.
        let count_tokens = api == Api::MessagesCountTokens;
        let translated = messages::chat_request_for(
            body,
            &upstream.model,
            count_tokens,
            upstream.params.takes_reasoning,
        )
        .map_err(refused)?;
        let answer = if count_tokens {
            AnswerEdit::CountTokens
        } else {
            AnswerEdit::Message
        };
        Ok(chat(translated.body, translated.user, answer))
    } else if api == Api::Responses
        && upstream.kind == Kind::OpenAi
        && upstream.params.responses_via_chat
    {
        // An upstream that serves chat completions only: the Responses API bridged.
        let translated =
            crate::responses::chat_request(body, &upstream.model, upstream.params.takes_reasoning)
                .map_err(refused)?;
        Ok(chat(translated.body, translated.user, AnswerEdit::Response))
    } else {
        let mut call = openai::prepare(api, body, request, &upstream.model);
        if anthropic {
            call.user = messages::user(body);
        }
        Ok(call)
    }
}
