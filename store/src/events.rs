//! Agent-server events, per conversation: what the store keeps and how it is ordered.
//!
//! Every event has an order key, `<timestamp><arrival>` in fixed-width hex, so a plain
//! lexical order of the keys is "by timestamp, then arrival". The key is also the paging
//! cursor. An event is stored once per conversation: its id maps to its order key until
//! retention drops it.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use uuid::Uuid;

use super::StoreResult;

/// How many dead letters a conversation keeps (the newest).
pub const MAX_DEAD_LETTERS: usize = 100;

/// How long and how many events a conversation keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventRetention {
    /// The newest this many events are kept; older ones are dropped as new ones arrive.
    pub max_per_conversation: usize,
    /// Events whose timestamp is older than this are dropped by the next batch of their
    /// conversation and never listed; a conversation that receives nothing for this long
    /// is dropped whole (Redis expires its keys).
    pub max_age_seconds: u64,
}

impl Default for EventRetention {
    fn default() -> Self {
        Self {
            max_per_conversation: 10_000,
            max_age_seconds: 30 * 24 * 3600,
        }
    }
}

/// An event that validated, ready to store.
#[derive(Clone, Debug)]
pub struct NewEvent {
    /// The event's `id`: non-empty, printable, at most [`MAX_EVENT_ID_BYTES`].
    pub id: String,
    /// Microseconds since the epoch (a naive timestamp is taken as UTC).
    pub timestamp: i64,
    /// The event's JSON, secrets redacted.
    pub json: Box<RawValue>,
}

/// The longest event id the store takes; a longer one is a dead letter.
pub const MAX_EVENT_ID_BYTES: usize = 256;

/// An event that failed validation, kept with the reason so an operator can see what a
/// sender got wrong.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeadLetter {
    /// When Sandgate received it, microseconds since the epoch.
    pub received_at: i64,
    /// The first validation error, `loc: msg`.
    pub reason: String,
    /// The event as received, secrets redacted (cut to a bounded size).
    pub event: Box<RawValue>,
}

/// What a batch did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AppendOutcome {
    pub stored: u32,
    pub duplicates: u32,
    /// Events dropped by retention (count or age) while this batch was written.
    pub dropped: u64,
}

/// A conversation's events at a glance, for its record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventStats {
    /// Who posted its events first; later batches from anyone else are refused.
    pub owner: String,
    pub count: u64,
    /// The newest kept event's timestamp, microseconds since the epoch.
    pub last_event_at: Option<i64>,
}

/// A stored event with its order key.
#[derive(Clone, Debug)]
pub struct StoredEvent {
    pub order_key: String,
    pub id: String,
    pub timestamp: i64,
    pub json: Box<RawValue>,
}

/// Which events to list: after (or, descending, before) a cursor, at most `limit`.
#[derive(Clone, Debug)]
pub struct EventPage {
    pub after: Option<String>,
    pub limit: usize,
    pub descending: bool,
}

/// The width of each half of an order key, in hex digits.
const HALF: usize = 16;

/// The order key of an event: its timestamp, then its arrival number in the conversation.
/// The timestamp's sign bit is flipped so that keys of dates before 1970 sort first too.
pub fn order_key(timestamp: i64, arrival: u64) -> String {
    format!("{:016x}{arrival:016x}", timestamp_bits(timestamp))
}

/// The smallest order key of any event at or after `timestamp`.
pub fn order_key_floor(timestamp: i64) -> String {
    order_key(timestamp, 0)
}

fn timestamp_bits(timestamp: i64) -> u64 {
    (timestamp as u64) ^ (1 << 63)
}

/// The timestamp an order key was made from.
pub fn order_key_timestamp(key: &str) -> Option<i64> {
    let bits = u64::from_str_radix(key.get(..HALF)?, 16).ok()?;
    Some((bits ^ (1 << 63)) as i64)
}

/// Whether `key` is a well-formed order key (a cursor from a caller is checked with it).
pub fn is_order_key(key: &str) -> bool {
    key.len() == 2 * HALF && key.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A stored event's value: its id, a newline, its JSON. The id travels with the data so
/// that retention can forget the id of an event it drops without parsing the JSON. Event
/// ids hold no control characters (validation sends those to the dead letters).
pub fn encode_event(id: &str, json: &RawValue) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(id.len() + 1 + json.get().len());
    bytes.extend_from_slice(id.as_bytes());
    bytes.push(b'\n');
    bytes.extend_from_slice(json.get().as_bytes());
    bytes
}

/// The id and JSON of a stored event's value.
pub fn decode_event(bytes: &[u8]) -> Option<(&str, &str)> {
    let split = bytes.iter().position(|&b| b == b'\n')?;
    let id = std::str::from_utf8(&bytes[..split]).ok()?;
    let json = std::str::from_utf8(&bytes[split + 1..]).ok()?;
    Some((id, json))
}

/// A stored event from its order key and value.
pub fn stored_event(order_key: String, value: &[u8]) -> StoreResult<StoredEvent> {
    let corrupt = || super::StoreError::Corrupt(format!("event {order_key} is malformed"));
    let (id, json) = decode_event(value).ok_or_else(corrupt)?;
    let timestamp = order_key_timestamp(&order_key).ok_or_else(corrupt)?;
    let json = RawValue::from_string(json.to_owned()).map_err(|_| corrupt())?;
    Ok(StoredEvent {
        id: id.to_owned(),
        timestamp,
        json,
        order_key,
    })
}

/// The events of every conversation.
#[async_trait]
pub trait EventStore: Send + Sync + 'static {
    /// Stores the events of one batch that are not stored yet, and the dead letters,
    /// atomically, then applies `retention`. `None`: the conversation's events were
    /// first posted by another owner, and nothing was written.
    async fn append_events(
        &self,
        conversation: Uuid,
        owner: &str,
        events: &[NewEvent],
        dead_letters: &[DeadLetter],
        retention: EventRetention,
        now: i64,
    ) -> StoreResult<Option<AppendOutcome>>;

    /// The conversation's event count, newest timestamp and owner; `None` when no event
    /// of it was ever posted (or all expired).
    async fn event_stats(&self, conversation: Uuid) -> StoreResult<Option<EventStats>>;

    /// One page of the conversation's events in order-key order.
    async fn list_events(
        &self,
        conversation: Uuid,
        page: &EventPage,
    ) -> StoreResult<Vec<StoredEvent>>;

    /// The conversation's dead letters, newest first.
    async fn dead_letters(&self, conversation: Uuid) -> StoreResult<Vec<DeadLetter>>;

    /// Forgets the conversation's events, dead letters and owner, atomically, when
    /// `owner` posted them; `false` (nothing forgotten) when someone else did, or nobody.
    /// Events posted before their conversation's record are held for the record's owner:
    /// another sender's are dropped once the record names its owner, so that a squatter
    /// cannot lock the owner out of its own conversation.
    async fn forget_events(&self, conversation: Uuid, owner: &str) -> StoreResult<bool>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_keys_sort_by_timestamp_then_arrival() {
        let keys = [
            order_key(-5, 9),
            order_key(0, 3),
            order_key(0, 4),
            order_key(1_700_000_000_000_000, 1),
            order_key(1_700_000_000_000_001, 0),
        ];
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(sorted, keys);
        for key in &keys {
            assert!(is_order_key(key), "{key}");
        }
        assert_eq!(order_key_timestamp(&keys[0]), Some(-5));
        assert_eq!(order_key_timestamp(&keys[3]), Some(1_700_000_000_000_000));
        assert!(order_key_floor(1) > keys[2]);
        assert!(!is_order_key("0123"));
        assert!(!is_order_key(&"G".repeat(32)));
    }

    #[test]
    fn a_stored_event_keeps_its_id_beside_its_json() {
        let json = RawValue::from_string(r#"{"id":"e1","note":"a\nb"}"#.into()).unwrap();
        let bytes = encode_event("e1", &json);
        assert_eq!(decode_event(&bytes), Some(("e1", json.get())));
        let event = stored_event(order_key(42, 1), &bytes).unwrap();
        assert_eq!((event.id.as_str(), event.timestamp), ("e1", 42));
        assert_eq!(event.json.get(), json.get());
    }
}
