//! A stored conversation as callers see it.

use sandgate_proto::conversations::v1 as pb;
use serde_json::Value;
use uuid::Uuid;

use sandgate_store::{EventStats, LifecycleKind, StoredConversation, StoredEvent};

fn timestamp(micros: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: micros.div_euclid(1_000_000),
        nanos: (micros.rem_euclid(1_000_000) * 1_000) as i32,
    }
}

fn lifecycle_kind(kind: LifecycleKind) -> pb::LifecycleKind {
    match kind {
        LifecycleKind::Start => pb::LifecycleKind::Start,
        LifecycleKind::Pause => pb::LifecycleKind::Pause,
        LifecycleKind::Resume => pb::LifecycleKind::Resume,
        LifecycleKind::Delete => pb::LifecycleKind::Delete,
    }
}

/// The record with the catalog's view laid over it: its canonical `id`, its current
/// `tags` and the `sub_conversation_ids` derived from the children that name it.
pub fn conversation(
    stored: &StoredConversation,
    children: &[Uuid],
    events: Option<&EventStats>,
) -> pb::Conversation {
    let sub_conversation_ids: Vec<String> = children.iter().map(Uuid::to_string).collect();
    let record_json =
        match sandgate_proto::json::from_stored::<Value>(stored.record.get().as_bytes()) {
            Ok(Value::Object(mut record)) => {
                record.insert("id".into(), Value::from(stored.id.to_string()));
                record.insert("tags".into(), serde_json::json!(stored.tags));
                record.insert(
                    "sub_conversation_ids".into(),
                    serde_json::json!(sub_conversation_ids),
                );
                serde_json::to_vec(&record).unwrap_or_default()
            }
            _ => stored.record.get().as_bytes().to_vec(),
        };
    pb::Conversation {
        id: stored.id.to_string(),
        record_json: record_json.into(),
        execution_status: stored.execution_status.clone(),
        deleted: stored.deleted,
        updated_at: stored.updated_at.map(timestamp),
        model: stored.model.clone().unwrap_or_default(),
        sub_conversation_ids,
        lifecycle: stored
            .lifecycle
            .iter()
            .map(|event| pb::LifecycleEvent {
                kind: lifecycle_kind(event.kind).into(),
                execution_status: event.execution_status.clone(),
                updated_at: event.updated_at.map(timestamp),
                received_at: Some(timestamp(event.received_at)),
            })
            .collect(),
        event_count: events.map_or(0, |events| events.count),
        last_event_at: events
            .and_then(|events| events.last_event_at)
            .map(timestamp),
    }
}

/// A stored event's `kind` (validated on the way in, so present).
pub fn event_kind(event: &StoredEvent) -> String {
    #[derive(serde::Deserialize)]
    struct Kind<'a> {
        #[serde(borrow)]
        kind: std::borrow::Cow<'a, str>,
    }
    serde_json::from_str::<Kind<'_>>(event.json.get())
        .map(|kind| kind.kind.into_owned())
        .unwrap_or_default()
}

pub fn event(event: &StoredEvent, kind: String) -> pb::Event {
    pb::Event {
        id: event.id.clone(),
        kind,
        timestamp: Some(timestamp(event.timestamp)),
        event_json: event.json.get().as_bytes().to_vec().into(),
    }
}
