//! The spend log's writer: every call's entry, and what it adds to its virtual key's
//! spend, queued and written in batches (one store round trip for many calls, and none on
//! a call's path), or at once for a failed answer, whose entry is in the log by the time
//! its client has the answer. Also what an entry keeps of a client's values.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::HeaderMap;
use sandgate_store::admission::{ScopeSpend, Settlement};
use sandgate_store::models::SpendLogRetention;
use sandgate_store::{SpendLogEntry, Store};

use crate::admit::Settle;

use crate::headers::{SPEND_LOGS_METADATA, SPEND_LOGS_METADATA_LIMIT};

/// A finished call: its spend log entry, and what it settles (its spend, its hold).
pub(crate) type Finished = (SpendLogEntry, Option<Settle>);

/// How long a spend log entry waits for others to share its write, at most.
const SPEND_LOG_DELAY: Duration = Duration::from_millis(10);

/// Spend log entries queued behind a slow store at most; past it new ones are dropped
/// (and said so in the log) rather than growing memory.
const MAX_QUEUED_SPEND_ENTRIES: usize = 10_000;

/// The spend log's queue and its writer; shared by the calls in flight.
pub(crate) struct SpendLog {
    store: Store,
    retention: SpendLogRetention,
    /// Spend log entries waiting to be written.
    queue: Mutex<SpendQueue>,
    /// Held while the queue is written out.
    writer: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct SpendQueue {
    entries: Vec<SpendLogEntry>,
    /// What the virtual keys' calls settle, written with the entries.
    settles: Vec<Settle>,
    /// A delayed write is scheduled: entries queued for one need not schedule another.
    scheduled: bool,
}

/// What many calls settle as one settlement, their spend summed per scope and window:
/// under load a batch holds hundreds of calls of a few keys, and the store then writes a
/// few counters, not hundreds (each call's hold is still released on its own).
fn summed(settles: Vec<Settle>) -> Settlement {
    let mut sums: std::collections::HashMap<_, (f64, u64)> =
        std::collections::HashMap::with_capacity(settles.len());
    let mut releases = Vec::new();
    for settle in settles {
        for item in settle.spend {
            let sum = sums.entry((item.scope, item.window)).or_default();
            sum.0 += item.amount;
            sum.1 = sum.1.saturating_add(item.tokens);
        }
        releases.extend(settle.release);
    }
    Settlement {
        spend: sums
            .into_iter()
            .map(|((scope, window), (amount, tokens))| ScopeSpend {
                scope,
                window,
                amount,
                tokens,
            })
            .collect(),
        releases,
        now_ms: crate::support::now_ms(),
    }
}

impl SpendLog {
    pub(crate) fn new(store: Store, retention: SpendLogRetention) -> Self {
        Self {
            store,
            retention,
            queue: Mutex::default(),
            writer: tokio::sync::Mutex::default(),
        }
    }

    /// Queues `entry` for the spend log; `true` when it is the first to wait for a delayed
    /// write (and `schedule` asks for one), so that its caller schedules it.
    fn enqueue(&self, entry: SpendLogEntry, settle: Option<Settle>, schedule: bool) -> bool {
        let Ok(mut pending) = self.queue.lock() else {
            return false;
        };
        // A call's settlement is queued whatever the log's length: it is what its budgets
        // hold to.
        pending.settles.extend(settle);
        if pending.entries.len() >= MAX_QUEUED_SPEND_ENTRIES {
            tracing::warn!(request_id = %entry.request_id, "spend log queue full; entry dropped");
            return false;
        }
        pending.entries.push(entry);
        let first = schedule && !pending.scheduled;
        pending.scheduled |= schedule;
        first
    }

    /// Writes `entry` now, with whatever else waits: for a failed answer, whose entry is in
    /// the log by the time the client has the answer.
    pub(crate) async fn log_now(&self, (entry, charge): Finished) {
        self.enqueue(entry, charge, false);
        self.write(false).await;
    }

    /// Queues `entry` to be written within [`SPEND_LOG_DELAY`], with the entries of the calls
    /// that end meanwhile: one store round trip for many calls, and none on a call's path.
    pub(crate) fn log_soon(self: &Arc<Self>, (entry, charge): Finished) {
        if self.enqueue(entry, charge, true) {
            // Weak: a stopped gateway (which flushed its queue) is not kept alive, nor its
            // store open, by a write that has nothing left to do.
            let log = Arc::downgrade(self);
            tokio::spawn(async move {
                tokio::time::sleep(SPEND_LOG_DELAY).await;
                if let Some(log) = log.upgrade() {
                    log.write(true).await;
                }
            });
        }
    }

    /// Writes the entries still queued: once the server has stopped, so that a stop loses
    /// none.
    pub(crate) async fn flush(&self) {
        self.write(false).await;
    }

    /// Writes what is queued, in batches, until the queue is empty. One write at a time:
    /// a caller that waited finds its entry written, or writes it. `delayed`: the
    /// scheduled write, which is over once it finds the queue empty.
    async fn write(&self, delayed: bool) {
        let _writing = self.writer.lock().await;
        loop {
            let (batch, settles) = match self.queue.lock() {
                Ok(mut pending) if !pending.entries.is_empty() || !pending.settles.is_empty() => (
                    std::mem::take(&mut pending.entries),
                    std::mem::take(&mut pending.settles),
                ),
                Ok(mut pending) => {
                    pending.scheduled &= !delayed;
                    return;
                }
                Err(_) => return,
            };
            let calls = settles.len();
            let settlement = summed(settles);
            if calls > 0
                && let Err(err) = self.store.keys.settle(&settlement).await
            {
                // Their holds end with their leases.
                tracing::warn!(error = %err, calls, "virtual keys' spend lost");
            }
            if !batch.is_empty()
                && let Err(err) = self
                    .store
                    .spend_log
                    .append_spend_logs(&batch, self.retention)
                    .await
            {
                tracing::warn!(error = %err, entries = batch.len(), "spend log entries lost");
            }
        }
    }
}

/// The longest `user` or session id a spend log entry keeps: a client's value of any
/// length is cut there (at a character boundary).
const MAX_KEPT_TEXT: usize = 256;

pub(crate) fn bounded(text: &str) -> String {
    match text.char_indices().nth(MAX_KEPT_TEXT) {
        Some((end, _)) => text[..end].to_owned(),
        None => text.to_owned(),
    }
}

/// The spend log metadata header, when it holds JSON of at most
/// [`SPEND_LOGS_METADATA_LIMIT`] bytes; anything else is logged and ignored.
pub(crate) fn spend_metadata(headers: &HeaderMap) -> Option<serde_json::Value> {
    let (name, raw) = SPEND_LOGS_METADATA
        .iter()
        .find_map(|name| Some((*name, headers.get(*name)?)))?;
    if raw.len() > SPEND_LOGS_METADATA_LIMIT {
        tracing::warn!(
            bytes = raw.len(),
            limit = SPEND_LOGS_METADATA_LIMIT,
            "{name} is larger than the limit; ignored"
        );
        return None;
    }
    match serde_json::from_slice(raw.as_bytes()) {
        Ok(value) => Some(value),
        Err(err) => {
            tracing::warn!(error = %err, "{name} is not JSON; ignored");
            None
        }
    }
}
