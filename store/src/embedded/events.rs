//! Agent-server events in the embedded store. Keys start with the conversation's id as 32
//! hex digits, so one conversation's entries are one contiguous range of each table.

use std::ops::Bound;

use async_trait::async_trait;
use redb::{ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{EmbeddedStore, unavailable};
use crate::events::{
    AppendOutcome, DeadLetter, EventPage, EventRetention, EventStats, EventStore, MAX_DEAD_LETTERS,
    NewEvent, StoredEvent, encode_event, order_key, order_key_floor, order_key_timestamp,
    stored_event,
};
use crate::{StoreError, StoreResult};

/// `<conversation><order key>` → `<event id>\n<event JSON>`.
pub(super) const EVENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("events");
/// `<conversation><event id>` → the event's order key.
pub(super) const EVENT_IDS: TableDefinition<&str, &str> = TableDefinition::new("event_ids");
/// `<conversation>` → [`Meta`] as JSON.
pub(super) const EVENT_META: TableDefinition<&str, &[u8]> = TableDefinition::new("event_meta");
/// `<conversation><sequence, 16 hex>` → a dead letter's JSON.
pub(super) const DEAD_LETTERS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("event_dead_letters");

/// The most events one append drops for retention (as on Redis).
const MAX_DROPS_PER_APPEND: usize = 1_000;

/// A conversation's event bookkeeping.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Meta {
    owner: String,
    /// Arrivals so far: the second half of the next order key.
    seq: u64,
    /// Events kept.
    count: u64,
    /// Dead letters so far: the key of the next one.
    dead_seq: u64,
}

pub(super) fn create_tables(txn: &WriteTransaction) -> StoreResult<()> {
    txn.open_table(EVENTS).map_err(unavailable)?;
    txn.open_table(EVENT_IDS).map_err(unavailable)?;
    txn.open_table(EVENT_META).map_err(unavailable)?;
    txn.open_table(DEAD_LETTERS).map_err(unavailable)?;
    Ok(())
}

fn prefix(conversation: Uuid) -> String {
    conversation.simple().to_string()
}

fn corrupt(err: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(err.to_string())
}

/// Drops the events of `conversation` in `range` (order keys), oldest first, at most
/// `budget`, with their ids. Returns how many went.
fn drop_events(
    events: &mut redb::Table<&str, &[u8]>,
    ids: &mut redb::Table<&str, &str>,
    conversation: &str,
    end: &str,
    budget: usize,
) -> StoreResult<u64> {
    let start = format!("{conversation}{}", "0".repeat(32));
    let end = format!("{conversation}{end}");
    let mut victims = Vec::new();
    for entry in events
        .range(start.as_str()..end.as_str())
        .map_err(unavailable)?
        .take(budget)
    {
        let (key, value) = entry.map_err(unavailable)?;
        let id = crate::events::decode_event(value.value())
            .map(|(id, _)| id.to_owned())
            .ok_or_else(|| corrupt("an event without its id"))?;
        victims.push((key.value().to_owned(), id));
    }
    for (key, id) in &victims {
        events.remove(key.as_str()).map_err(unavailable)?;
        ids.remove(format!("{conversation}{id}").as_str())
            .map_err(unavailable)?;
    }
    Ok(victims.len() as u64)
}

fn append(
    txn: &WriteTransaction,
    conversation: Uuid,
    owner: &str,
    events: &[NewEvent],
    dead_letters: &[DeadLetter],
    retention: EventRetention,
    age_floor: &str,
) -> StoreResult<Option<AppendOutcome>> {
    let conversation = prefix(conversation);
    let mut metas = txn.open_table(EVENT_META).map_err(unavailable)?;
    let mut meta: Meta = match metas.get(conversation.as_str()).map_err(unavailable)? {
        Some(entry) => serde_json::from_slice(entry.value()).map_err(corrupt)?,
        None => Meta {
            owner: owner.to_owned(),
            ..Meta::default()
        },
    };
    if meta.owner != owner {
        return Ok(None);
    }
    let mut table = txn.open_table(EVENTS).map_err(unavailable)?;
    let mut ids = txn.open_table(EVENT_IDS).map_err(unavailable)?;
    let mut outcome = AppendOutcome::default();
    for event in events {
        let id_key = format!("{conversation}{}", event.id);
        if ids.get(id_key.as_str()).map_err(unavailable)?.is_some() {
            outcome.duplicates += 1;
            continue;
        }
        meta.seq += 1;
        let key = order_key(event.timestamp, meta.seq);
        ids.insert(id_key.as_str(), key.as_str())
            .map_err(unavailable)?;
        table
            .insert(
                format!("{conversation}{key}").as_str(),
                encode_event(&event.id, &event.json).as_slice(),
            )
            .map_err(unavailable)?;
        meta.count += 1;
        outcome.stored += 1;
    }
    if !dead_letters.is_empty() {
        let mut dead = txn.open_table(DEAD_LETTERS).map_err(unavailable)?;
        for letter in dead_letters {
            dead.insert(
                format!("{conversation}{:016x}", meta.dead_seq).as_str(),
                serde_json::to_vec(letter).map_err(corrupt)?.as_slice(),
            )
            .map_err(unavailable)?;
            meta.dead_seq += 1;
        }
        let keep_from = meta.dead_seq.saturating_sub(MAX_DEAD_LETTERS as u64);
        let start = format!("{conversation}{:016x}", 0);
        let end = format!("{conversation}{keep_from:016x}");
        dead.retain_in(start.as_str()..end.as_str(), |_, _| false)
            .map_err(unavailable)?;
    }
    let mut budget = MAX_DROPS_PER_APPEND;
    outcome.dropped = drop_events(&mut table, &mut ids, &conversation, age_floor, budget)?;
    budget -= outcome.dropped as usize;
    meta.count = meta.count.saturating_sub(outcome.dropped);
    let excess = meta
        .count
        .saturating_sub(retention.max_per_conversation as u64);
    if excess > 0 && budget > 0 {
        let dropped = drop_events(
            &mut table,
            &mut ids,
            &conversation,
            "g",
            budget.min(excess as usize),
        )?;
        meta.count -= dropped;
        outcome.dropped += dropped;
    }
    metas
        .insert(
            conversation.as_str(),
            serde_json::to_vec(&meta).map_err(corrupt)?.as_slice(),
        )
        .map_err(unavailable)?;
    Ok(Some(outcome))
}

/// Removes every entry of `table` whose key starts with `conversation`.
fn remove_prefixed<V: redb::Value + 'static>(
    table: &mut redb::Table<&str, V>,
    conversation: &str,
) -> StoreResult<()> {
    // Keys are the 32 hex digits, then hex digits or an event id: none sorts past the
    // last code point.
    let start = conversation.to_owned();
    let end = format!("{conversation}\u{10ffff}");
    let mut victims = Vec::new();
    for entry in table
        .range(start.as_str()..end.as_str())
        .map_err(unavailable)?
    {
        let (key, _) = entry.map_err(unavailable)?;
        victims.push(key.value().to_owned());
    }
    for key in &victims {
        table.remove(key.as_str()).map_err(unavailable)?;
    }
    Ok(())
}

fn forget(txn: &WriteTransaction, conversation: Uuid, owner: &str) -> StoreResult<bool> {
    let conversation = prefix(conversation);
    let mut metas = txn.open_table(EVENT_META).map_err(unavailable)?;
    let meta: Meta = match metas.get(conversation.as_str()).map_err(unavailable)? {
        Some(entry) => serde_json::from_slice(entry.value()).map_err(corrupt)?,
        None => return Ok(false),
    };
    if meta.owner != owner {
        return Ok(false);
    }
    metas.remove(conversation.as_str()).map_err(unavailable)?;
    remove_prefixed(
        &mut txn.open_table(EVENTS).map_err(unavailable)?,
        &conversation,
    )?;
    remove_prefixed(
        &mut txn.open_table(EVENT_IDS).map_err(unavailable)?,
        &conversation,
    )?;
    remove_prefixed(
        &mut txn.open_table(DEAD_LETTERS).map_err(unavailable)?,
        &conversation,
    )?;
    Ok(true)
}

#[async_trait]
impl EventStore for EmbeddedStore {
    async fn forget_events(&self, conversation: Uuid, owner: &str) -> StoreResult<bool> {
        let owner = owner.to_owned();
        self.transact(move |txn| forget(txn, conversation, &owner))
            .await
    }

    async fn append_events(
        &self,
        conversation: Uuid,
        owner: &str,
        events: &[NewEvent],
        dead_letters: &[DeadLetter],
        retention: EventRetention,
        now: i64,
    ) -> StoreResult<Option<AppendOutcome>> {
        let age_micros = i64::try_from(retention.max_age_seconds)
            .unwrap_or(i64::MAX)
            .saturating_mul(1_000_000);
        let age_floor = order_key_floor(now.saturating_sub(age_micros));
        let owner = owner.to_owned();
        let events = events.to_vec();
        let dead_letters = dead_letters.to_vec();
        self.transact(move |txn| {
            append(
                txn,
                conversation,
                &owner,
                &events,
                &dead_letters,
                retention,
                &age_floor,
            )
        })
        .await
    }

    async fn event_stats(&self, conversation: Uuid) -> StoreResult<Option<EventStats>> {
        let conversation = prefix(conversation);
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let metas = txn.open_table(EVENT_META).map_err(unavailable)?;
            let Some(entry) = metas.get(conversation.as_str()).map_err(unavailable)? else {
                return Ok(None);
            };
            let meta: Meta = serde_json::from_slice(entry.value()).map_err(corrupt)?;
            let events = txn.open_table(EVENTS).map_err(unavailable)?;
            let start = format!("{conversation}{}", "0".repeat(32));
            let end = format!("{conversation}g");
            let newest = events
                .range(start.as_str()..end.as_str())
                .map_err(unavailable)?
                .next_back()
                .transpose()
                .map_err(unavailable)?
                .and_then(|(key, _)| order_key_timestamp(&key.value()[32..]));
            Ok(Some(EventStats {
                owner: meta.owner,
                count: meta.count,
                last_event_at: newest,
            }))
        })
        .await
    }

    async fn list_events(
        &self,
        conversation: Uuid,
        page: &EventPage,
    ) -> StoreResult<Vec<StoredEvent>> {
        let conversation = prefix(conversation);
        let page = page.clone();
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let events = txn.open_table(EVENTS).map_err(unavailable)?;
            let first = Bound::Included(format!("{conversation}{}", "0".repeat(32)));
            let last = Bound::Excluded(format!("{conversation}g"));
            let cursor = page
                .after
                .as_ref()
                .map(|after| Bound::Excluded(format!("{conversation}{after}")));
            let (start, end) = match (cursor, page.descending) {
                (Some(cursor), false) => (cursor, last),
                (Some(cursor), true) => (first, cursor),
                (None, _) => (first, last),
            };
            let range = events
                .range::<&str>((
                    start.as_ref().map(String::as_str),
                    end.as_ref().map(String::as_str),
                ))
                .map_err(unavailable)?;
            let entries: Box<dyn Iterator<Item = _>> = if page.descending {
                Box::new(range.rev())
            } else {
                Box::new(range)
            };
            entries
                .take(page.limit)
                .map(|entry| {
                    let (key, value) = entry.map_err(unavailable)?;
                    stored_event(key.value()[32..].to_owned(), value.value())
                })
                .collect()
        })
        .await
    }

    async fn dead_letters(&self, conversation: Uuid) -> StoreResult<Vec<DeadLetter>> {
        let conversation = prefix(conversation);
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let dead = txn.open_table(DEAD_LETTERS).map_err(unavailable)?;
            let start = format!("{conversation}{}", "0".repeat(16));
            let end = format!("{conversation}g");
            dead.range(start.as_str()..end.as_str())
                .map_err(unavailable)?
                .rev()
                .take(MAX_DEAD_LETTERS)
                .map(|entry| {
                    let (_, value) = entry.map_err(unavailable)?;
                    serde_json::from_slice(value.value()).map_err(corrupt)
                })
                .collect()
        })
        .await
    }
}
