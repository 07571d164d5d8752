//! What the runtime API adds to a conversation's ledger: its sandbox's time (see
//! `sandboxes::ledger`), the events it posted and the updates it delivered.

use sandgate_store::{LedgerCount, LedgerScope, Measure, Store, day_of};

/// Adds `amount` of `measure` to `conversation`'s ledger on the day of `at_ms` (now when
/// `None`). A store
/// that refuses it is logged and counted (`sandgate_ledger_failures_total`); what was
/// counted stands.
pub(crate) async fn add(
    store: &Store,
    conversation: &str,
    measure: Measure,
    amount: f64,
    at_ms: Option<i64>,
) {
    if amount <= 0.0 {
        return;
    }
    let at_ms = at_ms.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as i64)
    });
    let count = LedgerCount {
        day: day_of(at_ms),
        scope: LedgerScope::Conversation,
        id: conversation.to_owned(),
        measure,
        amount,
    };
    if let Err(err) = store.ledger.add_ledger(std::slice::from_ref(&count)).await {
        metrics::counter!("sandgate_ledger_failures_total").increment(1);
        tracing::error!(error = %err, conversation, measure = measure.name(), amount, "not added to the ledger");
    }
}
