//! What the runtime API adds to a conversation's ledger: its sandbox's time (see
//! `sandboxes::ledger`), the events it posted and the updates it delivered; and which
//! conversation a sandbox serves, when the platform's sandbox and conversation ids differ.

use sandgate_store::ledger::{EVERYTHING, WrittenOnce};
use sandgate_store::{LedgerCount, LedgerScope, Measure, Store, day_of};

use crate::ambient::{Clock, SystemClock};

/// Adds `amount` of `measure` to `conversation`'s ledger, today.
pub(crate) async fn add(store: &Store, conversation: &str, measure: Measure, amount: f64) {
    if amount <= 0.0 {
        return;
    }
    let count = LedgerCount {
        day: day_of(SystemClock.now_ms()),
        scope: LedgerScope::Conversation,
        id: conversation.to_owned(),
        measure,
        amount,
    };
    add_count(store, count).await;
}

/// Adds `count` to the ledger (see [`add_counts`]).
pub(crate) async fn add_count(store: &Store, count: LedgerCount) {
    add_counts(store, std::slice::from_ref(&count)).await;
}

/// Adds `counts` to the ledger, at once, each a conversation's also to everything's (the
/// rollup by day); a count of nothing is left out. A store that refuses them is logged
/// and counted (`sandgate_ledger_failures_total`); what was counted stands.
pub(crate) async fn add_counts(store: &Store, counts: &[LedgerCount]) {
    let mut all = Vec::with_capacity(counts.len() * 2);
    for count in counts.iter().filter(|count| count.amount > 0.0) {
        all.push(count.clone());
        if count.scope == LedgerScope::Conversation {
            all.push(LedgerCount {
                scope: LedgerScope::Everything,
                id: EVERYTHING.to_owned(),
                ..count.clone()
            });
        }
    }
    if all.is_empty() {
        return;
    }
    if let Err(err) = store.ledger.add_ledger(&all).await {
        metrics::counter!("sandgate_ledger_failures_total").increment(1);
        for count in counts {
            tracing::error!(
                error = %err,
                id = %count.id,
                measure = count.measure.name(),
                amount = count.amount,
                "not added to the ledger"
            );
        }
    }
}

/// The sandboxes this process has linked to their conversation already, so that a
/// sandbox's deliveries after its first cost no store read. Bounded: past it, it starts
/// again (a link made twice stays the first).
pub(crate) struct SessionLinks(WrittenOnce);

const MAX_LINKED: usize = 10_000;

impl Default for SessionLinks {
    fn default() -> Self {
        Self(WrittenOnce::new(MAX_LINKED))
    }
}

impl SessionLinks {
    /// Links the session of sandbox `runtime_id` to `conversation`, the conversation it
    /// delivered: the app server names its sandboxes apart from their conversations, and
    /// the sandbox's time is its conversation's. A failure is logged; the delivery stands.
    pub(crate) async fn link(&self, store: &Store, runtime_id: &str, conversation: &str) {
        if self.0.contains(runtime_id) {
            return;
        }
        let linked = match store.sandboxes.sandbox(runtime_id).await {
            Ok(Some(sandbox)) => match sandbox.session_id {
                Some(session) if session != conversation => {
                    store.ledger.link_session(&session, conversation).await
                }
                _ => Ok(()),
            },
            Ok(None) => Ok(()),
            Err(err) => Err(err),
        };
        match linked {
            Ok(()) => self.0.extend([runtime_id.to_owned()]),
            Err(err) => {
                metrics::counter!("sandgate_ledger_failures_total").increment(1);
                tracing::error!(error = %err, runtime_id, "sandbox not linked to its conversation");
            }
        }
    }
}

/// The conversation the time of the sandbox session `session` counts to: the one it
/// is linked to, else the session itself.
pub(crate) async fn conversation_of_session(store: &Store, session: String) -> String {
    match store.ledger.session_conversation(&session).await {
        Ok(Some(conversation)) => conversation,
        Ok(None) => session,
        Err(err) => {
            tracing::warn!(error = %err, "a sandbox session's link not read; its own id counts");
            session
        }
    }
}
