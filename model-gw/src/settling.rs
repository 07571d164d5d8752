//! Held calls' settlements, written as their calls end but off their paths: a client has
//! its answer's last event without waiting for the store, and the settlements of calls
//! that end while one is written go together in the next write (summed per scope), so a
//! busy replica makes one settlement round trip for many calls.
//!
//! What a settlement off the path must not do is refuse the client's next call over the
//! hold it has not released yet. So an admission refused while holds are taken tries once
//! more, after the settlements this replica had queued are written (at most
//! [`CATCH_UP_AT_MOST`]); when this replica had none queued, after [`SETTLEMENT_GRACE`],
//! the time another replica's settlement takes to land (its write starts as its call's
//! last event leaves).

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

use crate::admit::Settle;

/// How long a refused admission waits for this replica's queued settlements, at most.
pub(crate) const CATCH_UP_AT_MOST: Duration = Duration::from_secs(1);

/// How long a refused admission waits for another replica's settlements, when this one
/// had none queued: a settlement's write starts as its call's last event leaves, so it
/// lands within one store round trip of it.
pub(crate) const SETTLEMENT_GRACE: Duration = Duration::from_millis(20);

/// The settlements queued and the one writer's progress.
pub(crate) struct Settling {
    queue: Mutex<Queue>,
    /// Every settlement numbered at most this has been written, or handed to the spend
    /// log's queue to be tried again.
    written: watch::Sender<u64>,
}

#[derive(Default)]
struct Queue {
    settles: Vec<Settle>,
    /// The number of the last settlement queued.
    queued: u64,
    /// A writer is running: settlements queued meanwhile are its next write.
    writing: bool,
}

impl Default for Settling {
    fn default() -> Self {
        Self {
            queue: Mutex::default(),
            written: watch::Sender::new(0),
        }
    }
}

impl Settling {
    /// Queues `settle`; `true` when no writer runs, so that the caller starts one.
    pub(crate) fn push(&self, settle: Settle) -> bool {
        let Ok(mut queue) = self.queue.lock() else {
            return false;
        };
        queue.settles.push(settle);
        queue.queued += 1;
        !std::mem::replace(&mut queue.writing, true)
    }

    /// The writer's next batch and the number of its last settlement; `None` once nothing
    /// is queued (the writer then stops, and the next push starts another).
    pub(crate) fn take(&self) -> Option<(Vec<Settle>, u64)> {
        let mut queue = self.queue.lock().ok()?;
        if queue.settles.is_empty() {
            queue.writing = false;
            return None;
        }
        Some((std::mem::take(&mut queue.settles), queue.queued))
    }

    /// The writer has written (or handed on) every settlement numbered at most `through`.
    pub(crate) fn written(&self, through: u64) {
        self.written.send_if_modified(|written| {
            let moved = through > *written;
            *written = (*written).max(through);
            moved
        });
    }

    /// Waits until every settlement queued so far is written, at most `within`; `false`
    /// at once when none was waiting.
    pub(crate) async fn caught_up(&self, within: Duration) -> bool {
        let Some(target) = self.queue.lock().ok().map(|queue| queue.queued) else {
            return false;
        };
        let mut written = self.written.subscribe();
        if *written.borrow() >= target {
            return false;
        }
        let _ = tokio::time::timeout(within, written.wait_for(|written| *written >= target)).await;
        true
    }

    /// Before a refused admission is tried again: this replica's queued settlements
    /// written, or, when it had none, another replica's given their time to land.
    pub(crate) async fn before_retry(&self) {
        if !self.caught_up(CATCH_UP_AT_MOST).await {
            tokio::time::sleep(SETTLEMENT_GRACE).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn settlements_are_written_in_batches_and_waited_for() {
        let settling = Settling::default();
        assert!(!settling.caught_up(Duration::ZERO).await, "nothing queued");
        assert!(
            settling.push(Settle::default()),
            "the first starts a writer"
        );
        assert!(
            !settling.push(Settle::default()),
            "the second joins its batch"
        );
        let (batch, through) = settling.take().unwrap_or_default();
        assert_eq!((batch.len(), through), (2, 2));
        assert!(!settling.push(Settle::default()), "the writer still runs");
        let (waited, ()) = tokio::join!(settling.caught_up(CATCH_UP_AT_MOST), async {
            tokio::task::yield_now().await;
            let (batch, through) = settling.take().unwrap_or_default();
            assert_eq!((batch.len(), through), (1, 3));
            settling.written(2);
            settling.written(through);
        });
        assert!(waited, "it waited for the third");
        assert!(!settling.caught_up(Duration::ZERO).await, "all written");
        assert!(settling.take().is_none(), "the writer stops");
        assert!(
            settling.push(Settle::default()),
            "and the next push starts one"
        );
    }
}
