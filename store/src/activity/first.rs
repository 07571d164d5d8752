//! The first webhook and the first LLM call of a start, on its timeline
//! (`crate::timeline`): written once per sandbox by compare-and-swap, and remembered by
//! this process once written, so that the webhooks and calls that follow cost no store
//! read.
//!
//! A webhook names its sandbox (its session key does), which keeps its timeline for good:
//! remembered until the memo is full. A gateway call names a session, whose sandbox
//! changes when the session is started again after its sandbox stopped: remembered for
//! a while only, so that a new start's first call is timed (up to that while late,
//! should the new start come within it of the old one's calls).

use std::sync::Arc;

use super::{Activity, MARK_ATTEMPTS, UNPLACED_MEMO_MS, now_ms};
use crate::StoreResult;
use crate::timeline::Phase;

/// How long a session's first call is remembered as recorded.
const SESSION_MEMO_MS: i64 = 300_000;
/// When a call's mark looks for its session's sandbox again, after not finding it (a
/// conversation's first call may come before its first webhook records it) or losing
/// the write to another writer: all within `UNPLACED_MEMO_MS`, so that a conversation
/// whose only calls come before its webhook still has its first call timed.
const RETRIES_MS: [u64; 4] = [100, 200, 400, 800];

impl Activity {
    /// The sandbox `runtime_id` sent a webhook or an event batch: the first of its
    /// start's is recorded.
    pub(super) async fn first_webhook(&self, runtime_id: &str) {
        let key = format!("webhook:{runtime_id}");
        let now = now_ms();
        if self.firsts.knows(&key, now) {
            return;
        }
        match self.first(runtime_id, Phase::FirstWebhook, now).await {
            Ok(true) => self.firsts.remember(key, i64::MAX, now),
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(runtime_id, error = %err, "cannot record the sandbox's first webhook");
            }
        }
    }

    /// A gateway call carrying `session_id` starts: the first of its sandbox's start is
    /// recorded, in the background so that the call does not wait for the store.
    pub fn llm_call(self: &Arc<Self>, session_id: &str) {
        let key = format!("llm:{session_id}");
        let now = now_ms();
        if self.firsts.knows(&key, now) {
            return;
        }
        // At once, so that the calls that follow while the mark is written spawn none.
        self.firsts
            .remember(key.clone(), now + UNPLACED_MEMO_MS, now);
        let this = self.clone();
        let session = session_id.to_owned();
        tokio::spawn(async move {
            let mut retries = RETRIES_MS.iter();
            loop {
                let marked = match this.sandbox_of(&session).await {
                    Ok(Some(runtime_id)) => this.first(&runtime_id, Phase::FirstLlmCall, now).await,
                    Ok(None) => Ok(false),
                    Err(err) => Err(err),
                };
                match (marked, retries.next()) {
                    (Ok(true), _) => {
                        return this.firsts.remember(key, now + SESSION_MEMO_MS, now_ms());
                    }
                    (Ok(false), Some(ms)) => {
                        tokio::time::sleep(std::time::Duration::from_millis(*ms)).await;
                    }
                    // Still no sandbox: remembered as such until the memo lapses.
                    (Ok(false), None) => return,
                    (Err(err), _) => {
                        this.firsts.forget(&key);
                        return tracing::warn!(error = %err, "cannot record the sandbox's first LLM call");
                    }
                }
            }
        });
    }

    /// Writes `phase` at `at_ms` on the timeline of `runtime_id`, unless it is there.
    /// `true`: settled (written now or before, or the sandbox has no timeline to write
    /// it on and never will: it is gone, or was claimed before timelines were kept);
    /// `false`: not yet (a warm sandbox not claimed, or a write that kept losing).
    pub(super) async fn first(
        &self,
        runtime_id: &str,
        phase: Phase,
        at_ms: i64,
    ) -> StoreResult<bool> {
        for _ in 0..MARK_ATTEMPTS {
            let Some(record) = self.sandboxes.sandbox(runtime_id).await? else {
                return Ok(true);
            };
            if record.session_id.is_none() {
                return Ok(false);
            }
            let mut next = record.clone();
            let Some(timeline) = next.timeline.as_mut() else {
                return Ok(true);
            };
            if !timeline.set(phase, at_ms) {
                return Ok(true);
            }
            next.version += 1;
            if self
                .sandboxes
                .put_sandbox(Some(&record), &next, None)
                .await?
            {
                if let Some(timeline) = &next.timeline {
                    timeline.observe(phase);
                }
                return Ok(true);
            }
        }
        Ok(false)
    }
}
