//! A streamed answer relayed as the client reads it, event by event, each edited; its
//! spend log entry written when it ends, fails, or is left by its client.

use std::sync::Arc;

use sandgate_proto::error::ErrorCode;
use sandgate_proto::models::v1::CallResponse;
use tonic::Status;
use tracing::Span;

use super::edit::StreamEditor;
use super::failure::{deadline_passed, upstream_failure};
use super::record::CallRecord;
use crate::spend::{Finished, SpendLog};
use crate::support::error;

/// A streamed answer's events (the first leave with its head): passed on as they arrive, each
/// edited. Its spend log entry is written when the answer ends, fails, or is dropped
/// unfinished (the client went away: 499, and the upstream call ends with it).
pub(crate) struct Relay {
    pub(crate) spend: Arc<SpendLog>,
    /// The upstream's status.
    pub(crate) status: u16,
    pub(crate) response: reqwest::Response,
    /// When the call must be over, its stream included.
    pub(crate) deadline: tokio::time::Instant,
    pub(crate) editor: StreamEditor,
    /// `None` once the entry is written.
    pub(crate) record: Option<CallRecord>,
    /// The upstream call's span: it lasts until the answer is relayed whole.
    pub(crate) span: Span,
}

impl Relay {
    /// The next message for the client; `None` at the end.
    pub(crate) async fn next(&mut self) -> Option<Result<CallResponse, Status>> {
        loop {
            self.record.as_ref()?;
            let Ok(chunk) = tokio::time::timeout_at(self.deadline, self.response.chunk()).await
            else {
                let (code, failed, message) = deadline_passed();
                let entry = self.finish(failed, || {})?;
                self.spend.log_now(entry).await;
                return Some(Err(error(code, message)));
            };
            match chunk {
                Ok(Some(chunk)) => {
                    let out = self.editor.push(&chunk);
                    if self.editor.overflowed() {
                        let entry = self.finish(502, || {
                            tracing::warn!(
                                "an upstream stream's line is longer than the limit; ended"
                            );
                        })?;
                        self.spend.log_now(entry).await;
                        return Some(Err(error(
                            ErrorCode::BadGateway,
                            "an event of the upstream's stream is longer than the limit (--gateway-max-event-bytes)",
                        )));
                    }
                    if !out.is_empty() {
                        if let Some(record) = &mut self.record {
                            record.bytes_out += out.len() as u64;
                        }
                        return Some(Ok(message(out)));
                    }
                }
                Err(err) => {
                    let (code, failed, message) = upstream_failure(&err);
                    let entry = self.finish(failed, || {
                        tracing::warn!(error = %err.without_url(), "upstream stream failed");
                    })?;
                    // Logged first, so that a client that has its (failed) answer finds
                    // the entry.
                    self.spend.log_now(entry).await;
                    return Some(Err(error(code, message)));
                }
                Ok(None) => {
                    let rest = self.editor.finish();
                    if let Some(record) = &mut self.record {
                        record.bytes_out += rest.len() as u64;
                    }
                    let entry = self.finish(self.status, || {})?;
                    self.spend.log_soon(entry);
                    return (!rest.is_empty()).then(|| Ok(message(rest)));
                }
            }
        }
    }

    /// The spend log entry, once: the relay is over, its `status` known (`also` runs in the
    /// upstream span too).
    fn finish(&mut self, status: u16, also: impl FnOnce()) -> Option<Finished> {
        let record = self.record.take()?;
        let _entered = self.span.enter();
        also();
        Some(record.finish(status, self.editor.usage()))
    }
}

impl Drop for Relay {
    /// The client left. Once its answer's last event was relayed (Codex closes the
    /// connection at `response.completed`, before the upstream's stream has ended) the
    /// call is complete and logged with the upstream's status; before, it is 499.
    fn drop(&mut self) {
        let status = if self.editor.ended() {
            self.status
        } else {
            499
        };
        if let Some(entry) = self.finish(status, || {}) {
            self.spend.log_soon(entry);
        }
    }
}

fn message(chunk: Vec<u8>) -> CallResponse {
    CallResponse {
        chunk: chunk.into(),
        ..CallResponse::default()
    }
}
