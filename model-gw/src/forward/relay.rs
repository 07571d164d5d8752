//! A streamed answer relayed as the client reads it, event by event, each edited; its
//! spend log entry written when it ends or fails. A client that leaves before its answer's
//! last event does not end the upstream call: the rest is read (and dropped as it comes)
//! in a task of its own, so that the usage at its end, or the estimate of what it
//! generated, is charged.

use std::sync::Arc;

use sandgate_proto::error::ErrorCode;
use sandgate_proto::models::v1::CallResponse;
use tonic::Status;
use tracing::Span;

use super::clients::Answer;
use super::edit::StreamEditor;
use super::record::CallRecord;
use crate::spend::{Finished, SpendLog};
use crate::support::error;

/// How long the rest of an upstream's body is read after its answer's last event.
const AFTER_LAST_EVENT: std::time::Duration = std::time::Duration::from_secs(1);

/// A streamed answer's events (the first leave with its head): passed on as they arrive,
/// each edited. Its spend log entry is written when the answer ends or fails; when the
/// client goes away first, once the upstream's answer is read to its end (499).
pub(crate) struct Relay {
    pub(crate) spend: Arc<SpendLog>,
    /// The upstream's status.
    pub(crate) status: u16,
    /// When the call must be over, its stream included.
    pub(crate) deadline: tokio::time::Instant,
    /// `None` once the entry is written (or the rest handed to the drain).
    pub(crate) live: Option<Live>,
    /// The upstream call's span: it lasts until the answer is read whole.
    pub(crate) span: Span,
}

/// The upstream's answer being read, its editor and its record.
pub(crate) struct Live {
    pub(crate) response: Answer,
    pub(crate) editor: StreamEditor,
    pub(crate) record: CallRecord,
    /// What a gathering read took of the upstream that is not an event: its end or its
    /// failure, for the next read.
    pub(crate) stashed: Option<Result<Option<bytes::Bytes>, super::failure::UpstreamError>>,
}

/// The most of an upstream's burst one message gathers.
const BURST_BYTES: usize = 64 * 1024;

fn overflowed(span: &Span) -> Read {
    let _entered = span.enter();
    tracing::warn!("an upstream stream's line is longer than the limit; ended");
    Read::Failed(
        ErrorCode::BadGateway,
        502,
        "an event of the upstream's stream is longer than the limit (--gateway-max-event-bytes)"
            .to_owned(),
    )
}

/// What one read of the upstream gave.
enum Read {
    /// Edited events for the client (perhaps none yet: a line is incomplete).
    Events(Vec<u8>),
    /// The upstream's answer ended; what was left of it, edited.
    End(Vec<u8>),
    /// The stream failed: its status, and what the client is told.
    Failed(ErrorCode, u16, String),
}

impl Live {
    /// Reads the upstream's next chunk, by `deadline`, and with `gathering` what else of
    /// a burst is in already. What it logs is in `span` (entered for that only: entering
    /// and leaving a span at every read of a stream cost a tenth of a streamed call's
    /// instructions).
    async fn read(&mut self, deadline: tokio::time::Instant, span: &Span, gathering: bool) -> Read {
        if self.editor.overflowed() {
            return overflowed(span);
        }
        let next = match self.stashed.take() {
            Some(read) => read,
            None => self.response.chunk(deadline).await,
        };
        match next {
            Ok(Some(chunk)) => {
                let mut out = self.take(&chunk);
                if self.editor.overflowed() {
                    return overflowed(span);
                }
                if gathering {
                    self.gather(&mut out).await;
                }
                Read::Events(out)
            }
            Err(err) => {
                let (code, failed, message) = err.describe();
                let _entered = span.enter();
                tracing::warn!(error = %err, "upstream stream failed");
                Read::Failed(code, failed, message.to_owned())
            }
            Ok(None) => Read::End(self.editor.finish()),
        }
    }

    /// A burst (events the upstream sent faster than they are relayed): what its
    /// connection has in already joins `out`, one message and one write to the client
    /// rather than one per event, up to [`BURST_BYTES`]. The yield lets the connection's
    /// task, on this thread, decode its next chunk: the body's channel holds one. Not past
    /// the answer's last event (its settlement starts there), nor past a line over the
    /// limit (the next read fails).
    async fn gather(&mut self, out: &mut Vec<u8>) {
        let mut waited = false;
        while !self.editor.ended() && out.len() < BURST_BYTES {
            tokio::task::yield_now().await;
            match self.response.ready_chunk() {
                // The yield may end at once: hyper's server, having flushed what it
                // wrote, polls the body again in the same turn (`poll_loop`), before
                // the connection's task has run. A second yield lets it run.
                None if !waited => waited = true,
                None => return,
                Some(Ok(Some(chunk))) => {
                    waited = false;
                    let more = self.take(&chunk);
                    if self.editor.overflowed() {
                        return;
                    }
                    out.extend_from_slice(&more);
                }
                Some(read) => {
                    self.stashed = Some(read);
                    return;
                }
            }
        }
    }

    /// `chunk` edited.
    fn take(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.record.bytes_read += chunk.len() as u64;
        self.editor.push(chunk)
    }

    /// The spend log entry: charged the usage the stream reported, or the estimate where
    /// it was not `complete` or reported none (see `usage::charged`).
    fn finish(self, status: u16, complete: bool) -> Finished {
        let usage = self.editor.usage();
        self.record.finish_answered(status, usage, complete)
    }
}

impl Relay {
    /// The first message for the client: the events of the upstream's first chunk that
    /// holds any, which leave with the answer's head at once, not gathered with the burst
    /// behind them. What follows is gathered by [`Self::next`], in the body's polls: here,
    /// in the handler's, each of the gathering's yields polled the request's layers and
    /// entered and left its spans again (about a tenth of a streamed call's instructions
    /// when a burst of 30 events was gathered there), and the head waited for the burst.
    pub(crate) async fn first(&mut self) -> Option<Result<CallResponse, Status>> {
        self.relayed(false).await
    }

    /// The next message for the client, a burst gathered in one; `None` at the end.
    pub(crate) async fn next(&mut self) -> Option<Result<CallResponse, Status>> {
        self.relayed(true).await
    }

    async fn relayed(&mut self, gathering: bool) -> Option<Result<CallResponse, Status>> {
        loop {
            let live = self.live.as_mut()?;
            match live.read(self.deadline, &self.span, gathering).await {
                Read::Events(out) => {
                    if out.is_empty() {
                        continue;
                    }
                    live.record.bytes_out += out.len() as u64;
                    if live.editor.ended() {
                        // The answer's last event: the call's settlement starts now,
                        // so that its hold is released as soon as the store can (see
                        // `settling`). What the upstream still sends after it is read on
                        // apart.
                        let entry = self.settle_at_last_event()?;
                        self.spend.log_answered(entry);
                    }
                    return Some(Ok(message(out)));
                }
                Read::End(rest) => {
                    live.record.bytes_out += rest.len() as u64;
                    let entry = self.finish(self.status, true)?;
                    self.spend.log_answered(entry);
                    return (!rest.is_empty()).then(|| Ok(message(rest)));
                }
                Read::Failed(code, failed, message) => {
                    let entry = self.finish(failed, false)?;
                    // Logged first, so that a client that has its (failed) answer finds
                    // the entry.
                    self.spend.log_now(entry).await;
                    return Some(Err(error(code, message)));
                }
            }
        }
    }

    /// The spend log entry of an answer whose last event is being passed on; the rest of
    /// the upstream's body is read to its end in a task of its own, so that its connection
    /// goes back to the pool: for [`AFTER_LAST_EVENT`] at most (an upstream that holds its
    /// stream open after the last event is closed then, as when the client leaves).
    fn settle_at_last_event(&mut self) -> Option<Finished> {
        // Nothing is stashed past the last event: a gathering read stops there.
        let Live {
            mut response,
            editor,
            record,
            ..
        } = self.live.take()?;
        let entry = {
            let _entered = self.span.enter();
            record.finish_answered(self.status, editor.usage(), true)
        };
        let deadline = self
            .deadline
            .min(tokio::time::Instant::now() + AFTER_LAST_EVENT);
        tokio::spawn(async move { while let Ok(Some(_)) = response.chunk(deadline).await {} });
        Some(entry)
    }

    /// The spend log entry, once: the relay is over, its `status` known.
    fn finish(&mut self, status: u16, complete: bool) -> Option<Finished> {
        let live = self.live.take()?;
        let _entered = self.span.enter();
        Some(live.finish(status, complete))
    }
}

impl Drop for Relay {
    /// The client left. Once its answer's last event was relayed (Codex closes the
    /// connection at `response.completed`, before the upstream's stream has ended) the
    /// call is complete and logged with the upstream's status. Before, the upstream's
    /// answer is read on to its end (within the call's deadline, the read timeout and the
    /// event size limit, each chunk dropped once read: nothing is kept but the editor's
    /// current line) and the call logged 499, charged what the upstream generated.
    fn drop(&mut self) {
        let Some(mut live) = self.live.take() else {
            return;
        };
        if live.editor.ended() {
            let _entered = self.span.enter();
            self.spend.log_soon(live.finish(self.status, true));
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to read on (the process is ending): charged the estimate.
            let _entered = self.span.enter();
            self.spend.log_soon(live.finish(499, false));
            return;
        };
        let (spend, deadline, span) = (self.spend.clone(), self.deadline, self.span.clone());
        runtime.spawn(async move {
            let complete = loop {
                // Nothing is relayed: no burst is gathered.
                match live.read(deadline, &span, false).await {
                    // The answer's last event: what follows it, if anything, is no
                    // generation of the upstream's (an upstream may hold its stream open).
                    Read::Events(_) if live.editor.ended() => break true,
                    Read::Events(_) => {}
                    Read::End(_) => break true,
                    Read::Failed(..) => break false,
                }
            };
            let _entered = span.enter();
            spend.log_soon(live.finish(499, complete));
        });
    }
}

fn message(chunk: Vec<u8>) -> CallResponse {
    CallResponse {
        chunk: chunk.into(),
        ..CallResponse::default()
    }
}
