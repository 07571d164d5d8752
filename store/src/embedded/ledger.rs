//! The ledger in the embedded store: `<scope>\0<day>\0<measure>|<id>` → the amount
//! (little-endian f64), and the day's ids, `<scope>\0<day>\0<id>`, read by range for a
//! page; days past the retention go as new counts arrive, and with them what is kept of a
//! conversation counted on none of the days left (its models, links and owner).

use async_trait::async_trait;
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use super::{EmbeddedStore, unavailable};
use crate::StoreResult;
use crate::ledger::conversation_model;
use crate::ledger::{
    Bound, ConversationOwner, LEDGER_RETENTION_DAYS, LedgerCount, LedgerRows, LedgerScope,
    LedgerStore, Measure, add_field, field, first_after, merge_ids, past,
};
use std::collections::HashMap;

pub(super) const LEDGER: TableDefinition<&str, [u8; 8]> = TableDefinition::new("ledger");
/// `<conversation>\x1f<model>` for each model a conversation's calls were counted for.
pub(super) const LEDGER_MODELS: TableDefinition<&str, ()> = TableDefinition::new("ledger_models");
/// `s\0<session>` → its conversation, `c\0<conversation>` → its sandbox's session, and
/// `o\0<conversation>` → its owner (JSON).
pub(super) const LEDGER_LINKS: TableDefinition<&str, &str> = TableDefinition::new("ledger_links");
/// Each conversation's last day counted: what is kept of it goes when that day does.
pub(super) const LEDGER_LAST: TableDefinition<&str, u32> = TableDefinition::new("ledger_last");
/// `<scope>\0<day>\0<id>` for each id counted on a day (not `ConversationModel`'s).
pub(super) const LEDGER_IDS: TableDefinition<&str, ()> = TableDefinition::new("ledger_ids");

fn day_prefix(scope: LedgerScope, day: u32) -> String {
    format!("{}\0{day:010}\0", scope.name())
}

/// Past every key of the day `day_prefix` starts.
fn day_end(scope: LedgerScope, day: u32) -> String {
    format!("{}\0{day:010}\x01", scope.name())
}

impl EmbeddedStore {
    async fn link(&self, key: String) -> StoreResult<Option<String>> {
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let links = txn.open_table(LEDGER_LINKS).map_err(unavailable)?;
            Ok(links
                .get(key.as_str())
                .map_err(unavailable)?
                .map(|value| value.value().to_owned()))
        })
        .await
    }
}

/// Forgets what is kept of each conversation whose last day counted is past the
/// retention (`oldest`): its models, its links both ways, its owner. Those of the days
/// about to go are looked at; one counted before this table existed (no last day) is
/// looked for on the days kept.
fn forget_expired(
    txn: &redb::WriteTransaction,
    ids: &redb::Table<&str, ()>,
    (last, models): (&mut redb::Table<&str, u32>, &mut redb::Table<&str, ()>),
    oldest: u32,
) -> StoreResult<()> {
    let scope = LedgerScope::Conversation;
    let (start, end) = (day_prefix(scope, 0), day_prefix(scope, oldest));
    let mut expiring = std::collections::BTreeSet::new();
    for entry in ids
        .range(start.as_str()..end.as_str())
        .map_err(unavailable)?
    {
        let (key, _) = entry.map_err(unavailable)?;
        // After `conversation\0<day:010>\0`, of one length for every day: the id.
        if let Some(id) = key.value().get(start.len()..) {
            expiring.insert(id.to_owned());
        }
    }
    if expiring.is_empty() {
        return Ok(());
    }
    let today = oldest + LEDGER_RETENTION_DAYS;
    let mut links = txn.open_table(LEDGER_LINKS).map_err(unavailable)?;
    for id in expiring {
        let kept = match last.get(id.as_str()).map_err(unavailable)? {
            Some(day) => day.value() >= oldest,
            None => {
                let mut kept = false;
                for day in oldest..=today {
                    let key = format!("{}{id}", day_prefix(scope, day));
                    if ids.get(key.as_str()).map_err(unavailable)?.is_some() {
                        kept = true;
                        break;
                    }
                }
                kept
            }
        };
        if kept {
            continue;
        }
        let prefix = conversation_model(&id, "");
        let past = past(&prefix).unwrap_or_default();
        models
            .retain_in(prefix.as_str()..past.as_str(), |_, ()| false)
            .map_err(unavailable)?;
        let session = links
            .remove(format!("c\0{id}").as_str())
            .map_err(unavailable)?
            .map(|session| session.value().to_owned());
        if let Some(session) = session {
            let key = format!("s\0{session}");
            let linked = links
                .get(key.as_str())
                .map_err(unavailable)?
                .is_some_and(|conversation| conversation.value() == id);
            if linked {
                links.remove(key.as_str()).map_err(unavailable)?;
            }
        }
        links
            .remove(format!("o\0{id}").as_str())
            .map_err(unavailable)?;
        last.remove(id.as_str()).map_err(unavailable)?;
    }
    Ok(())
}

#[async_trait]
impl LedgerStore for EmbeddedStore {
    async fn add_ledger(&self, counts: &[LedgerCount]) -> StoreResult<()> {
        if counts.is_empty() {
            return Ok(());
        }
        let counts = counts.to_vec();
        let oldest = crate::orgs::day_of(crate::now_ms()).saturating_sub(LEDGER_RETENTION_DAYS);
        self.transact(move |txn| {
            let mut ledger = txn.open_table(LEDGER).map_err(unavailable)?;
            let mut models = txn.open_table(LEDGER_MODELS).map_err(unavailable)?;
            let mut ids = txn.open_table(LEDGER_IDS).map_err(unavailable)?;
            let mut last = txn.open_table(LEDGER_LAST).map_err(unavailable)?;
            // Each conversation's last day counted in the batch, written once below.
            let mut counted: std::collections::BTreeMap<&str, u32> = Default::default();
            for count in &counts {
                let name = format!(
                    "{}{}",
                    day_prefix(count.scope, count.day),
                    field(count.measure, &count.id)
                );
                let stored = ledger
                    .get(name.as_str())
                    .map_err(unavailable)?
                    .map_or(0.0, |value| f64::from_le_bytes(value.value()));
                ledger
                    .insert(name.as_str(), (stored + count.amount).to_le_bytes())
                    .map_err(unavailable)?;
                if count.scope == LedgerScope::ConversationModel {
                    models.insert(count.id.as_str(), ()).map_err(unavailable)?;
                } else if count.scope != LedgerScope::Everything {
                    let id = format!("{}{}", day_prefix(count.scope, count.day), count.id);
                    ids.insert(id.as_str(), ()).map_err(unavailable)?;
                }
                if count.scope == LedgerScope::Conversation {
                    let day = counted.entry(count.id.as_str()).or_default();
                    *day = (*day).max(count.day);
                }
            }
            for (conversation, day) in counted {
                let seen = last
                    .get(conversation)
                    .map_err(unavailable)?
                    .map(|seen| seen.value());
                if seen.is_none_or(|seen| seen < day) {
                    last.insert(conversation, day).map_err(unavailable)?;
                }
            }
            forget_expired(txn, &ids, (&mut last, &mut models), oldest)?;
            for scope in LedgerScope::ALL {
                let (start, end) = (day_prefix(scope, 0), day_prefix(scope, oldest));
                ledger
                    .retain_in(start.as_str()..end.as_str(), |_, _| false)
                    .map_err(unavailable)?;
                ids.retain_in(start.as_str()..end.as_str(), |_, ()| false)
                    .map_err(unavailable)?;
            }
            Ok(())
        })
        .await
    }

    async fn ledger_of(
        &self,
        scope: LedgerScope,
        ids: &[String],
        from: u32,
        to: u32,
    ) -> StoreResult<LedgerRows> {
        let ids = ids.to_vec();
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let ledger = txn.open_table(LEDGER).map_err(unavailable)?;
            let mut rows = LedgerRows::new();
            for day in from..=to {
                let prefix = day_prefix(scope, day);
                for id in &ids {
                    for measure in Measure::ALL {
                        let name = field(measure, id);
                        if let Some(value) = ledger
                            .get(format!("{prefix}{name}").as_str())
                            .map_err(unavailable)?
                        {
                            add_field(&mut rows, &name, f64::from_le_bytes(value.value()));
                        }
                    }
                }
            }
            Ok(rows)
        })
        .await
    }

    async fn conversation_models(&self, conversation: &str) -> StoreResult<Vec<String>> {
        let prefix = conversation_model(conversation, "");
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let models = txn.open_table(LEDGER_MODELS).map_err(unavailable)?;
            let mut found = Vec::new();
            for entry in models.range(prefix.as_str()..).map_err(unavailable)? {
                let (id, _) = entry.map_err(unavailable)?;
                match id.value().strip_prefix(prefix.as_str()) {
                    Some(model) => found.push(model.to_owned()),
                    None => break,
                }
            }
            Ok(found)
        })
        .await
    }

    async fn link_session(&self, session: &str, conversation: &str) -> StoreResult<()> {
        let (session, conversation) = (format!("s\0{session}"), conversation.to_owned());
        self.transact(move |txn| {
            let mut links = txn.open_table(LEDGER_LINKS).map_err(unavailable)?;
            if links.get(session.as_str()).map_err(unavailable)?.is_some() {
                return Ok(());
            }
            links
                .insert(session.as_str(), conversation.as_str())
                .map_err(unavailable)?;
            let back = format!("c\0{conversation}");
            if links.get(back.as_str()).map_err(unavailable)?.is_none() {
                let linked = session.get(2..).unwrap_or_default().to_owned();
                links
                    .insert(back.as_str(), linked.as_str())
                    .map_err(unavailable)?;
            }
            Ok(())
        })
        .await
    }

    async fn session_conversation(&self, session: &str) -> StoreResult<Option<String>> {
        self.link(format!("s\0{session}")).await
    }

    async fn conversation_session(&self, conversation: &str) -> StoreResult<Option<String>> {
        self.link(format!("c\0{conversation}")).await
    }

    async fn own_conversations(&self, owners: &[(String, ConversationOwner)]) -> StoreResult<()> {
        if owners.is_empty() {
            return Ok(());
        }
        let owners: Vec<(String, String)> = owners
            .iter()
            .map(|(conversation, owner)| {
                let json = serde_json::to_string(owner).unwrap_or_default();
                (format!("o\0{conversation}"), json)
            })
            .collect();
        self.transact(move |txn| {
            let mut links = txn.open_table(LEDGER_LINKS).map_err(unavailable)?;
            for (key, owner) in owners {
                if links.get(key.as_str()).map_err(unavailable)?.is_none() {
                    links
                        .insert(key.as_str(), owner.as_str())
                        .map_err(unavailable)?;
                }
            }
            Ok(())
        })
        .await
    }

    async fn conversation_owners(
        &self,
        conversations: &[String],
    ) -> StoreResult<HashMap<String, ConversationOwner>> {
        let conversations = conversations.to_vec();
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let links = txn.open_table(LEDGER_LINKS).map_err(unavailable)?;
            let mut owners = HashMap::new();
            for conversation in conversations {
                let key = format!("o\0{conversation}");
                if let Some(json) = links.get(key.as_str()).map_err(unavailable)?
                    && let Ok(owner) = serde_json::from_str(json.value())
                {
                    owners.insert(conversation, owner);
                }
            }
            Ok(owners)
        })
        .await
    }

    async fn ledger_ids(
        &self,
        scope: LedgerScope,
        from: u32,
        to: u32,
        within: &str,
        after: &str,
        limit: usize,
    ) -> StoreResult<(Vec<String>, u64)> {
        let (within, after) = (within.to_owned(), after.to_owned());
        self.read(move |db| {
            if from > to || limit == 0 {
                return Ok((Vec::new(), 0));
            }
            let txn = db.begin_read().map_err(unavailable)?;
            let index = txn.open_table(LEDGER_IDS).map_err(unavailable)?;
            let first = first_after(&within, &after);
            let past = past(&within);
            // A day's keys of the ids asked: from the first, to the end of `within` or
            // of the day.
            let range = |day| {
                let prefix = day_prefix(scope, day);
                let start = match first {
                    Bound::From(id) => format!("{prefix}{id}"),
                    // `after` itself, then a NUL (no id holds one).
                    Bound::After(id) => format!("{prefix}{id}\0"),
                };
                let end = match &past {
                    Some(past) => format!("{prefix}{past}"),
                    None => day_end(scope, day),
                };
                (prefix, start, end)
            };
            let mut pages = Vec::new();
            for day in from..=to {
                let (prefix, start, end) = range(day);
                let mut page = Vec::new();
                for entry in index
                    .range(start.as_str()..end.as_str())
                    .map_err(unavailable)?
                    .take(limit)
                {
                    let (key, _) = entry.map_err(unavailable)?;
                    if let Some(id) = key.value().get(prefix.len()..) {
                        page.push(id.to_owned());
                    }
                }
                pages.push(page);
            }
            // Distinct ids over the days (of those within): one day's are its keys;
            // several days' are gathered once each.
            let mut seen = std::collections::HashSet::new();
            let mut total = 0;
            for day in from..=to {
                let prefix = day_prefix(scope, day);
                let (start, end) = match &past {
                    Some(past) => (format!("{prefix}{within}"), format!("{prefix}{past}")),
                    None => (prefix.clone(), day_end(scope, day)),
                };
                let keys = index
                    .range(start.as_str()..end.as_str())
                    .map_err(unavailable)?;
                if from == to {
                    total = keys.count() as u64;
                    break;
                }
                for entry in keys {
                    let (key, _) = entry.map_err(unavailable)?;
                    if let Some(id) = key.value().get(prefix.len()..) {
                        seen.insert(id.to_owned());
                    }
                }
                total = seen.len() as u64;
            }
            Ok((merge_ids(pages, limit), total))
        })
        .await
    }
}
