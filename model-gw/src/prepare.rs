//! A client's call prepared for its upstream by the API it speaks: the OpenAI-shaped APIs
//! as they are (`openai`), the Messages API translated to a chat completion for an
//! OpenAI-compatible upstream (`messages`), the Responses API bridged to one for an
//! upstream that serves chat completions only (`responses`). A large body is read and
//! prepared on the blocking pool ([`read`], [`prepared`]), not on the thread serving the
//! call and its neighbours.

use bytes::Bytes;
use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sandgate_proto::heavy::judged;
use sandgate_proto::models::v1::Api;
use tonic::Status;

use crate::call::{AnswerEdit, Prepared};
use crate::rewrite::ChatRequest;
use crate::routing::{Kind, Upstream};
use crate::strict::Refusal;
use crate::support::error;
use crate::{messages, openai};

self_cell::self_cell!(
    /// A client's request body and the gateway's reading of it, which borrows it: owned
    /// together, so that a large body can be read, then prepared, on another thread.
    pub(crate) struct ParsedRequest {
        owner: Bytes,
        #[covariant]
        dependent: ChatRequest,
    }
);

/// Reads the client's `body` ([`ChatRequest::parse`]); the error is the client's 400. A
/// body of many megabytes takes tens of milliseconds to read (every member is checked for
/// duplicates): then on the blocking pool.
pub(crate) async fn read(body: Bytes) -> Result<ParsedRequest, Status> {
    judged(body.len(), move || {
        ParsedRequest::try_new(body, |body| ChatRequest::parse(body))
    })
    .await
    .map_err(ErrorDetail::into_status)?
    .map_err(|refusal| {
        let detail = ErrorDetail::new(ErrorCode::BadRequest, refusal.to_string());
        match refusal {
            // OpenAI's `code` of such an error; the edge answers it with its `param`.
            Refusal::InvalidType { .. } => detail.with_reason("invalid_type"),
            _ => detail,
        }
        .into_status()
    })
}

/// [`prepare`], on the blocking pool when the body is large (a translation reads it all
/// again); the request and the upstream come back with the call.
pub(crate) async fn prepared(
    api: Api,
    request: ParsedRequest,
    upstream: Upstream,
) -> Result<(ParsedRequest, Upstream, Prepared), Status> {
    let size = request.borrow_owner().len();
    let (request, upstream, call) = judged(size, move || {
        let call = prepare(
            api,
            request.borrow_owner(),
            request.borrow_dependent(),
            &upstream,
        );
        (request, upstream, call)
    })
    .await
    .map_err(ErrorDetail::into_status)?;
    Ok((request, upstream, call?))
}

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
