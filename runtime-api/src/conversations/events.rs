//! Agent-server event batches: what the webhook's `events/{conversation_id}` route takes.
//!
//! A batch is a JSON list of events (`openhands.sdk.event`, discriminated by `kind`). The
//! sender holds its conversation until a batch is acknowledged, so one bad event never
//! refuses the batch: it becomes a dead letter with its reason, and the rest are stored.
//! Only a body that is not a JSON list is refused.
//!
//! An event is checked as the real models would take it, from their JSON Schemas (both
//! releases, `event_kinds/`, written by `event_kinds/generate.py`): its `kind` is one of
//! the union's, every field its kind requires is present, it has no field its model does
//! not know (the models forbid extras), and its `source` is one the models take. Where the
//! releases differ, either one accepting is enough. Field values below the top level are
//! not checked: the event is stored as sent. The
//! model gives `id` and `timestamp` defaults; Sandgate derives a missing id from the
//! event's content (so a re-sent event is still stored once) and orders an event whose
//! timestamp is missing or not a date-time by when it arrived.

use std::collections::{BTreeSet, HashMap};
use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use sha2::Digest;

use sandgate_conversation::ExecutionStatus;
use sandgate_conversation::redact;
use sandgate_store::events::MAX_EVENT_ID_BYTES;
use sandgate_store::{DeadLetter, NewEvent};

/// A dead letter keeps at most this much of its event; a larger one keeps a summary.
const MAX_DEAD_LETTER_BYTES: usize = 64 * 1024;

/// The event kinds of one release, as `event_kinds/generate.py` wrote them.
#[derive(Deserialize)]
struct Release {
    kinds: HashMap<String, KindSchema>,
}

#[derive(Deserialize)]
struct KindSchema {
    required: Vec<String>,
    properties: Vec<String>,
    extra_allowed: bool,
    source: Option<Vec<String>>,
}

/// What an event of one kind must look like, merged over the releases so that what either
/// release accepts passes.
#[derive(Debug, Default)]
struct KindRule {
    /// Fields every release that knows the kind requires.
    required: BTreeSet<String>,
    /// Fields some release knows; `None` when a release takes any field.
    known: Option<BTreeSet<String>>,
    /// `source` values some release takes; `None` when a release takes any.
    sources: Option<BTreeSet<String>>,
}

impl KindRule {
    fn merge(&mut self, schema: KindSchema, first: bool) {
        let required: BTreeSet<String> = schema.required.into_iter().collect();
        if first {
            self.required = required;
            self.known = Some(BTreeSet::new());
            self.sources = Some(BTreeSet::new());
        } else {
            self.required.retain(|field| required.contains(field));
        }
        self.known = match (self.known.take(), schema.extra_allowed) {
            (Some(mut known), false) => {
                known.extend(schema.properties);
                Some(known)
            }
            _ => None,
        };
        self.sources = match (self.sources.take(), schema.source) {
            (Some(mut sources), Some(more)) => {
                sources.extend(more);
                Some(sources)
            }
            _ => None,
        };
    }
}

static KINDS: LazyLock<HashMap<String, KindRule>> = LazyLock::new(|| {
    let releases = [
        include_str!("event_kinds/1.34.0.json"),
        include_str!("event_kinds/1.58.2.json"),
    ];
    let mut kinds: HashMap<String, KindRule> = HashMap::new();
    for release in releases {
        let release: Release = serde_json::from_str(release)
            .unwrap_or_else(|err| panic!("an embedded event kinds file does not parse: {err}"));
        for (kind, schema) in release.kinds {
            let first = !kinds.contains_key(&kind);
            kinds.entry(kind).or_default().merge(schema, first);
        }
    }
    kinds
});

/// The changes of the conversation a batch reports, each the newest of its field, with the
/// timestamp of the event that reported it (microseconds since the epoch).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StateChange {
    pub execution_status: Option<(i64, ExecutionStatus)>,
    pub title: Option<(i64, Option<String>)>,
}

impl StateChange {
    fn is_empty(&self) -> bool {
        self.execution_status.is_none() && self.title.is_none()
    }

    /// Takes each field of `newer` that is at least as new as this one's.
    fn merge(&mut self, newer: StateChange) {
        fn newest<T>(kept: &mut Option<(i64, T)>, candidate: Option<(i64, T)>) {
            if let Some(candidate) = candidate
                && kept.as_ref().is_none_or(|kept| kept.0 <= candidate.0)
            {
                *kept = Some(candidate);
            }
        }
        newest(&mut self.execution_status, newer.execution_status);
        newest(&mut self.title, newer.title);
    }
}

/// A batch, sorted into what is stored and what is not.
#[derive(Debug, Default)]
pub struct Batch {
    pub events: Vec<NewEvent>,
    pub dead_letters: Vec<DeadLetter>,
    /// The changes of the conversation the batch reports.
    pub change: StateChange,
}

/// Sorts a parsed body into stored events and dead letters; `None` when the body is not a
/// list (the one thing that refuses a batch).
pub fn sort(body: Value, received_at: i64) -> Option<Batch> {
    let Value::Array(items) = body else {
        return None;
    };
    let mut batch = Batch::default();
    for (index, mut item) in items.into_iter().enumerate() {
        redact::redact(&mut item);
        match admit(&item, received_at) {
            Ok((id, timestamp, change)) => {
                if let Some(change) = change {
                    batch.change.merge(change);
                }
                match serde_json::value::to_raw_value(&item) {
                    Ok(json) => batch.events.push(NewEvent {
                        id,
                        timestamp,
                        json,
                    }),
                    Err(err) => batch.dead_letters.push(dead_letter(
                        index,
                        &item,
                        err.to_string(),
                        received_at,
                    )),
                }
            }
            Err(reason) => batch
                .dead_letters
                .push(dead_letter(index, &item, reason, received_at)),
        }
    }
    Some(batch)
}

fn dead_letter(index: usize, event: &Value, reason: String, received_at: i64) -> DeadLetter {
    let json = serde_json::to_string(event).unwrap_or_default();
    let event = if json.len() <= MAX_DEAD_LETTER_BYTES {
        RawValue::from_string(json).ok()
    } else {
        serde_json::value::to_raw_value(&serde_json::json!({
            "truncated": true,
            "bytes": json.len(),
            "kind": event.get("kind"),
            "id": event.get("id"),
        }))
        .ok()
    };
    DeadLetter {
        received_at,
        reason: format!("[{index}] {reason}"),
        event: event.unwrap_or_else(|| RawValue::NULL.to_owned()),
    }
}

/// The event's id, its timestamp and the conversation change it reports, or why the real
/// models would refuse it.
fn admit(item: &Value, received_at: i64) -> Result<(String, i64, Option<StateChange>), String> {
    let Value::Object(event) = item else {
        return Err("Input should be a valid dictionary or object to extract fields from".into());
    };
    let kind = match event.get("kind") {
        Some(Value::String(kind)) => kind,
        Some(_) => return Err("kind: Input should be a valid string".into()),
        None => return Err("kind: Field required".into()),
    };
    let Some(rule) = KINDS.get(kind) else {
        return Err(format!("kind: Unknown kind '{kind}' for Event"));
    };
    if let Some(missing) = rule
        .required
        .iter()
        .find(|field| !event.contains_key(*field))
    {
        return Err(format!("{missing}: Field required"));
    }
    if let Some(known) = &rule.known
        && let Some(extra) = event.keys().find(|field| !known.contains(*field))
    {
        return Err(format!("{extra}: Extra inputs are not permitted"));
    }
    match (event.get("source"), &rule.sources) {
        (Some(Value::String(source)), Some(sources)) if !sources.contains(source) => {
            return Err(format!(
                "source: Input should be {}",
                sources
                    .iter()
                    .map(|source| format!("'{source}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        (Some(Value::String(_)) | None, _) => {}
        (Some(_), _) => return Err("source: Input should be a valid string".into()),
    }
    let id = match event.get("id") {
        Some(Value::String(id)) => id.clone(),
        Some(_) => return Err("id: Input should be a valid string".into()),
        // The model's default is a fresh uuid; a digest of the content keeps a re-sent
        // event stored once.
        None => format!(
            "sha256:{}",
            hex::encode(sha2::Sha256::digest(item.to_string().as_bytes()))
        ),
    };
    if id.is_empty() || id.len() > MAX_EVENT_ID_BYTES || id.chars().any(char::is_control) {
        return Err(format!(
            "id: Sandgate stores event ids of 1 to {MAX_EVENT_ID_BYTES} bytes without control characters"
        ));
    }
    let timestamp = match event.get("timestamp") {
        Some(Value::String(text)) => {
            sandgate_conversation::datetime_micros(text).unwrap_or(received_at)
        }
        Some(_) => return Err("timestamp: Input should be a valid string".into()),
        None => received_at,
    };
    Ok((id, timestamp, state_change(kind, event, timestamp)))
}

/// What a `ConversationStateUpdateEvent` says of the conversation: its `execution_status`
/// and `title`, reported one key at a time or together as `full_state`.
fn state_change(
    kind: &str,
    event: &serde_json::Map<String, Value>,
    at: i64,
) -> Option<StateChange> {
    if kind != "ConversationStateUpdateEvent" {
        return None;
    }
    let value = event.get("value")?;
    let status = |value: &Value| value.as_str().and_then(ExecutionStatus::parse);
    let title = |value: &Value| match value {
        Value::Null => Some(None),
        Value::String(title) => Some(Some(title.clone())),
        _ => None,
    };
    let status = |value: &Value| status(value).map(|status| (at, status));
    let title = |value: &Value| title(value).map(|title| (at, title));
    let change = match event.get("key")?.as_str()? {
        "execution_status" => StateChange {
            execution_status: status(value),
            title: None,
        },
        "title" => StateChange {
            execution_status: None,
            title: title(value),
        },
        "full_state" => StateChange {
            execution_status: value.get("execution_status").and_then(status),
            title: value.get("title").and_then(title),
        },
        _ => return None,
    };
    (!change.is_empty()).then_some(change)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn message(id: &str, timestamp: &str) -> Value {
        json!({
            "kind": "MessageEvent", "id": id, "timestamp": timestamp, "source": "user",
            "llm_message": {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        })
    }

    #[test]
    fn bad_events_become_dead_letters_and_the_rest_is_stored() {
        let body = json!([
            message("e1", "2026-03-01T12:00:00.000001"),
            {"kind": "NoSuchEvent", "id": "e2"},
            42,
            {"kind": "MessageEvent", "id": "e4", "source": "user"},
            message("e5\u{7}", "2026-03-01T12:00:00"),
        ]);
        let batch = sort(body, 7).unwrap();
        assert_eq!(batch.events.len(), 1);
        assert_eq!(batch.events[0].id, "e1");
        assert_eq!(batch.events[0].timestamp, 1_772_366_400_000_001);
        let reasons: Vec<&str> = batch
            .dead_letters
            .iter()
            .map(|d| d.reason.as_str())
            .collect();
        assert_eq!(reasons.len(), 4, "{reasons:?}");
        assert!(
            reasons[0].starts_with("[1] kind: Unknown kind 'NoSuchEvent'"),
            "{reasons:?}"
        );
        assert!(
            reasons[1].starts_with("[2] Input should be a valid dictionary"),
            "{reasons:?}"
        );
        assert_eq!(reasons[2], "[3] llm_message: Field required");
        assert!(reasons[3].starts_with("[4] id: "), "{reasons:?}");
    }

    #[test]
    fn only_a_list_is_a_batch() {
        assert!(sort(json!({"kind": "MessageEvent"}), 0).is_none());
        assert!(sort(json!([]), 0).unwrap().events.is_empty());
    }

    #[test]
    fn an_event_without_an_id_gets_one_from_its_content() {
        let mut event = message("x", "2026-03-01T12:00:00");
        event.as_object_mut().unwrap().remove("id");
        let first = sort(json!([event.clone()]), 1).unwrap();
        let again = sort(json!([event]), 2).unwrap();
        assert!(first.events[0].id.starts_with("sha256:"));
        assert_eq!(first.events[0].id, again.events[0].id);
    }

    #[test]
    fn state_updates_report_the_newest_status_and_title() {
        let titled = sort(
            json!([
                {"kind": "ConversationStateUpdateEvent", "id": "a", "timestamp": "2026-03-01T12:00:05",
                 "source": "environment", "key": "execution_status", "value": "paused"},
                {"kind": "ConversationStateUpdateEvent", "id": "b", "timestamp": "2026-03-01T12:00:06",
                 "source": "environment", "key": "title", "value": "New"},
            ]),
            0,
        )
        .unwrap();
        // Each field keeps its own newest report.
        assert_eq!(
            titled.change.execution_status.map(|(_, status)| status),
            Some(ExecutionStatus::Paused)
        );
        assert_eq!(
            titled.change.title.map(|(_, title)| title),
            Some(Some("New".into()))
        );
        let update = |key: &str, value: Value, timestamp: &str| {
            json!({"kind": "ConversationStateUpdateEvent", "id": format!("{key}{timestamp}"),
                   "timestamp": timestamp, "source": "environment", "key": key, "value": value})
        };
        let batch = sort(
            json!([
                update("execution_status", json!("running"), "2026-03-01T12:00:02"),
                update("execution_status", json!("paused"), "2026-03-01T12:00:01"),
                update(
                    "full_state",
                    json!({"execution_status": "finished", "title": "T"}),
                    "2026-03-01T12:00:03"
                ),
                update("stats", json!({}), "2026-03-01T12:00:04"),
            ]),
            0,
        )
        .unwrap();
        let change = batch.change;
        let at = |second: i64| 1_772_366_400_000_000 + second * 1_000_000;
        assert_eq!(
            change.execution_status,
            Some((at(3), ExecutionStatus::Finished))
        );
        assert_eq!(change.title, Some((at(3), Some("T".into()))));
        assert_eq!(batch.events.len(), 4);
    }

    #[test]
    fn secrets_are_redacted_before_anything_is_kept() {
        let event = json!({
            "kind": "ConversationStateUpdateEvent", "id": "s1", "source": "environment",
            "timestamp": "2026-03-01T12:00:00", "key": "full_state",
            "value": {"agent": {"llm": {"api_key": "sk-secret"}}},
        });
        let bad = json!({"kind": "Nope", "api_key": "sk-other"});
        let batch = sort(json!([event, bad]), 0).unwrap();
        assert!(!batch.events[0].json.get().contains("sk-secret"));
        assert!(!batch.dead_letters[0].event.get().contains("sk-other"));
    }
}
