//! The lines of a byte stream as they complete, for everything that reads an upstream's
//! server-sent events.

/// The lines of a byte stream as they complete: what arrives is kept until its line ends,
/// up to a limit. Each byte is looked at once, however the lines are cut into chunks.
pub(crate) struct Lines {
    /// The start of a line whose end has not arrived yet.
    pending: Vec<u8>,
    /// The longest line kept.
    max: usize,
    /// A line passed `max`: the stream is over, nothing more is taken.
    overflowed: bool,
}

impl Default for Lines {
    fn default() -> Self {
        Self::with_limit(usize::MAX)
    }
}

impl Lines {
    pub(crate) fn with_limit(max: usize) -> Self {
        Self {
            pending: Vec::new(),
            max,
            overflowed: false,
        }
    }

    /// Whether a line passed the limit (and the stream was given up).
    pub(crate) fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// The complete lines of what arrived so far, `chunk` included, ends kept; `None`
    /// while no line has ended, or once a line passed the limit.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Option<Vec<u8>> {
        if self.overflowed {
            return None;
        }
        // What was pending holds no line end: only `chunk` is searched.
        let first_end = chunk.iter().position(|byte| *byte == b'\n');
        let first_line = self.pending.len() + first_end.map_or(chunk.len(), |end| end + 1);
        if first_line > self.max {
            self.overflowed = true;
            self.pending = Vec::new();
            return None;
        }
        let Some(last_end) = chunk.iter().rposition(|byte| *byte == b'\n') else {
            self.pending.extend_from_slice(chunk);
            return None;
        };
        self.pending.extend_from_slice(&chunk[..=last_end]);
        Some(std::mem::replace(
            &mut self.pending,
            chunk[last_end + 1..].to_vec(),
        ))
    }

    /// What is left once the stream ended: a last line without its end.
    pub(crate) fn rest(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }
}
