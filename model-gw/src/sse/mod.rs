//! Upstreams' server-sent event streams, read line by line as the bytes arrive: passed on
//! with `model` renamed ([`SseRenamer`]), or, for a chat completion stream, translated
//! into another API's events ([`chat_stream::ChatStream`], which the Messages and Responses
//! translations share).

pub mod chat_stream;
mod lines;
mod renamer;

pub use renamer::SseRenamer;
