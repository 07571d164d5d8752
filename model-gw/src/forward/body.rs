//! A request body sent upstream as its pieces (the client's own bytes and the gateway's
//! edits), without joining them into one buffer.

use bytes::Bytes;

/// The pieces of a body as one request body, its length known.
struct Pieces {
    pieces: std::collections::VecDeque<Bytes>,
    remaining: u64,
}

impl http_body::Body for Pieces {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let next = self.pieces.pop_front();
        if let Some(piece) = &next {
            self.remaining -= piece.len() as u64;
        }
        std::task::Poll::Ready(next.map(|piece| Ok(http_body::Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.pieces.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining)
    }
}

pub(crate) fn request_body(pieces: &[Bytes]) -> reqwest::Body {
    match pieces {
        [one] => reqwest::Body::from(one.clone()),
        _ => reqwest::Body::wrap(Pieces {
            remaining: pieces.iter().map(|piece| piece.len() as u64).sum(),
            pieces: pieces
                .iter()
                .filter(|piece| !piece.is_empty())
                .cloned()
                .collect(),
        }),
    }
}
