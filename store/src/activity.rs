//! Sandbox activity: the marks that keep a claimed sandbox from being paused idle
//! (`RUNTIME_IDLE_SECONDS`). Each of Sandgate's jobs that sees a conversation's activity
//! (the webhook, the event store, the model gateway) marks its sandbox here. The mark is
//! the sandbox record's `active_at_ms`, which places it in the running sweep index: every
//! replica's marks count, wherever the reconciler that pauses runs.
//!
//! Marks are throttled so that a busy conversation does not write on every call: this
//! process writes a sandbox at most once per `every` (a quarter of the idle period), and
//! skips the write when the record already says so (another replica marked it). A call in
//! progress (a long LLM call, a stream) is held: marked at its start, every `every` while
//! it lasts, and at its end.
//!
//! A session found to be no sandbox's (a gateway call from outside any sandbox, or one
//! before its conversation's first webhook names its sandbox) is left alone for a
//! moment: its calls cost no store read each, at their start or their end.
//!
//! The same jobs record the first webhook and the first LLM call on the timeline of the
//! sandbox's start (`first.rs`), whether idle pause is on or not.

mod first;
mod memo;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use uuid::Uuid;

use crate::sandboxes::{SandboxState, SandboxStore};
use crate::{ConversationStore, Store, StoreResult};

/// The throttle's entries past which those older than the throttle are dropped: memory
/// stays bounded by the sandboxes active in one interval.
const RECENT_PRUNE_AT: usize = 10_000;

/// How long a session whose sandbox is not found, or whose first call's mark is under
/// way, is left alone (at most the throttle): the calls of a session that is no
/// sandbox's cost a read per this while.
const UNPLACED_MEMO_MS: i64 = 2_000;

/// Compare-and-swap attempts of one mark; a mark that keeps losing is skipped (the
/// writer that won moved the record anyway, and the next mark comes soon).
const MARK_ATTEMPTS: usize = 4;

/// Marks sandboxes active. Cheap to share: one per process, behind an `Arc`.
pub struct Activity {
    sandboxes: Arc<dyn SandboxStore>,
    conversations: Arc<dyn ConversationStore>,
    /// How often one sandbox (or session) is marked at most; `None`: idle pause is off,
    /// nothing is marked.
    every: Option<Duration>,
    /// What this process last marked (`sandbox:<id>` or `session:<id>`), and when.
    recent: Mutex<HashMap<String, i64>>,
    /// The timeline phases this process knows are recorded (`first.rs`).
    firsts: memo::Memo,
    /// The sessions this process found no sandbox for, a moment ago.
    unplaced: memo::Memo,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

impl Activity {
    /// Marks for an idle period of `idle`; zero turns idle pause, and the marks, off.
    pub fn new(store: &Store, idle: Duration) -> Arc<Self> {
        Arc::new(Self {
            sandboxes: store.sandboxes.clone(),
            conversations: store.conversations.clone(),
            every: (!idle.is_zero()).then(|| (idle / 4).max(Duration::from_millis(100))),
            recent: Mutex::default(),
            firsts: memo::Memo::default(),
            unplaced: memo::Memo::default(),
        })
    }

    /// Whether `key` was marked less than the throttle ago by this process; if not, it
    /// counts as marked now.
    fn throttled(&self, key: String, every: Duration) -> bool {
        let now = now_ms();
        let every_ms = every.as_millis() as i64;
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if recent.get(&key).is_some_and(|at| now - at < every_ms) {
            return true;
        }
        if recent.len() >= RECENT_PRUNE_AT {
            recent.retain(|_, at| now - *at < every_ms);
        }
        recent.insert(key, now);
        false
    }

    /// The sandbox `runtime_id` showed activity (a webhook, an event batch it sent).
    pub async fn sandbox(&self, runtime_id: &str) {
        self.first_webhook(runtime_id).await;
        let Some(every) = self.every else { return };
        if self.throttled(format!("sandbox:{runtime_id}"), every) {
            return;
        }
        if let Err(err) = self.mark(runtime_id, every).await {
            tracing::warn!(runtime_id, error = %err, "cannot record the sandbox's activity");
        }
    }

    /// A gateway call carried `session_id`: the session a sandbox was started for, or a
    /// conversation whose records a sandbox sent.
    pub async fn session(&self, session_id: &str) {
        let Some(every) = self.every else { return };
        let now = now_ms();
        if self.unplaced.knows(session_id, now)
            || self.throttled(format!("session:{session_id}"), every)
        {
            return;
        }
        match self.sandbox_of(session_id).await {
            Ok(Some(runtime_id)) => {
                if let Err(err) = self.mark(&runtime_id, every).await {
                    tracing::warn!(%runtime_id, error = %err, "cannot record the sandbox's activity");
                }
            }
            Ok(None) => {
                let memo_ms = UNPLACED_MEMO_MS.min(every.as_millis() as i64);
                self.unplaced
                    .remember(session_id.to_owned(), now + memo_ms, now);
            }
            Err(err) => tracing::warn!(error = %err, "cannot find the sandbox of a session"),
        }
    }

    /// Holds `session_id` active while the returned guard lives: marked now, every
    /// throttle interval after, and when the guard drops. `None` when idle pause is off.
    pub fn hold(self: &Arc<Self>, session_id: String) -> Option<Held> {
        let every = self.every?;
        let this = self.clone();
        let session = session_id.clone();
        let ticker = tokio::spawn(async move {
            loop {
                this.session(&session).await;
                tokio::time::sleep(every).await;
            }
        });
        Some(Held {
            activity: self.clone(),
            session_id,
            ticker,
        })
    }

    /// The sandbox behind a gateway session id.
    async fn sandbox_of(&self, session_id: &str) -> StoreResult<Option<String>> {
        if let Some(record) = self.sandboxes.sandbox_for_session(session_id).await? {
            return Ok(Some(record.runtime_id));
        }
        let Ok(id) = Uuid::parse_str(session_id) else {
            return Ok(None);
        };
        Ok(self.conversations.get(id).await?.and_then(|conversation| {
            conversation
                .owner
                .strip_prefix("sandbox:")
                .map(str::to_owned)
        }))
    }

    /// Writes the mark on a claimed, running sandbox, unless it already says it was
    /// active within `every`.
    async fn mark(&self, runtime_id: &str, every: Duration) -> StoreResult<()> {
        for _ in 0..MARK_ATTEMPTS {
            let Some(record) = self.sandboxes.sandbox(runtime_id).await? else {
                return Ok(());
            };
            let now = now_ms();
            if record.session_id.is_none()
                || record.state != SandboxState::Running
                || now - record.active_at_ms < every.as_millis() as i64
            {
                return Ok(());
            }
            let mut next = record.clone();
            next.active_at_ms = now;
            next.version += 1;
            if self
                .sandboxes
                .put_sandbox(Some(&record), &next, None)
                .await?
            {
                return Ok(());
            }
        }
        Ok(())
    }
}

/// A call in progress that keeps its session's sandbox active ([`Activity::hold`]).
pub struct Held {
    activity: Arc<Activity>,
    session_id: String,
    ticker: tokio::task::JoinHandle<()>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.ticker.abort();
        // The call's end is activity too: the idle period counts from it. Marked past the
        // throttle, which the ticker's marks would otherwise hold it to.
        let activity = self.activity.clone();
        let session = std::mem::take(&mut self.session_id);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                activity
                    .recent
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&format!("session:{session}"));
                activity.session(&session).await;
            });
        }
    }
}
