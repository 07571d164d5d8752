//! The event store's conformance suite: the same calls, the same answers on both backends.

use sandgate_store::{DeadLetter, EventPage, EventRetention, NewEvent, Store, StoredEvent};
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::common::Backend;
use crate::store_conformance::open;

const OWNER: &str = "static:abc";
const NOW: i64 = 1_800_000_000_000_000;
const SECOND: i64 = 1_000_000;

fn event(id: &str, timestamp: i64) -> NewEvent {
    NewEvent {
        id: id.to_owned(),
        timestamp,
        json: RawValue::from_string(format!(r#"{{"id":"{id}","kind":"MessageEvent"}}"#))
            .expect("raw"),
    }
}

fn retention(max: usize) -> EventRetention {
    EventRetention {
        max_per_conversation: max,
        max_age_seconds: 3600,
    }
}

async fn append(store: &Store, conversation: Uuid, events: &[NewEvent]) -> (u32, u32, u64) {
    let outcome = store
        .events
        .append_events(conversation, OWNER, events, &[], retention(100), NOW)
        .await
        .expect("append")
        .expect("owned");
    (outcome.stored, outcome.duplicates, outcome.dropped)
}

async fn page(store: &Store, conversation: Uuid, page: EventPage) -> Vec<StoredEvent> {
    store
        .events
        .list_events(conversation, &page)
        .await
        .expect("list")
}

fn ids(events: &[StoredEvent]) -> Vec<&str> {
    events.iter().map(|event| event.id.as_str()).collect()
}

fn first(limit: usize) -> EventPage {
    EventPage {
        after: None,
        limit,
        descending: false,
    }
}

async fn events_are_stored_once_by_timestamp_then_arrival(backend: Backend) {
    let store = open(&backend).await;
    let conversation = Uuid::new_v4();
    assert!(
        store
            .events
            .event_stats(conversation)
            .await
            .expect("stats")
            .is_none()
    );
    let batch = [
        event("b", NOW - 2 * SECOND),
        event("a", NOW - 3 * SECOND),
        event("c", NOW - 2 * SECOND),
    ];
    assert_eq!(append(&store, conversation, &batch).await, (3, 0, 0));
    // A re-sent batch, and one that repeats an event beside a new one.
    assert_eq!(append(&store, conversation, &batch).await, (0, 3, 0));
    assert_eq!(
        append(
            &store,
            conversation,
            &[event("a", NOW), event("d", NOW - 2 * SECOND)]
        )
        .await,
        (1, 1, 0)
    );
    let all = page(&store, conversation, first(10)).await;
    assert_eq!(ids(&all), ["a", "b", "c", "d"]);
    assert_eq!(all[0].timestamp, NOW - 3 * SECOND);
    assert_eq!(all[0].json.get(), r#"{"id":"a","kind":"MessageEvent"}"#);
    let stats = store
        .events
        .event_stats(conversation)
        .await
        .expect("stats")
        .expect("some");
    assert_eq!((stats.owner.as_str(), stats.count), (OWNER, 4));
    assert_eq!(stats.last_event_at, Some(NOW - 2 * SECOND));

    // Pages in either order, from a cursor.
    let head = page(&store, conversation, first(2)).await;
    assert_eq!(ids(&head), ["a", "b"]);
    let rest = page(
        &store,
        conversation,
        EventPage {
            after: Some(head[1].order_key.clone()),
            limit: 10,
            descending: false,
        },
    )
    .await;
    assert_eq!(ids(&rest), ["c", "d"]);
    let newest = page(
        &store,
        conversation,
        EventPage {
            after: None,
            limit: 3,
            descending: true,
        },
    )
    .await;
    assert_eq!(ids(&newest), ["d", "c", "b"]);
    let older = page(
        &store,
        conversation,
        EventPage {
            after: Some(newest[2].order_key.clone()),
            limit: 3,
            descending: true,
        },
    )
    .await;
    assert_eq!(ids(&older), ["a"]);
    // Another conversation's events are its own.
    assert!(page(&store, Uuid::new_v4(), first(10)).await.is_empty());
}

async fn another_owner_cannot_add_events(backend: Backend) {
    let store = open(&backend).await;
    let conversation = Uuid::new_v4();
    append(&store, conversation, &[event("a", NOW)]).await;
    let refused = store
        .events
        .append_events(
            conversation,
            "static:other",
            &[event("x", NOW)],
            &[],
            retention(100),
            NOW,
        )
        .await
        .expect("append");
    assert!(refused.is_none());
    assert_eq!(ids(&page(&store, conversation, first(10)).await), ["a"]);
}

async fn retention_drops_the_oldest_and_the_expired(backend: Backend) {
    let store = open(&backend).await;
    let conversation = Uuid::new_v4();
    let events: Vec<NewEvent> = (0..5)
        .map(|i| event(&format!("e{i}"), NOW - 10 + i))
        .collect();
    let outcome = store
        .events
        .append_events(conversation, OWNER, &events, &[], retention(3), NOW)
        .await
        .expect("append")
        .expect("owned");
    assert_eq!((outcome.stored, outcome.dropped), (5, 2));
    assert_eq!(
        ids(&page(&store, conversation, first(10)).await),
        ["e2", "e3", "e4"]
    );
    // A dropped event's id is forgotten with it: sent again, it is new (and the oldest).
    let again = store
        .events
        .append_events(
            conversation,
            OWNER,
            &[event("e0", NOW - 10)],
            &[],
            retention(3),
            NOW,
        )
        .await
        .expect("append")
        .expect("owned");
    assert_eq!((again.stored, again.dropped), (1, 1));
    // An hour later, everything older than an hour goes with the next batch.
    let later = NOW + 3600 * SECOND;
    let aged = store
        .events
        .append_events(
            conversation,
            OWNER,
            &[event("new", later)],
            &[],
            retention(3),
            later,
        )
        .await
        .expect("append")
        .expect("owned");
    assert_eq!((aged.stored, aged.dropped), (1, 3));
    assert_eq!(ids(&page(&store, conversation, first(10)).await), ["new"]);
    let stats = store
        .events
        .event_stats(conversation)
        .await
        .expect("stats")
        .expect("some");
    assert_eq!(stats.count, 1);
}

async fn dead_letters_are_kept_newest_first_and_capped(backend: Backend) {
    let store = open(&backend).await;
    let conversation = Uuid::new_v4();
    let letters: Vec<DeadLetter> = (0..120)
        .map(|i| DeadLetter {
            received_at: i,
            reason: format!("[{i}] kind: Unknown kind"),
            event: RawValue::from_string(format!(r#"{{"n":{i}}}"#)).expect("raw"),
        })
        .collect();
    for chunk in letters.chunks(50) {
        store
            .events
            .append_events(conversation, OWNER, &[], chunk, retention(10), NOW)
            .await
            .expect("append")
            .expect("owned");
    }
    let kept = store
        .events
        .dead_letters(conversation)
        .await
        .expect("dead letters");
    assert_eq!(kept.len(), 100);
    assert_eq!(kept[0].received_at, 119);
    assert_eq!(kept[99].received_at, 20);
    assert_eq!(kept[0].event.get(), r#"{"n":119}"#);
}

/// Events held for a conversation's owner: the sender that posted them can be told to
/// forget them, nobody else can; once forgotten, another sender's events are taken.
async fn events_are_forgotten_only_for_their_sender(backend: Backend) {
    let store = open(&backend).await;
    let conversation = Uuid::new_v4();
    append(
        &store,
        conversation,
        &[event("a", NOW), event("b", NOW + SECOND)],
    )
    .await;
    assert!(
        !store
            .events
            .forget_events(conversation, "static:other")
            .await
            .expect("forget"),
        "not the sender"
    );
    assert_eq!(
        ids(&page(&store, conversation, first(10)).await),
        ["a", "b"]
    );
    assert!(
        store
            .events
            .forget_events(conversation, OWNER)
            .await
            .expect("forget")
    );
    assert!(
        store
            .events
            .event_stats(conversation)
            .await
            .expect("stats")
            .is_none()
    );
    assert!(page(&store, conversation, first(10)).await.is_empty());
    // Nothing of the old events is left: the same ids are new to the next sender.
    let outcome = store
        .events
        .append_events(
            conversation,
            "static:other",
            &[event("a", NOW)],
            &[],
            retention(100),
            NOW,
        )
        .await
        .expect("append")
        .expect("the conversation's events are free again");
    assert_eq!((outcome.stored, outcome.duplicates), (1, 0));
    assert!(
        !store
            .events
            .forget_events(Uuid::new_v4(), OWNER)
            .await
            .expect("forget"),
        "no events at all"
    );
}

crate::on_both_backends!(
    events_are_forgotten_only_for_their_sender,
    events_are_stored_once_by_timestamp_then_arrival,
    another_owner_cannot_add_events,
    retention_drops_the_oldest_and_the_expired,
    dead_letters_are_kept_newest_first_and_capped,
);
