//! A ledger written off the caller's path, merged: the runtime API counts a conversation
//! update or an event batch as each is delivered, and a store write per delivery (one
//! more round trip on its path, and the store's work) cost a fifth of the deliveries'
//! rate. Here one task writes what arrived in the [`GATHER_FOR`] after a first count, and
//! while its last write was in flight, summed by counter: under load, hundreds of
//! deliveries make one write, where a write at once held two or three (each paying its
//! transaction's fixed work: BENCHMARKS.md, `ledger_upkeep`). A write the store
//! refuses is kept, merged with what follows, and tried again a second later: a count
//! may be late, never dropped while the process runs.
//! A read through it first waits (a couple of seconds at most) for what this process
//! counted before it to be written: a reader sees its own process's counts. A stop waits
//! for every count to be written ([`Coalescing::flush`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{mpsc, watch};

use super::{ConversationOwner, LedgerCount, LedgerRows, LedgerScope, LedgerStore, LedgerSums};
use crate::StoreResult;
use std::collections::HashMap;

/// A write the store refused is tried again this long after.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// How long the writer gathers counts after the first, before it writes them (as the
/// spend log's batches wait 10 ms): what a read waits for at most beside the write.
const GATHER_FOR: Duration = Duration::from_millis(20);
/// The longest a read waits for this process's counts to be written.
const READ_WAITS_AT_MOST: Duration = Duration::from_secs(2);
/// The longest a stop waits for them (a store refusing writes is tried every second).
const STOP_WAITS_AT_MOST: Duration = Duration::from_secs(10);

/// `inner`, its counts written by one task (see the module).
pub struct Coalescing {
    inner: Arc<dyn LedgerStore>,
    queue: mpsc::UnboundedSender<(u64, Vec<LedgerCount>)>,
    /// The number of the last batch sent, and of the last written.
    sent: AtomicU64,
    written: watch::Receiver<u64>,
}

impl Coalescing {
    /// Starts the writer, on the current Tokio runtime. Its memory is bounded by the
    /// distinct counters waiting (a day, a scope, an id, a measure), not by the counts.
    pub fn new(inner: Arc<dyn LedgerStore>) -> Self {
        let (queue, received) = mpsc::unbounded_channel();
        let (wrote, written) = watch::channel(0);
        tokio::spawn(write(inner.clone(), received, wrote));
        Self {
            inner,
            queue,
            sent: AtomicU64::new(0),
            written,
        }
    }

    /// Waits until what was sent before now is written, or `at_most`; whether it was.
    async fn written_within(&self, at_most: Duration) -> bool {
        let sent = self.sent.load(Ordering::Acquire);
        let mut written = self.written.clone();
        matches!(
            tokio::time::timeout(at_most, written.wait_for(|done| *done >= sent)).await,
            Ok(Ok(_))
        )
    }

    async fn settled(&self) {
        self.written_within(READ_WAITS_AT_MOST).await;
    }

    /// Waits, at a stop, for every count this process made to be written (at most
    /// [`STOP_WAITS_AT_MOST`]: a store that stays unreachable loses what is queued, and
    /// that is said).
    pub async fn flush(&self) {
        if !self.written_within(STOP_WAITS_AT_MOST).await {
            tracing::error!("the store stayed unreachable: ledger counts not stored at stop");
        }
    }
}

async fn write(
    inner: Arc<dyn LedgerStore>,
    mut received: mpsc::UnboundedReceiver<(u64, Vec<LedgerCount>)>,
    wrote: watch::Sender<u64>,
) {
    let mut sums = LedgerSums::default();
    while let Some((mut last, counts)) = received.recv().await {
        sums.merge(counts);
        tokio::time::sleep(GATHER_FOR).await;
        loop {
            while let Ok((number, more)) = received.try_recv() {
                last = last.max(number);
                sums.merge(more);
            }
            let batch = sums.take();
            match inner.add_ledger(&batch).await {
                Ok(()) => {
                    wrote.send_replace(last);
                    break;
                }
                Err(err) => {
                    metrics::counter!("sandgate_ledger_failures_total").increment(1);
                    tracing::error!(error = %err, counters = batch.len(),
                        "ledger counts not written; kept, tried again in a second");
                    sums.merge(batch);
                    tokio::time::sleep(RETRY_AFTER).await;
                }
            }
        }
    }
}

#[async_trait]
impl LedgerStore for Coalescing {
    async fn add_ledger(&self, counts: &[LedgerCount]) -> StoreResult<()> {
        let number = self.sent.fetch_add(1, Ordering::AcqRel) + 1;
        if self.queue.send((number, counts.to_vec())).is_err() {
            // The writer is gone (its runtime is shutting down): written here instead.
            return self.inner.add_ledger(counts).await;
        }
        Ok(())
    }

    async fn ledger_of(
        &self,
        scope: LedgerScope,
        ids: &[String],
        from: u32,
        to: u32,
    ) -> StoreResult<LedgerRows> {
        self.settled().await;
        self.inner.ledger_of(scope, ids, from, to).await
    }

    async fn ledger_ids(
        &self,
        scope: LedgerScope,
        from: u32,
        to: u32,
        within: &str,
        after: &str,
        limit: usize,
    ) -> StoreResult<(Vec<String>, u64)> {
        self.settled().await;
        self.inner
            .ledger_ids(scope, from, to, within, after, limit)
            .await
    }

    fn note_tags(&self, conversation: &str, tags: &std::collections::BTreeMap<String, String>) {
        self.inner.note_tags(conversation, tags);
    }

    async fn own_conversations(&self, owners: &[(String, ConversationOwner)]) -> StoreResult<()> {
        self.inner.own_conversations(owners).await
    }

    async fn conversation_owners(
        &self,
        conversations: &[String],
    ) -> StoreResult<HashMap<String, ConversationOwner>> {
        self.inner.conversation_owners(conversations).await
    }

    async fn ledger_days(
        &self,
        scope: LedgerScope,
        id: &str,
        from: u32,
        to: u32,
    ) -> StoreResult<Vec<(u32, std::collections::BTreeMap<super::Measure, f64>)>> {
        self.settled().await;
        self.inner.ledger_days(scope, id, from, to).await
    }

    async fn conversation_models(&self, conversation: &str) -> StoreResult<Vec<String>> {
        self.settled().await;
        self.inner.conversation_models(conversation).await
    }

    async fn link_session(&self, session: &str, conversation: &str) -> StoreResult<()> {
        self.inner.link_session(session, conversation).await
    }

    async fn session_conversation(&self, session: &str) -> StoreResult<Option<String>> {
        self.inner.session_conversation(session).await
    }

    async fn conversation_session(&self, conversation: &str) -> StoreResult<Option<String>> {
        self.inner.conversation_session(conversation).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::ledger::{ConversationOwner, Measure};

    /// A store whose writes take a while: what was written, once each write ends.
    #[derive(Default)]
    struct Slow(Mutex<Vec<LedgerCount>>);

    #[async_trait]
    impl LedgerStore for Slow {
        async fn add_ledger(&self, counts: &[LedgerCount]) -> StoreResult<()> {
            tokio::time::sleep(Duration::from_millis(300)).await;
            self.0.lock().expect("lock").extend_from_slice(counts);
            Ok(())
        }
        async fn ledger_of(
            &self,
            _: LedgerScope,
            _: &[String],
            _: u32,
            _: u32,
        ) -> StoreResult<LedgerRows> {
            Ok(LedgerRows::new())
        }
        async fn ledger_ids(
            &self,
            _: LedgerScope,
            _: u32,
            _: u32,
            _: &str,
            _: &str,
            _: usize,
        ) -> StoreResult<(Vec<String>, u64)> {
            Ok((Vec::new(), 0))
        }
        async fn own_conversations(&self, _: &[(String, ConversationOwner)]) -> StoreResult<()> {
            Ok(())
        }
        async fn conversation_owners(
            &self,
            _: &[String],
        ) -> StoreResult<HashMap<String, ConversationOwner>> {
            Ok(HashMap::new())
        }
        async fn conversation_models(&self, _: &str) -> StoreResult<Vec<String>> {
            Ok(Vec::new())
        }
        async fn link_session(&self, _: &str, _: &str) -> StoreResult<()> {
            Ok(())
        }
        async fn session_conversation(&self, _: &str) -> StoreResult<Option<String>> {
            Ok(None)
        }
        async fn conversation_session(&self, _: &str) -> StoreResult<Option<String>> {
            Ok(None)
        }
    }

    fn webhook(amount: f64) -> LedgerCount {
        LedgerCount {
            day: 1,
            scope: LedgerScope::Conversation,
            id: "c".to_owned(),
            measure: Measure::Webhooks,
            amount,
        }
    }

    #[tokio::test]
    async fn a_stop_waits_for_every_count_queued_behind_a_slow_write() {
        let slow = Arc::new(Slow::default());
        let ledger = Coalescing::new(slow.clone());
        // The first write is in flight; the next two wait behind it, merged.
        for amount in [1.0, 2.0, 4.0] {
            ledger.add_ledger(&[webhook(amount)]).await.expect("queued");
            tokio::task::yield_now().await;
        }
        assert!(
            slow.0.lock().expect("lock").is_empty(),
            "nothing written yet"
        );
        ledger.flush().await;
        let written: f64 = slow
            .0
            .lock()
            .expect("lock")
            .iter()
            .map(|count| count.amount)
            .sum();
        assert_eq!(written, 7.0);
    }
}
