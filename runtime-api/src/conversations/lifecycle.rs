//! How a delivery relates to the record it would replace: its order, and the lifecycle
//! step (start, pause, resume, delete) it stands for.

use serde_json::value::RawValue;

use super::events::StateChange;
use sandgate_conversation::{ConversationSummary, ExecutionStatus};
use sandgate_store::{LifecycleEvent, LifecycleKind, StoredConversation};

/// How many lifecycle events a conversation keeps (the newest).
pub const MAX_LIFECYCLE_EVENTS: usize = 256;

#[derive(Debug, PartialEq, Eq)]
pub enum Order {
    /// Newer than the stored record (or not comparable): apply it.
    Newer,
    /// The same delivery again: nothing to write.
    Duplicate,
    /// Older than the stored record: acknowledge without overwriting.
    Stale,
}

/// Deliveries are retried and can arrive out of order; `updated_at` orders them. Two
/// deliveries with the same `updated_at` but different content both apply, in arrival order.
pub fn order(stored: &StoredConversation, updated_at: Option<i64>, record: &RawValue) -> Order {
    if stored.record.get() == record.get() {
        return Order::Duplicate;
    }
    match (stored.updated_at, updated_at) {
        (Some(stored), Some(incoming)) if incoming < stored => Order::Stale,
        _ => Order::Newer,
    }
}

/// The lifecycle step a delivery stands for, given the record it replaces.
pub fn step(
    previous: Option<&StoredConversation>,
    status: ExecutionStatus,
) -> Option<LifecycleKind> {
    let deleting = status == ExecutionStatus::Deleting;
    let paused = status == ExecutionStatus::Paused;
    match previous {
        None if deleting => Some(LifecycleKind::Delete),
        None => Some(LifecycleKind::Start),
        Some(previous) if deleting => (!previous.deleted).then_some(LifecycleKind::Delete),
        Some(previous) => {
            let was_paused = previous.execution_status == ExecutionStatus::Paused.as_str();
            match (was_paused, paused) {
                (false, true) => Some(LifecycleKind::Pause),
                (true, false) => Some(LifecycleKind::Resume),
                _ => None,
            }
        }
    }
}

/// The record that replaces `previous` once this delivery applies.
pub fn next_record(
    previous: Option<&StoredConversation>,
    summary: &ConversationSummary,
    record: Box<RawValue>,
    owner: String,
    received_at: i64,
) -> StoredConversation {
    let status = summary.execution_status;
    let mut lifecycle = previous
        .map(|previous| previous.lifecycle.clone())
        .unwrap_or_default();
    if let Some(kind) = step(previous, status) {
        lifecycle.push(LifecycleEvent {
            kind,
            execution_status: status.as_str().to_owned(),
            updated_at: summary.updated_at,
            received_at,
        });
        if lifecycle.len() > MAX_LIFECYCLE_EVENTS {
            lifecycle.drain(..lifecycle.len() - MAX_LIFECYCLE_EVENTS);
        }
    }
    StoredConversation {
        id: summary.id,
        version: previous.map_or(0, |previous| previous.version) + 1,
        owner,
        execution_status: status.as_str().to_owned(),
        updated_at: summary.updated_at,
        received_at,
        // Deletion sticks: a straggler from the sandbox does not bring a conversation back.
        deleted: status == ExecutionStatus::Deleting
            || previous.is_some_and(|previous| previous.deleted),
        parent_id: summary.parent_conversation_id,
        tags: summary.tags.clone(),
        model: summary.model.clone(),
        lifecycle,
        record,
    }
}

/// The record after a batch's state updates, or `None` when they change nothing. A field
/// changes only when its event is not older than the record (`updated_at`), and a deleted
/// conversation keeps its status: an event does not bring it back.
pub fn apply_change(
    previous: &StoredConversation,
    change: &StateChange,
    received_at: i64,
) -> Option<StoredConversation> {
    let current = |at: i64| {
        previous
            .updated_at
            .is_none_or(|updated_at| at >= updated_at)
    };
    let status = change.execution_status.filter(|(at, status)| {
        current(*at) && !previous.deleted && status.as_str() != previous.execution_status
    });
    let mut record = match sandgate_proto::json::from_stored::<serde_json::Value>(
        previous.record.get().as_bytes(),
    ) {
        Ok(serde_json::Value::Object(record)) => record,
        _ => return None,
    };
    let title = change.title.clone().filter(|(at, title)| {
        current(*at) && record.get("title").and_then(serde_json::Value::as_str) != title.as_deref()
    });
    if status.is_none() && title.is_none() {
        return None;
    }
    let mut next = previous.clone();
    next.version += 1;
    next.received_at = received_at;
    if let Some((at, status)) = status {
        record.insert("execution_status".into(), status.as_str().into());
        next.execution_status = status.as_str().to_owned();
        if let Some(kind) = step(Some(previous), status) {
            next.lifecycle.push(LifecycleEvent {
                kind,
                execution_status: status.as_str().to_owned(),
                updated_at: Some(at),
                received_at,
            });
            if next.lifecycle.len() > MAX_LIFECYCLE_EVENTS {
                next.lifecycle
                    .drain(..next.lifecycle.len() - MAX_LIFECYCLE_EVENTS);
            }
        }
        next.deleted = status == ExecutionStatus::Deleting;
    }
    if let Some((_, title)) = title {
        record.insert("title".into(), title.into());
    }
    next.record = serde_json::value::to_raw_value(&record).ok()?;
    Some(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandgate_store::LifecycleKind::{Delete, Pause, Resume, Start};

    fn stored(
        status: ExecutionStatus,
        deleted: bool,
        updated_at: Option<i64>,
    ) -> StoredConversation {
        StoredConversation {
            id: uuid::Uuid::nil(),
            version: 3,
            owner: "static:x".into(),
            execution_status: status.as_str().into(),
            updated_at,
            received_at: 0,
            deleted,
            parent_id: None,
            tags: Default::default(),
            model: None,
            lifecycle: Vec::new(),
            record: RawValue::from_string(r#"{"a":1}"#.into()).unwrap(),
        }
    }

    #[test]
    fn steps_follow_the_status_change() {
        use ExecutionStatus::*;
        assert_eq!(step(None, Idle), Some(Start));
        assert_eq!(step(None, Deleting), Some(Delete));
        assert_eq!(
            step(Some(&stored(Running, false, None)), Paused),
            Some(Pause)
        );
        assert_eq!(
            step(Some(&stored(Paused, false, None)), Running),
            Some(Resume)
        );
        assert_eq!(step(Some(&stored(Paused, false, None)), Paused), None);
        assert_eq!(step(Some(&stored(Running, false, None)), Finished), None);
        assert_eq!(
            step(Some(&stored(Paused, false, None)), Deleting),
            Some(Delete)
        );
        assert_eq!(step(Some(&stored(Deleting, true, None)), Deleting), None);
    }

    #[test]
    fn older_deliveries_are_stale_and_repeats_are_duplicates() {
        let current = stored(ExecutionStatus::Running, false, Some(100));
        let other = RawValue::from_string(r#"{"a":2}"#.into()).unwrap();
        assert_eq!(order(&current, Some(99), &other), Order::Stale);
        assert_eq!(order(&current, Some(100), &other), Order::Newer);
        assert_eq!(order(&current, Some(101), &other), Order::Newer);
        assert_eq!(order(&current, None, &other), Order::Newer);
        assert_eq!(
            order(&current, Some(100), &current.record),
            Order::Duplicate
        );
    }
}
