//! The spend log's writer: every call's entry, and what it adds to its virtual key's
//! spend, queued and written in batches (one store round trip for many calls, and none on
//! a call's path), or at once for a failed answer, whose entry is in the log by the time
//! its client has the answer. Also what an entry keeps of a client's values.
//!
//! Each entry's spend is also added to the reporting counters (per key, user, team,
//! team member, session and model, in all and per day), kept apart from the entries:
//! summed in memory per counter and day (so their memory grows with the counters
//! touched, not with the calls), written in one atomic store write per batch, and never
//! dropped; so is each call's settlement (its spend added to the counters its budgets
//! are judged on, its hold released). A write that fails leaves them queued and is
//! tried again (after 100 ms, doubling to 5 s) until the store takes it: a count is late
//! by the batching delay (10 ms) plus however long the store is unreachable, never lost
//! while the process lives; a stop writes what is queued before the process exits. The
//! entries themselves are bounded: past [`MAX_QUEUED_SPEND_ENTRIES`] waiting, new ones are dropped (their
//! counts are not), and the log keeps what its retention says.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::collections::HashMap;

use http::HeaderMap;
use sandgate_store::admission::{BudgetScope, ScopeSpend, Settlement};
use sandgate_store::models::SpendLogRetention;
use sandgate_store::{DayCounts, SpendCount, SpendLogEntry, SpendScope, Store, day_of, member_id};
use tokio::sync::watch;

use crate::admit::Settle;
use crate::settling::{CATCH_UP_AT_MOST, Settling};
use crate::shares::{SWEEP_EVERY, ShareCost, Shares};
use sandgate_store::ledger::{ConversationOwner, LedgerSums, WrittenOnce};

use crate::headers::{SPEND_LOGS_METADATA, SPEND_LOGS_METADATA_LIMIT};

/// A finished call: its spend log entry, and what it settles (its spend, its hold).
pub(crate) type Finished = (SpendLogEntry, Option<Settle>);

/// How long a spend log entry waits for others to share its write, at most.
const SPEND_LOG_DELAY: Duration = Duration::from_millis(10);

/// How long the ledger's counts wait, at most, for the calls after them: the calls of one
/// conversation meanwhile add to one counter write, not one each. The ledger is
/// reporting; the spend counters and settlements, which budgets hold to, keep
/// [`SPEND_LOG_DELAY`].
const LEDGER_DELAY: Duration = Duration::from_secs(1);

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
    /// The conversations whose owner this process recorded (the store keeps the first
    /// anyway): each is written once, not with every call.
    owned: WrittenOnce,
    /// Held calls' settlements, written as their calls end.
    settling: Settling,
    /// This replica's shares of its keys' budgets.
    shares: Shares,
    /// The generations of keys' and of teams' and users' records: every share is given
    /// back when either moves (a budget or a spend changed), on every replica.
    changes: [watch::Receiver<Option<u64>>; 2],
    /// The runtime the gateway was built on, which outlives the servers' threads: every
    /// write is driven there, to its end, whoever asked for it. A write stopped half way
    /// (its task dropped with a serving thread's runtime at a stop, or its caller's
    /// future with a client that left) would lose what it had taken from the queue, and
    /// cannot be put back blindly: the store may have applied it.
    runtime: tokio::runtime::Handle,
}

/// Conversations remembered as owned at most; past it the memory starts again.
const MAX_OWNED_REMEMBERED: usize = 100_000;

#[derive(Default)]
struct SpendQueue {
    entries: Vec<SpendLogEntry>,
    /// What the virtual keys' calls settle, written with the entries.
    settles: Vec<Settle>,
    /// What the entries add to the reporting counters.
    counts: DayCounts<SpendScope, f64>,
    /// What the entries add to the ledger.
    ledger: LedgerSums,
    /// Who the entries' conversations are billed to, when not yet recorded.
    owners: HashMap<String, ConversationOwner>,
    /// A delayed write is scheduled: entries queued for one need not schedule another.
    scheduled: bool,
    /// The ledger's counts are written with the next batch (their [`LEDGER_DELAY`] is
    /// over, a write of them failed, or the gateway stops); until then batches leave them.
    ledger_due: bool,
    /// The ledger's delay runs: counts queued meanwhile need not start another.
    ledger_scheduled: bool,
}

/// How long a failed write of the counters waits before it is tried again, at first and
/// at most.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_AT_MOST: Duration = Duration::from_secs(5);

impl SpendQueue {
    /// Adds what `entry` spent to the counters it counts towards.
    fn count(&mut self, entry: &SpendLogEntry) {
        crate::ledger::count(&mut self.ledger, entry);
        crate::ledger::own(&mut self.owners, entry);
        let Some(amount) = entry
            .spend
            .filter(|spend| *spend > 0.0 && spend.is_finite())
        else {
            return;
        };
        let day = day_of(entry.started_at_ms);
        let member = entry
            .team_id
            .as_ref()
            .zip(entry.key_user_id.as_ref())
            .map(|(team, user)| member_id(team, user));
        let counters = [
            (SpendScope::Key, entry.api_key.as_deref()),
            (SpendScope::User, entry.key_user_id.as_deref()),
            (SpendScope::Team, entry.team_id.as_deref()),
            (SpendScope::Member, member.as_deref()),
            (SpendScope::Session, entry.session_id.as_deref()),
            (SpendScope::Model, Some(entry.model.as_str())),
        ];
        for (scope, id) in counters {
            if let Some(id) = id {
                self.add_count(day, scope, id, amount);
            }
        }
    }

    fn add_count(&mut self, day: u32, scope: SpendScope, id: &str, amount: f64) {
        self.counts.add(day, scope, id, |sum| *sum += amount);
    }

    /// Puts back a settlement a write could not store: its spend summed as it was, each
    /// hold's release on its own.
    fn requeue_settlement(&mut self, settlement: Settlement) {
        self.settles.push(Settle {
            spend: settlement.spend,
            consumed: settlement.consumed,
            release: settlement.releases,
            ..Settle::default()
        });
    }

    /// Asks for the delayed write; `true` when none was scheduled yet (the caller starts
    /// it).
    fn schedule(&mut self) -> bool {
        !std::mem::replace(&mut self.scheduled, true)
    }

    /// Asks for the ledger's delayed write, when it has counts waiting; `true` when none
    /// was scheduled yet (the caller starts it).
    fn schedule_ledger(&mut self) -> bool {
        !self.ledger.is_empty()
            && !self.ledger_due
            && !std::mem::replace(&mut self.ledger_scheduled, true)
    }

    /// The ledger's delay is over: its counts go with the next batch. Asks for that
    /// batch's write, as [`Self::schedule`] does.
    fn ledger_delay_over(&mut self) -> bool {
        self.ledger_due = true;
        self.ledger_scheduled = false;
        self.schedule()
    }

    /// Whether a batch has anything to write now.
    fn has_work(&self) -> bool {
        !self.entries.is_empty()
            || !self.settles.is_empty()
            || !self.counts.is_empty()
            || (self.ledger_due && !self.ledger.is_empty())
    }

    /// The spend counters and ledger rows waiting to be written.
    fn counters_waiting(&self) -> usize {
        self.counts.len() + self.ledger.len()
    }

    /// Puts back counts a write could not store.
    fn requeue(&mut self, counts: Vec<SpendCount>) {
        for count in counts {
            self.add_count(count.day, count.scope, &count.id, count.amount);
        }
    }
}

/// What many calls settle as one settlement, their spend summed per scope and window:
/// under load a batch holds hundreds of calls of a few keys, and the store then writes a
/// few counters, not hundreds (each call's hold is still released on its own).
fn summed(settles: Vec<Settle>) -> Settlement {
    // Summed under keys borrowed from the calls' settles: a scope, a hold is copied once
    // per batch, not once per call.
    let mut sums: foldhash::HashMap<(&BudgetScope, u64), (f64, u64)> = foldhash::HashMap::default();
    // What calls cost, by the share they were admitted against.
    let mut consumed: foldhash::HashMap<*const (), (&ShareCost, f64)> =
        foldhash::HashMap::default();
    for settle in &settles {
        for item in &settle.spend {
            let sum = sums.entry((&item.scope, item.window)).or_default();
            sum.0 += item.amount;
            sum.1 = sum.1.saturating_add(item.tokens);
        }
        for cost in &settle.consume {
            consumed.entry(cost.share()).or_insert((cost, 0.0)).1 += cost.amount;
        }
    }
    let spend = sums
        .into_iter()
        .map(|((scope, window), (amount, tokens))| ScopeSpend {
            scope: scope.clone(),
            window,
            amount,
            tokens,
        })
        .collect();
    let consumed = consumed
        .into_values()
        .map(|(cost, amount)| cost.consume(amount))
        .chain(
            settles
                .iter()
                .flat_map(|settle| settle.consumed.iter().cloned()),
        )
        .collect();
    Settlement {
        spend,
        consumed,
        releases: settles
            .into_iter()
            .flat_map(|settle| settle.release)
            .collect(),
        now_ms: crate::support::now_ms(),
    }
}

impl SpendLog {
    pub(crate) fn new(store: Store, retention: SpendLogRetention) -> Self {
        Self {
            changes: [store.keys.key_changes(), store.orgs.org_changes()],
            store,
            retention,
            queue: Mutex::default(),
            writer: tokio::sync::Mutex::default(),
            owned: WrittenOnce::new(MAX_OWNED_REMEMBERED),
            settling: Settling::default(),
            shares: Shares::default(),
            runtime: tokio::runtime::Handle::current(),
        }
    }

    /// Gives back every share of this replica (a management call changed keys, teams or
    /// users: what they were granted on may no longer hold).
    pub(crate) fn give_back_shares(self: &Arc<Self>) {
        let releases = self.shares.retire_all();
        if !releases.is_empty() {
            self.settle(Settle::releasing(releases));
        }
    }

    /// Queues `settle`: at once apart from the batch when it says so (see
    /// [`Settle::at_once`]), else with the batch, within [`SPEND_LOG_DELAY`].
    pub(crate) fn settle(self: &Arc<Self>, settle: Settle) {
        if settle.at_once {
            return self.settle_soon(settle);
        }
        let schedule = self.queue.lock().is_ok_and(|mut pending| {
            pending.settles.push(settle);
            pending.schedule()
        });
        if schedule {
            self.spawn_writer();
        }
    }

    /// Writes the batch now, after the write under way (a management call reads what the
    /// calls spent; a refused admission's retry needs the shares given back): whether
    /// settlements were queued.
    pub(crate) async fn write_settles_now(self: &Arc<Self>) -> bool {
        let queued = self
            .queue
            .lock()
            .is_ok_and(|pending| !pending.settles.is_empty());
        // Waited for even with nothing queued: a write under way may hold settlements
        // it took from the queue (a fresh-clone CI run read a user's spend before them).
        self.write(false).await;
        queued
    }

    /// Whether calls may be admitted against shares: `false` while a change of keys,
    /// teams or users could go unseen (the store's notifications are down). Every share
    /// is given back once a change is seen.
    pub(crate) fn follow_changes(self: &Arc<Self>) -> bool {
        let [keys, orgs] = &self.changes;
        let (Some(keys), Some(orgs)) = (*keys.borrow(), *orgs.borrow()) else {
            return false;
        };
        if self.shares.follow((keys, orgs)) {
            self.give_back_shares();
        }
        true
    }

    /// This replica's shares of its keys' budgets.
    pub(crate) fn shares(&self) -> &Shares {
        &self.shares
    }

    /// Starts the sweep that gives back idle shares, unless it runs: it stops once no
    /// share is left (or the gateway is gone).
    pub(crate) fn sweep_shares_soon(self: &Arc<Self>) {
        if !self.shares.start_sweep() {
            return;
        }
        let log = Arc::downgrade(self);
        self.runtime.spawn(async move {
            loop {
                tokio::time::sleep(SWEEP_EVERY).await;
                let Some(log) = log.upgrade() else {
                    return;
                };
                let (releases, left) = log.shares.sweep(std::time::Instant::now());
                if !releases.is_empty() {
                    log.settle(Settle::releasing(releases));
                }
                if !left {
                    return;
                }
            }
        });
    }

    /// Held calls' settlements on their way to the store: what a refused admission waits
    /// for before it tries again.
    pub(crate) fn settling(&self) -> &Settling {
        &self.settling
    }

    /// Records who the batch's conversations are billed to, those not recorded by this
    /// process yet. Not money: one the store refuses is tried again with the
    /// conversation's next call.
    async fn own(&self, owners: HashMap<String, ConversationOwner>) {
        let new: Vec<(String, ConversationOwner)> = owners
            .into_iter()
            .filter(|(conversation, _)| !self.owned.contains(conversation))
            .collect();
        if new.is_empty() {
            return;
        }
        match self.store.ledger.own_conversations(&new).await {
            Ok(()) => self
                .owned
                .extend(new.into_iter().map(|(conversation, _)| conversation)),
            Err(err) => {
                tracing::warn!(error = %err, conversations = new.len(), "conversations' owners not stored; tried again with their next call");
            }
        }
    }

    /// Queues `entry` for the spend log; `true` when it is the first to wait for a delayed
    /// write (and `schedule` asks for one), so that its caller schedules it. Starts the
    /// ledger's delay when its counts are the first to wait.
    fn enqueue(
        self: &Arc<Self>,
        entry: SpendLogEntry,
        settle: Option<Settle>,
        schedule: bool,
    ) -> bool {
        let Ok(mut pending) = self.queue.lock() else {
            return false;
        };
        // A call's settlement and the counters are queued whatever the log's length:
        // they are what budgets and bills hold to.
        pending.settles.extend(settle);
        pending.count(&entry);
        if pending.schedule_ledger() {
            self.spawn_ledger_writer();
        }
        if pending.entries.len() >= MAX_QUEUED_SPEND_ENTRIES {
            tracing::warn!(request_id = %entry.request_id, "spend log queue full; entry dropped");
            return false;
        }
        pending.entries.push(entry);
        schedule && pending.schedule()
    }

    /// After [`LEDGER_DELAY`], the ledger's counts are due: written with a batch, one now
    /// if none is under way.
    fn spawn_ledger_writer(self: &Arc<Self>) {
        let log = Arc::downgrade(self);
        self.runtime.spawn(async move {
            tokio::time::sleep(LEDGER_DELAY).await;
            let Some(log) = log.upgrade() else {
                return;
            };
            let schedule = log
                .queue
                .lock()
                .is_ok_and(|mut pending| pending.ledger_delay_over());
            if schedule {
                log.spawn_writer();
            }
        });
    }

    /// The entry of an answer about to reach its client's last event: a call that holds
    /// part of its budgets starts its settlement now (its hold released, its spend added),
    /// written apart from the batch and without the client waiting for it, together with
    /// those of the calls that end meanwhile (see [`crate::settling`]); its entry,
    /// reporting counters and ledger follow in the batch, as [`Self::log_soon`] queues
    /// them.
    pub(crate) fn log_answered(self: &Arc<Self>, (entry, settle): Finished) {
        match settle {
            Some(settle) if settle.at_once => {
                self.settle_soon(settle);
                self.log_soon((entry, None));
            }
            settle => self.log_soon((entry, settle)),
        }
    }

    /// Queues `settle` for the settlements' writer, started if none runs.
    pub(crate) fn settle_soon(self: &Arc<Self>, settle: Settle) {
        if self.settling.push(settle) {
            self.runtime.spawn(self.clone().settle_queued());
        }
    }

    /// Writes the queued settlements, each batch summed in one store write, until none is
    /// queued. A settlement the store refuses goes to the batch's queue, tried again
    /// until it is stored (its hold's lease ends it meanwhile).
    async fn settle_queued(self: Arc<Self>) {
        while let Some((settles, through)) = self.settling.take() {
            let settlement = summed(settles);
            if let Err(err) = self.store.keys.settle(&settlement).await {
                tracing::warn!(error = %err, "calls' settlement not stored yet; kept to try again");
                let schedule = self.queue.lock().is_ok_and(|mut pending| {
                    pending.requeue_settlement(settlement);
                    pending.schedule()
                });
                if schedule {
                    self.spawn_writer();
                }
            }
            self.settling.written(through);
        }
    }

    /// Writes `entry` now, with whatever else waits: for a failed answer, whose entry is in
    /// the log by the time the client has the answer.
    pub(crate) async fn log_now(self: &Arc<Self>, (entry, charge): Finished) {
        self.enqueue(entry, charge, false);
        self.write(false).await;
    }

    /// Queues `entry` to be written within [`SPEND_LOG_DELAY`], with the entries of the calls
    /// that end meanwhile: one store round trip for many calls, and none on a call's path.
    pub(crate) fn log_soon(self: &Arc<Self>, (entry, charge): Finished) {
        if self.enqueue(entry, charge, true) {
            self.spawn_writer();
        }
    }

    /// Starts the delayed write, which writes what is queued within [`SPEND_LOG_DELAY`].
    fn spawn_writer(self: &Arc<Self>) {
        // Weak: a stopped gateway (which flushed its queue) is not kept alive, nor its
        // store open, by a write that has nothing left to do.
        let log = Arc::downgrade(self);
        self.runtime.spawn(async move {
            tokio::time::sleep(SPEND_LOG_DELAY).await;
            let mut wait = RETRY_FIRST;
            // Until the counters are stored: this write stays the scheduled one, so
            // that the calls meanwhile schedule no other.
            while let Some(log) = log.upgrade() {
                if log.write_batches(true).await {
                    return;
                }
                drop(log);
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(RETRY_AT_MOST);
            }
        });
    }

    /// Writes the entries still queued: once the server has stopped, so that a stop loses
    /// none.
    pub(crate) async fn flush(self: &Arc<Self>) {
        // The settlements under way first: one the store refuses joins the queue. Any
        // still queued (their writer never ran: the runtime is stopping) join it too.
        self.settling.caught_up(CATCH_UP_AT_MOST).await;
        if let Some((settles, through)) = self.settling.take() {
            if let Ok(mut pending) = self.queue.lock() {
                pending.settles.extend(settles);
            }
            self.settling.written(through);
        }
        // The shares given back, after their calls' settlements (in the batch).
        let releases = self.shares.retire_all();
        if let Ok(mut pending) = self.queue.lock() {
            if !releases.is_empty() {
                pending.settles.push(Settle::releasing(releases));
            }
            pending.ledger_due = true;
        }
        for _ in 0..3 {
            if self.write(false).await {
                return;
            }
            tokio::time::sleep(RETRY_AT_MOST).await;
        }
        let left = self
            .queue
            .lock()
            .map_or(0, |pending| pending.counters_waiting());
        tracing::error!(
            counters = left,
            "the store stayed unreachable: spend counts not stored at stop"
        );
    }

    /// Writes what is queued, in batches, until the queue is empty. One write at a time:
    /// a caller that waited finds its entry written, or writes it. `delayed`: the
    /// scheduled write, which is over once it finds the queue empty, and which starts a
    /// batch at most every [`SPEND_LOG_DELAY`]: under load a batch holds the calls of that
    /// time whatever the store's speed (written back to back, a quicker store made more,
    /// smaller batches, each a store write). `false` when the counters could not be
    /// stored (they stay queued). Driven on the gateway's runtime, to its end: its caller
    /// may leave meanwhile.
    async fn write(self: &Arc<Self>, delayed: bool) -> bool {
        let log = self.clone();
        self.runtime
            .spawn(async move { log.write_batches(delayed).await })
            .await
            .unwrap_or(false)
    }

    /// [`Self::write`], in the task that asked for it: one that is never stopped half way.
    async fn write_batches(&self, delayed: bool) -> bool {
        loop {
            let started = tokio::time::Instant::now();
            let writing = self.writer.lock().await;
            let (batch, settles, mut counts, ledger, owners) = match self.queue.lock() {
                Ok(mut pending) if pending.has_work() => {
                    let ledger = if std::mem::take(&mut pending.ledger_due) {
                        pending.ledger.take()
                    } else {
                        Default::default()
                    };
                    (
                        std::mem::take(&mut pending.entries),
                        std::mem::take(&mut pending.settles),
                        std::mem::take(&mut pending.counts),
                        ledger,
                        std::mem::take(&mut pending.owners),
                    )
                }
                Ok(mut pending) => {
                    pending.scheduled &= !delayed;
                    return true;
                }
                Err(_) => return true,
            };
            let counts: Vec<SpendCount> = counts
                .take()
                .map(|(day, scope, id, amount)| SpendCount {
                    day,
                    scope,
                    id,
                    amount,
                })
                .collect();
            // The batch's writes at once: on the embedded store its writer thread commits
            // what is queued together (one transaction, one sync, not one each), on Redis
            // they share the round trips' waits. Each is kept to try again on its own.
            let calls = settles.len();
            let settlement = summed(settles);
            let count = async {
                counts.is_empty()
                    || match self.store.orgs.add_spend(&counts).await {
                        Ok(()) => true,
                        Err(err) => {
                            tracing::warn!(error = %err, counters = counts.len(), "spend counters not stored yet; kept to try again");
                            if let Ok(mut pending) = self.queue.lock() {
                                pending.requeue(counts);
                            }
                            false
                        }
                    }
            };
            let settle = async {
                calls == 0
                    || match self.store.keys.settle(&settlement).await {
                        Ok(()) => true,
                        Err(err) => {
                            // Kept to try again, with the counters: the scopes' spend is
                            // what their budgets and `/team/info` hold to.
                            tracing::warn!(error = %err, calls, "calls' settlement not stored yet; kept to try again");
                            if let Ok(mut pending) = self.queue.lock() {
                                pending.requeue_settlement(settlement);
                            }
                            false
                        }
                    }
            };
            let add_ledger = async {
                ledger.is_empty()
                    || match self.store.ledger.add_ledger(&ledger).await {
                        Ok(()) => true,
                        Err(err) => {
                            tracing::warn!(error = %err, counters = ledger.len(), "ledger counters not stored yet; kept to try again");
                            if let Ok(mut pending) = self.queue.lock() {
                                pending.ledger.merge(ledger);
                                // With the retries of this write, not after another delay.
                                pending.ledger_due = true;
                            }
                            false
                        }
                    }
            };
            let log = async {
                if !batch.is_empty()
                    && let Err(err) = self
                        .store
                        .spend_log
                        .append_spend_logs(&batch, self.retention)
                        .await
                {
                    tracing::warn!(error = %err, entries = batch.len(), "spend log entries lost");
                }
            };
            let (counted, settled, ledgered, (), ()) =
                tokio::join!(count, settle, add_ledger, self.own(owners), log);
            if !(counted && settled && ledgered) {
                return false;
            }
            // Other writers meanwhile find the queue as it is.
            drop(writing);
            if delayed {
                tokio::time::sleep_until(started + SPEND_LOG_DELAY).await;
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
        .find_map(|name| Some((name, headers.get(name)?)))?;
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

#[cfg(test)]
mod tests;
