//! The ledger on every backend: counts add up per id and day, reads sum a range of days,
//! a rollup holds every id of its scope and no other scope's, a page at a time.

use sandgate_store::ledger::{ConversationOwner, conversation_model, tag_id, tag_prefix};
use sandgate_store::{LedgerCount, LedgerScope, Measure};

use super::open;
use crate::common::Backend;

/// Today, in days since the epoch.
fn today() -> u32 {
    sandgate_store::day_of(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("time")
            .as_millis() as i64,
    )
}

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
    let today = today();
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
        .ledger_page(conv, yesterday, today, "", "", 10)
        .await
        .expect("rollup");
    let ids: Vec<_> = rollup.rows.keys().cloned().collect();
    assert_eq!(ids, ["c1", "c2|odd\u{1f}id"], "{rollup:?}");
    assert_eq!(rollup.rows["c1"][&Measure::Calls], 5.0);
    // c1, counted on both days, is one id.
    assert_eq!((rollup.total, rollup.next.as_deref()), (2, None));
    let teams = ledger
        .ledger_page(LedgerScope::Team, today, today, "", "", 10)
        .await
        .expect("rollup");
    assert_eq!(teams.rows["c1"][&Measure::Calls], 7.0);
    assert_eq!(teams.total, 1);
    let models = ledger
        .ledger_of(
            LedgerScope::ConversationModel,
            &[conversation_model("c1", "gpt")],
            today,
            today,
        )
        .await
        .expect("read");
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
    assert_eq!(
        ledger
            .ledger_page(conv, today, yesterday, "", "", 10)
            .await
            .expect("rollup"),
        sandgate_store::LedgerPage::default()
    );
    assert!(
        ledger
            .ledger_of(conv, &[], yesterday, today)
            .await
            .expect("read")
            .is_empty()
    );
    ledger
        .ledger_page(conv, u32::MAX - 3, u32::MAX, "", "", 10)
        .await
        .expect("rollup at the last day");
}

/// A rollup is read a page at a time, in id order, across days, each id once, whatever
/// day it was counted on; the page's start is exclusive.
async fn a_rollup_is_paged_by_id_across_days(backend: Backend) {
    let store = open(&backend).await;
    let ledger = &store.ledger;
    let today = today();
    let user = LedgerScope::User;
    let mut counts = Vec::new();
    for (index, id) in ["u1", "u2", "u3", "u4", "u5"].iter().enumerate() {
        // u1, u3 and u5 yesterday; u2, u3 and u4 today.
        if index % 2 == 0 {
            counts.push(count(today - 1, user, id, Measure::Calls, 1.0));
        }
        if (1..4).contains(&index) {
            counts.push(count(today, user, id, Measure::Calls, 1.0));
        }
    }
    ledger.add_ledger(&counts).await.expect("add");
    let mut seen = Vec::new();
    let mut after = String::new();
    loop {
        let page = ledger
            .ledger_page(user, today - 1, today, "", &after, 2)
            .await
            .expect("page");
        assert_eq!(page.total, 5, "{page:?}");
        assert!(page.rows.len() <= 2, "{page:?}");
        seen.extend(
            page.rows
                .iter()
                .map(|(id, row)| (id.clone(), row[&Measure::Calls])),
        );
        match page.next {
            Some(next) => after = next,
            None => break,
        }
    }
    let expected: Vec<(String, f64)> = [
        ("u1", 1.0),
        ("u2", 1.0),
        ("u3", 2.0),
        ("u4", 1.0),
        ("u5", 1.0),
    ]
    .map(|(id, calls)| (id.to_owned(), calls))
    .to_vec();
    assert_eq!(seen, expected);
    // A range that ends before today: u1 on both its days is one id.
    ledger
        .add_ledger(&[count(today - 2, user, "u1", Measure::Calls, 1.0)])
        .await
        .expect("add");
    let past = ledger
        .ledger_page(user, today - 2, today - 1, "", "", 10)
        .await
        .expect("page");
    assert_eq!(past.total, 3, "{past:?}");
    assert_eq!(past.rows["u1"][&Measure::Calls], 2.0);
    // Today alone: its three ids.
    let today_only = ledger
        .ledger_page(user, today, today, "", "u2", 10)
        .await
        .expect("page");
    assert_eq!(today_only.total, 3);
    assert_eq!(today_only.rows.keys().collect::<Vec<_>>(), ["u3", "u4"]);
}

/// A sandbox's session links to the first conversation it serves, both ways; a second
/// conversation does not move it.
async fn a_session_links_to_its_first_conversation(backend: Backend) {
    let store = open(&backend).await;
    let ledger = &store.ledger;
    assert_eq!(ledger.session_conversation("s1").await.expect("read"), None);
    ledger.link_session("s1", "conv-a").await.expect("link");
    ledger.link_session("s1", "conv-b").await.expect("link");
    assert_eq!(
        ledger
            .session_conversation("s1")
            .await
            .expect("read")
            .as_deref(),
        Some("conv-a")
    );
    assert_eq!(
        ledger
            .conversation_session("conv-a")
            .await
            .expect("read")
            .as_deref(),
        Some("s1")
    );
    assert_eq!(
        ledger.conversation_session("conv-b").await.expect("read"),
        None
    );
}

/// A rollup by a tag's key holds that key's values alone (not a key it prefixes, nor one
/// that prefixes it), paged, its total counted over its days once each.
async fn a_tag_s_rollup_holds_its_key_s_values_alone(backend: Backend) {
    let store = open(&backend).await;
    let ledger = &store.ledger;
    let today = today();
    let tag = LedgerScope::Tag;
    let mut counts = Vec::new();
    for (day, key, value) in [
        (today - 1, "project", "alpha"),
        (today - 1, "project", "beta"),
        (today, "project", "beta"),
        (today, "project", "gamma"),
        (today, "projects", "alpha"),
        (today, "proj", "alpha"),
        (today, "team", "alpha"),
    ] {
        counts.push(count(day, tag, &tag_id(key, value), Measure::Calls, 1.0));
    }
    ledger.add_ledger(&counts).await.expect("add");
    let within = tag_prefix("project");
    let mut seen = Vec::new();
    let mut after = String::new();
    loop {
        let page = ledger
            .ledger_page(tag, today - 1, today, &within, &after, 2)
            .await
            .expect("page");
        assert_eq!(page.total, 3, "{page:?}");
        seen.extend(
            page.rows
                .iter()
                .map(|(id, row)| (id.clone(), row[&Measure::Calls])),
        );
        match page.next {
            Some(next) => after = next,
            None => break,
        }
    }
    let expected: Vec<(String, f64)> = [("alpha", 1.0), ("beta", 2.0), ("gamma", 1.0)]
        .map(|(value, calls)| (tag_id("project", value), calls))
        .to_vec();
    assert_eq!(seen, expected);
    // One day: its values of the key, after a value.
    let today_only = ledger
        .ledger_page(tag, today, today, &within, &tag_id("project", "beta"), 10)
        .await
        .expect("page");
    assert_eq!(today_only.total, 2, "{today_only:?}");
    assert_eq!(
        today_only.rows.keys().collect::<Vec<_>>(),
        [&tag_id("project", "gamma")]
    );
}

/// A conversation's owner is the first recorded; reading many gives each its own.
async fn a_conversation_keeps_its_first_owner(backend: Backend) {
    let store = open(&backend).await;
    let ledger = &store.ledger;
    let owner = |user: &str, team: Option<&str>| ConversationOwner {
        user_id: Some(user.to_owned()),
        team_id: team.map(str::to_owned),
        key_alias: Some(format!("{user}-key")),
    };
    ledger
        .own_conversations(&[
            ("c1".to_owned(), owner("u1", Some("t1"))),
            ("c2".to_owned(), owner("u2", None)),
        ])
        .await
        .expect("own");
    ledger
        .own_conversations(&[("c1".to_owned(), owner("thief", None))])
        .await
        .expect("own");
    let ids = ["c1", "c2", "c3"].map(str::to_owned);
    let owners = ledger.conversation_owners(&ids).await.expect("read");
    assert_eq!(owners.len(), 2, "{owners:?}");
    assert_eq!(owners["c1"], owner("u1", Some("t1")));
    assert_eq!(owners["c2"], owner("u2", None));
}

/// The embedded store forgets what it keeps of a conversation (its models, links and
/// owner) once its last counted day is past the retention; Redis's keys expire with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_conversation_leaves_nothing_behind_in_the_embedded_store() {
    let store = open(&Backend::embedded()).await;
    let ledger = &store.ledger;
    let today = today();
    let expired = today - sandgate_store::ledger::LEDGER_RETENTION_DAYS - 1;
    let owner = ConversationOwner {
        user_id: Some("u".to_owned()),
        ..ConversationOwner::default()
    };
    for conversation in ["gone", "kept"] {
        ledger
            .link_session(&format!("s-{conversation}"), conversation)
            .await
            .expect("link");
        ledger
            .own_conversations(&[(conversation.to_owned(), owner.clone())])
            .await
            .expect("own");
    }
    let mut counts = Vec::new();
    for (conversation, days) in [("gone", vec![expired]), ("kept", vec![expired, today - 5])] {
        for day in days {
            let model = conversation_model(conversation, "gpt");
            counts.push(count(
                day,
                LedgerScope::Conversation,
                conversation,
                Measure::Calls,
                1.0,
            ));
            counts.push(count(
                day,
                LedgerScope::ConversationModel,
                &model,
                Measure::Calls,
                1.0,
            ));
        }
    }
    ledger.add_ledger(&counts).await.expect("add");
    let ids = ["gone".to_owned(), "kept".to_owned()];
    let owners = ledger.conversation_owners(&ids).await.expect("owners");
    assert_eq!(owners.keys().collect::<Vec<_>>(), ["kept"], "{owners:?}");
    assert_eq!(
        ledger.conversation_models("gone").await.expect("models"),
        Vec::<String>::new()
    );
    assert_eq!(
        ledger.conversation_models("kept").await.expect("models"),
        ["gpt"]
    );
    assert_eq!(
        ledger.conversation_session("gone").await.expect("link"),
        None
    );
    assert_eq!(
        ledger.session_conversation("s-gone").await.expect("link"),
        None
    );
    assert_eq!(
        ledger
            .conversation_session("kept")
            .await
            .expect("link")
            .as_deref(),
        Some("s-kept")
    );
}

/// The rollup by day's read: an id's row of each day that counted something, in order.
async fn an_id_is_read_day_by_day(backend: Backend) {
    let store = open(&backend).await;
    let ledger = &store.ledger;
    let today = today();
    let all = LedgerScope::Everything;
    ledger
        .add_ledger(&[
            count(today - 2, all, "all", Measure::Calls, 2.0),
            count(today - 2, all, "all", Measure::Spend, 0.5),
            count(today, all, "all", Measure::Calls, 1.0),
            count(today - 1, all, "other", Measure::Calls, 9.0),
        ])
        .await
        .expect("add");
    let days = ledger
        .ledger_days(all, "all", today - 3, today)
        .await
        .expect("days");
    let shown: Vec<(u32, Vec<(Measure, f64)>)> = days
        .into_iter()
        .map(|(day, row)| (day, row.into_iter().collect()))
        .collect();
    assert_eq!(
        shown,
        [
            (
                today - 2,
                vec![(Measure::Spend, 0.5), (Measure::Calls, 2.0)]
            ),
            (today, vec![(Measure::Calls, 1.0)]),
        ]
    );
}

crate::on_both_backends!(
    an_id_is_read_day_by_day,
    the_ledger_adds_up_per_id_and_day,
    a_rollup_is_paged_by_id_across_days,
    a_session_links_to_its_first_conversation,
    a_tag_s_rollup_holds_its_key_s_values_alone,
    a_conversation_keeps_its_first_owner,
);
