//! The ledger on every backend: counts add up per id and day, reads sum a range of days,
//! a rollup holds every id of its scope and no other scope's.

use sandgate_store::ledger::conversation_model;
use sandgate_store::{LedgerCount, LedgerScope, Measure};

use super::open;
use crate::common::Backend;

fn count(day: u32, scope: LedgerScope, id: &str, measure: Measure, amount: f64) -> LedgerCount {
    LedgerCount {
        day,
        scope,
        id: id.to_owned(),
        measure,
        amount,
    }
}

async fn the_ledger_adds_up_per_id_and_day(backend: Backend) {
    let store = open(&backend).await;
    let ledger = &store.ledger;
    let today = sandgate_store::day_of(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("time")
            .as_millis() as i64,
    );
    let (yesterday, conv) = (today - 1, LedgerScope::Conversation);
    ledger
        .add_ledger(&[
            count(yesterday, conv, "c1", Measure::Calls, 2.0),
            count(today, conv, "c1", Measure::Calls, 3.0),
            count(today, conv, "c1", Measure::Spend, 0.25),
            count(today, conv, "c2|odd\u{1f}id", Measure::Calls, 1.0),
            count(today, LedgerScope::Team, "c1", Measure::Calls, 7.0),
            count(
                today,
                LedgerScope::ConversationModel,
                &conversation_model("c1", "gpt"),
                Measure::Calls,
                3.0,
            ),
        ])
        .await
        .expect("add");
    // Added again: counters add, they are not set.
    ledger
        .add_ledger(&[count(today, conv, "c1", Measure::Spend, 0.5)])
        .await
        .expect("add");
    let ids = ["c1".to_owned(), "missing".to_owned()];
    let both = ledger
        .ledger_of(conv, &ids, yesterday, today)
        .await
        .expect("read");
    assert_eq!(both.len(), 1, "{both:?}");
    assert_eq!(both["c1"][&Measure::Calls], 5.0);
    assert_eq!(both["c1"][&Measure::Spend], 0.75);
    let one_day = ledger
        .ledger_of(conv, &ids, today, today)
        .await
        .expect("read");
    assert_eq!(one_day["c1"][&Measure::Calls], 3.0);
    let rollup = ledger
        .ledger_rollup(conv, yesterday, today)
        .await
        .expect("rollup");
    let ids: Vec<_> = rollup.keys().cloned().collect();
    assert_eq!(ids, ["c1", "c2|odd\u{1f}id"], "{rollup:?}");
    assert_eq!(rollup["c1"][&Measure::Calls], 5.0);
    let teams = ledger
        .ledger_rollup(LedgerScope::Team, today, today)
        .await
        .expect("rollup");
    assert_eq!(teams["c1"][&Measure::Calls], 7.0);
    let models = ledger
        .ledger_rollup(LedgerScope::ConversationModel, today, today)
        .await
        .expect("rollup");
    assert_eq!(
        models[&conversation_model("c1", "gpt")][&Measure::Calls],
        3.0
    );
    // A conversation's models are its own, not those of an id it is a prefix of.
    let other = conversation_model("c10", "small");
    ledger
        .add_ledger(&[count(
            today,
            LedgerScope::ConversationModel,
            &other,
            Measure::Calls,
            1.0,
        )])
        .await
        .expect("add");
    assert_eq!(
        ledger.conversation_models("c1").await.expect("models"),
        ["gpt"]
    );
    assert_eq!(
        ledger.conversation_models("c10").await.expect("models"),
        ["small"]
    );
    assert!(
        ledger
            .conversation_models("c")
            .await
            .expect("models")
            .is_empty()
    );
    // An empty or reversed range reads nothing, and a range at the edge of the days
    // fails nothing.
    assert!(
        ledger
            .ledger_rollup(conv, today, yesterday)
            .await
            .expect("rollup")
            .is_empty()
    );
    assert!(
        ledger
            .ledger_of(conv, &[], yesterday, today)
            .await
            .expect("read")
            .is_empty()
    );
    ledger
        .ledger_rollup(conv, u32::MAX - 3, u32::MAX)
        .await
        .expect("rollup at the last day");
}

crate::on_both_backends!(the_ledger_adds_up_per_id_and_day,);
