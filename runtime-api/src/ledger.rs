//! What the runtime API adds to a conversation's ledger: its sandbox's time (see
//! `sandboxes::ledger`), the events it posted and the updates it delivered.

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

/// Adds `count` to the ledger. A store that refuses it is logged and counted
/// (`sandgate_ledger_failures_total`); what was counted stands.
pub(crate) async fn add_count(store: &Store, count: LedgerCount) {
    if let Err(err) = store.ledger.add_ledger(std::slice::from_ref(&count)).await {
        metrics::counter!("sandgate_ledger_failures_total").increment(1);
        tracing::error!(
            error = %err,
            id = %count.id,
            measure = count.measure.name(),
            amount = count.amount,
            "not added to the ledger"
        );
    }
}
