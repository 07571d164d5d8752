//! Upstreams' server-sent event streams, read line by line as the bytes arrive: passed on
//! with `model` renamed ([`SseRenamer`]), or translated into another API's events (the
//! Messages and Responses translations read their lines with [`Lines`]).

mod lines;
mod renamer;

pub(crate) use lines::Lines;
pub use renamer::SseRenamer;
