//! An OpenAI-shaped (or Anthropic, or Responses API) event stream passed on with `model`
//! renamed in every `data:` event, the usage it reports kept, and its last event noticed.

use std::borrow::Cow;

use super::lines::Lines;
use crate::rewrite::{Usage, stream_event};

/// Renames `model` in every `data:` event of a server-sent event stream, line by line as
/// the bytes arrive, and keeps the usage seen.
pub struct SseRenamer {
    model: String,
    lines: Lines,
    pub usage: Option<Usage>,
    /// Usage-only chunks (`"choices":[]` and a usage) are kept from the client.
    hide_usage: bool,
    /// A usage-only event was kept back: the blank line that ends it goes too.
    hidden: bool,
    /// The answer's last event has passed, whole: `[DONE]`, or the blank line after
    /// `message_stop`'s or the Responses API's `response.completed` (`.incomplete`,
    /// `.failed`), whose `data:` (with the usage) comes between. A client may leave then
    /// without cutting its answer short.
    pub ended: bool,
    /// The last event's name has passed; its data and the blank line that ends it not yet.
    ending: bool,
}

/// The events that end an answer of the Messages or the Responses API.
const LAST_EVENTS: [&[u8]; 4] = [
    b"message_stop",
    b"response.completed",
    b"response.incomplete",
    b"response.failed",
];

/// Whether an event stream's line (without its line ending) is its answer's last event
/// (`[DONE]`, or the `event:` line of one that ends the answer).
fn is_last_event(line: &[u8]) -> bool {
    if let Some(data) = line.strip_prefix(b"data:") {
        return data.trim_ascii() == b"[DONE]";
    }
    line.strip_prefix(b"event:")
        .is_some_and(|name| LAST_EVENTS.contains(&name.trim_ascii()))
}

impl SseRenamer {
    pub fn new(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            lines: Lines::default(),
            usage: None,
            hide_usage: false,
            hidden: false,
            ended: false,
            ending: false,
        }
    }

    /// With `hide`, the chunk carrying only usage (which the gateway asked for, not the
    /// client) is recorded and not passed on.
    pub fn hiding_usage(mut self, hide: bool) -> Self {
        self.hide_usage = hide;
        self
    }

    /// Lines longer than `max` bytes end the stream (see [`Self::overflowed`]).
    pub fn with_line_limit(mut self, max: usize) -> Self {
        self.lines = Lines::with_limit(max);
        self
    }

    /// Whether a line passed the limit: nothing more is passed on.
    pub fn overflowed(&self) -> bool {
        self.lines.overflowed()
    }

    /// The lines of what arrived so far that are complete, rewritten; the rest is kept.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let Some(complete) = self.lines.push(chunk) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(complete.len() + 16);
        for line in complete.split_inclusive(|byte| *byte == b'\n') {
            self.line(line, &mut out);
        }
        out
    }

    /// Whatever is left when the stream ends.
    pub fn finish(&mut self) -> Vec<u8> {
        let rest = self.lines.rest();
        let mut out = Vec::with_capacity(rest.len());
        if !rest.is_empty() {
            self.line(&rest, &mut out);
        }
        out
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<u8>) {
        let content_end = line
            .iter()
            .rposition(|byte| !matches!(byte, b'\n' | b'\r'))
            .map_or(0, |last| last + 1);
        let (content, ending) = line.split_at(content_end);
        if !self.ended {
            if content.is_empty() {
                self.ended = self.ending;
            } else if is_last_event(content) {
                // `[DONE]` is whole in its line; a named event ends at its blank line.
                if content.starts_with(b"data:") {
                    self.ended = true;
                } else {
                    self.ending = true;
                }
            }
        }
        let hidden = std::mem::take(&mut self.hidden);
        if content.is_empty() && hidden {
            return;
        }
        let Some(data) = content.strip_prefix(b"data:") else {
            out.extend_from_slice(line);
            return;
        };
        let data = data.strip_prefix(b" ").unwrap_or(data);
        // Parsed once: its usage, whether it is hidden, its model renamed.
        let (renamed, usage) = stream_event(data, &self.model, self.hide_usage);
        if let Some(usage) = usage {
            self.usage = Some(self.usage.unwrap_or_default().merge(usage));
        }
        let Some(renamed) = renamed else {
            self.hidden = true;
            return;
        };
        if let Cow::Owned(renamed) = renamed {
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(&renamed);
            out.extend_from_slice(ending);
        } else {
            out.extend_from_slice(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_has_ended_once_its_last_event_has_passed() {
        for (stream, last) in [
            (&b"data: {\"choices\":[]}\n\n"[..], false),
            (b"data: {\"choices\":[]}\n\ndata: [DONE]\n\n", true),
            (b"event: response.output_text.delta\ndata: {}\n\n", false),
            (b"event: response.completed\r\ndata: {}\r\n\r\n", true),
            (
                b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
                true,
            ),
            // The marker inside an event's data is not the event.
            (b"data: {\"text\":\"event: message_stop\"}\n\n", false),
            // The last event's name, its data (the usage) still to come: not yet.
            (b"event: response.completed\n", false),
            (b"event: response.completed\ndata: {\"usage\":{}}\n", false),
        ] {
            let mut renamer = SseRenamer::new("asked");
            // Cut anywhere: the line decides, not the chunk.
            for piece in stream.chunks(3) {
                renamer.push(piece);
            }
            assert_eq!(renamer.ended, last, "{}", String::from_utf8_lossy(stream));
        }
    }

    #[test]
    fn a_usage_chunk_the_client_did_not_ask_for_is_recorded_and_kept_from_it() {
        let mut renamer = SseRenamer::new("asked").hiding_usage(true);
        let mut out = renamer.push(b"data: {\"model\":\"up\",\"choices\":[{\"delta\":{}}]}\n\n");
        out.extend(renamer.push(b"data: {\"model\":\"up\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":6,\"total_tokens\":11}}\n\ndata: [DONE]\n\n"));
        out.extend(renamer.finish());
        assert_eq!(
            String::from_utf8_lossy(&out),
            "data: {\"model\":\"asked\",\"choices\":[{\"delta\":{}}]}\n\ndata: [DONE]\n\n"
        );
        assert_eq!(renamer.usage.and_then(|usage| usage.total_tokens), Some(11));
    }

    #[test]
    fn sse_chunks_are_renamed_across_split_lines() {
        let mut renamer = SseRenamer::new("asked");
        let mut out = renamer.push(b"data: {\"model\":\"up\",\"choices\":[]}\n\ndata: {\"mo");
        out.extend(renamer.push(
            b"del\":\"up\",\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"total_tokens\":3}}\r\n\r\n",
        ));
        out.extend(renamer.push(b"data: [DONE]\n\n"));
        out.extend(renamer.finish());
        assert_eq!(
            String::from_utf8_lossy(&out),
            "data: {\"model\":\"asked\",\"choices\":[]}\n\ndata: {\"model\":\"asked\",\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"total_tokens\":3}}\r\n\r\ndata: [DONE]\n\n"
        );
        assert_eq!(
            renamer.usage.and_then(|usage| usage.completion_tokens),
            Some(2)
        );
    }
}
