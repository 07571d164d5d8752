//! A request body sent upstream as its pieces (the client's own bytes and the gateway's
//! edits), without joining them into one buffer.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

/// The pieces of a body as one request body, its length known.
pub(crate) struct Pieces {
    pieces: VecDeque<Bytes>,
    remaining: u64,
}

impl Pieces {
    pub(crate) fn new(pieces: &[Bytes]) -> Self {
        Self {
            remaining: pieces.iter().map(|piece| piece.len() as u64).sum(),
            pieces: pieces
                .iter()
                .filter(|piece| !piece.is_empty())
                .cloned()
                .collect(),
        }
    }
}

impl http_body::Body for Pieces {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let next = self.pieces.pop_front();
        if let Some(piece) = &next {
            self.remaining -= piece.len() as u64;
        }
        Poll::Ready(next.map(|piece| Ok(Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.pieces.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}
