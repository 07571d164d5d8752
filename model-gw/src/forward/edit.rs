//! What the gateway does to an answer on its way to the client, as the call's
//! [`AnswerEdit`] says: `model` renamed (and a usage chunk the client did not ask for kept
//! from it), or a chat completion translated to a message, a token count or a response;
//! whole, or event by event.

use bytes::Bytes;

use crate::call::{AnswerEdit, Prepared};
use crate::messages::stream::StreamTranslator;
use crate::responses::stream::ResponsesTranslator;
use crate::rewrite::{self, Usage, rename_model};
use crate::sse::SseRenamer;
use crate::{messages, openai};

/// A failed answer in the shape of the API the client called.
fn failure(answer: AnswerEdit, status: u16, body: Bytes) -> Bytes {
    match answer {
        AnswerEdit::Message | AnswerEdit::CountTokens => {
            Bytes::from(messages::error(status, &body))
        }
        AnswerEdit::Rename { .. } | AnswerEdit::Response => openai::error(status, body),
    }
}

/// A whole answer as the client gets it (its status, its body), and the usage it reports.
pub(crate) fn edit_whole(call: &Prepared, status: u16, body: Bytes) -> (u16, Bytes, Option<Usage>) {
    if !(200..300).contains(&status) {
        return (status, failure(call.answer, status, body), None);
    }
    let translated = match call.answer {
        AnswerEdit::Rename { .. } => {
            let (renamed, usage) = rename_model(&body, &call.asked);
            return match renamed {
                std::borrow::Cow::Borrowed(_) => (status, body, usage),
                std::borrow::Cow::Owned(renamed) => (status, Bytes::from(renamed), usage),
            };
        }
        AnswerEdit::Message => messages::message(&body, &call.asked),
        AnswerEdit::CountTokens => messages::token_count(&body),
        AnswerEdit::Response => crate::responses::response(&body, &call.asked),
    };
    // The answer is rewritten whole: only its usage is read from it.
    let usage = rewrite::usage(&body);
    match translated {
        Some(translated) => (status, Bytes::from(translated), usage),
        // A success that is not a chat completion: the upstream's fault, said so.
        None => {
            let message = Bytes::from_static(b"the upstream's answer is not a chat completion");
            (502, failure(call.answer, 502, message), usage)
        }
    }
}

/// How a streamed answer is edited, event by event.
pub(crate) enum StreamEditor {
    Rename(SseRenamer),
    Message(StreamTranslator),
    Response(ResponsesTranslator),
}

impl StreamEditor {
    pub(crate) fn new(call: &Prepared, max_line: usize) -> Self {
        match call.answer {
            AnswerEdit::Rename { hide_usage } => Self::Rename(
                SseRenamer::new(&call.asked)
                    .hiding_usage(hide_usage)
                    .with_line_limit(max_line),
            ),
            AnswerEdit::Message | AnswerEdit::CountTokens => {
                Self::Message(StreamTranslator::new(&call.asked).with_line_limit(max_line))
            }
            AnswerEdit::Response => {
                Self::Response(ResponsesTranslator::new(&call.asked).with_line_limit(max_line))
            }
        }
    }

    pub(crate) fn overflowed(&self) -> bool {
        match self {
            Self::Rename(renamer) => renamer.overflowed(),
            Self::Message(translator) => translator.overflowed(),
            Self::Response(translator) => translator.overflowed(),
        }
    }

    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        match self {
            Self::Rename(renamer) => renamer.push(chunk),
            Self::Message(translator) => translator.push(chunk),
            Self::Response(translator) => translator.push(chunk),
        }
    }

    pub(crate) fn finish(&mut self) -> Vec<u8> {
        match self {
            Self::Rename(renamer) => renamer.finish(),
            Self::Message(translator) => translator.finish(),
            Self::Response(translator) => translator.finish(),
        }
    }

    pub(crate) fn usage(&self) -> Option<Usage> {
        match self {
            Self::Rename(renamer) => renamer.usage,
            Self::Message(translator) => translator.usage,
            Self::Response(translator) => translator.usage,
        }
    }

    /// Whether the answer's last event has been passed on.
    pub(crate) fn ended(&self) -> bool {
        match self {
            Self::Rename(renamer) => renamer.ended,
            Self::Message(translator) => translator.ended(),
            Self::Response(translator) => translator.ended(),
        }
    }
}

#[cfg(test)]
mod tests {
    use sandgate_proto::models::v1::Api;

    use super::*;

    fn call(answer: AnswerEdit) -> Prepared {
        Prepared {
            api: Api::Messages,
            path: "/chat/completions",
            body: Vec::new(),
            asked: "claude".to_owned(),
            user: None,
            answer,
            max_output: None,
        }
    }

    #[test]
    fn a_translated_answer_keeps_its_status_unless_it_cannot_be_translated() {
        let chat = br#"{"id":"c","choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3}}"#;
        let (status, body, usage) =
            edit_whole(&call(AnswerEdit::Message), 200, Bytes::from_static(chat));
        assert_eq!(status, 200);
        assert!(
            body.starts_with(br#"{"id":"msg_c","type":"message""#),
            "{body:?}"
        );
        assert_eq!(usage.and_then(|usage| usage.total_tokens), Some(3));

        let (status, body, _) = edit_whole(
            &call(AnswerEdit::Message),
            200,
            Bytes::from_static(b"<html>"),
        );
        assert_eq!(status, 502);
        assert!(body.starts_with(br#"{"type":"error""#), "{body:?}");

        let (status, body, _) = edit_whole(
            &call(AnswerEdit::CountTokens),
            429,
            Bytes::from_static(br#"{"error":{"message":"slow down"}}"#),
        );
        assert_eq!(status, 429);
        assert_eq!(
            &body[..],
            br#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#
        );
    }
}
