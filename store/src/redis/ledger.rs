//! The ledger in Redis: a hash per scope and day, `sandgate:{gateway-orgs}:ledger:<scope>:<day>`,
//! field `<measure>|<id>` → the amount (HINCRBYFLOAT), and beside it the day's ids, a sorted
//! set read by range for a page (`ledger-ids:<scope>:<day>`, every score 0, so ordered by
//! id), and each id's last day (`ledger-last:<scope>`), which counts a range's ids; all
//! expire past the retention. On the gateway's slot, beside the spend counters,
//! so that one atomic write adds a batch.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;

use super::{RedisStore, unavailable};
use crate::ledger::split_conversation_model;
use crate::ledger::{
    Bound, ConversationOwner, LEDGER_RETENTION_DAYS, LedgerCount, LedgerRows, LedgerScope,
    LedgerStore, Measure, add_field, field, first_after, merge_ids, past,
};
use crate::{StoreError, StoreResult};
use std::collections::HashMap;

/// The set of a conversation's models.
fn models_key(conversation: &str) -> String {
    format!("sandgate:{{gateway-orgs}}:ledger-models:{conversation}")
}

fn day_key(scope: LedgerScope, day: u32) -> String {
    format!("sandgate:{{gateway-orgs}}:ledger:{}:{day}", scope.name())
}

/// A link of a sandbox's session to its conversation (`s`), or back (`c`).
fn link_key(side: &str, id: &str) -> String {
    format!("sandgate:{{gateway-orgs}}:ledger-link:{side}:{id}")
}

/// Who a conversation's calls are billed to (JSON).
fn owner_key(conversation: &str) -> String {
    format!("sandgate:{{gateway-orgs}}:ledger-owner:{conversation}")
}

/// How long a link, an index or a counter is kept: the retention, and the day in course.
fn keep_ms() -> u64 {
    u64::from(LEDGER_RETENTION_DAYS + 1) * 86_400_000
}

/// Every id counted in `scope`, scored by the last day it was counted: how many ids a
/// range of days up to today holds is one count of it.
fn last_key(scope: LedgerScope) -> String {
    format!("sandgate:{{gateway-orgs}}:ledger-last:{}", scope.name())
}

/// The ids counted in `scope` on `day`.
fn ids_key(scope: LedgerScope, day: u32) -> String {
    format!(
        "sandgate:{{gateway-orgs}}:ledger-ids:{}:{day}",
        scope.name()
    )
}

/// Ids counted today past which this process's memory of them starts again.
const MAX_REMEMBERED: usize = 200_000;

/// What this process's ledger writes have indexed today (an id in its scope's day and
/// last-day indexes, a model in its conversation's set) and which keys it set to expire:
/// once written, a batch need not write them again today. Only what a write the store
/// took is remembered; a new day, or a full memory, starts again.
#[derive(Default)]
pub(super) struct Written {
    day: u32,
    ids: std::collections::HashMap<LedgerScope, std::collections::HashSet<String>>,
    keys: std::collections::HashSet<String>,
}

impl Written {
    fn today(&mut self, today: u32) -> &mut Self {
        let remembered = self.keys.len()
            + self
                .ids
                .values()
                .map(std::collections::HashSet::len)
                .sum::<usize>();
        if self.day != today || remembered > MAX_REMEMBERED {
            *self = Self {
                day: today,
                ..Self::default()
            };
        }
        self
    }

    fn indexed(&self, count: &LedgerCount) -> bool {
        count.day == self.day
            && self
                .ids
                .get(&count.scope)
                .is_some_and(|ids| ids.contains(count.id.as_str()))
    }
}

impl RedisStore {
    /// `fields` of `scope`'s hash of each day of `from..=to`, in one round trip.
    async fn day_fields(
        &self,
        scope: LedgerScope,
        fields: &[String],
        from: u32,
        to: u32,
    ) -> StoreResult<Vec<Vec<Option<f64>>>> {
        let mut pipe = redis::pipe();
        for day in from..=to {
            pipe.cmd("HMGET").arg(day_key(scope, day)).arg(fields);
        }
        pipe.query_async(&mut self.connection())
            .await
            .map_err(unavailable)
    }
}

#[async_trait]
impl LedgerStore for RedisStore {
    async fn add_ledger(&self, counts: &[LedgerCount]) -> StoreResult<()> {
        if counts.is_empty() {
            return Ok(());
        }
        let today = crate::orgs::day_of(crate::now_ms());
        // A row is an id's counts of a day (its measures, one after the other as
        // `LedgerSums::take` gives them): its key, its index entries and what today's
        // writes indexed are looked at once per row, not once per measure.
        let rows: Vec<&[LedgerCount]> = counts
            .chunk_by(|a, b| (a.day, a.scope, &a.id) == (b.day, b.scope, &b.id))
            .collect();
        // What today's earlier writes indexed already: not indexed again.
        let indexed: Vec<bool> = match self.ledger_written.lock() {
            Ok(mut written) => {
                let written = written.today(today);
                rows.iter().map(|row| written.indexed(&row[0])).collect()
            }
            Err(_) => vec![false; rows.len()],
        };
        // One command per counter, then one per key touched: each set's new members at
        // once, each key's expiry once (a batch of calls touches few keys many times).
        let mut pipe = redis::pipe();
        pipe.atomic();
        // The hashes written, by scope and day, each key formatted once for all its rows.
        let mut touched: BTreeMap<(LedgerScope, u32), String> = BTreeMap::new();
        let mut models: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
        let mut ids: BTreeMap<(LedgerScope, u32), BTreeSet<&str>> = BTreeMap::new();
        let mut last: BTreeMap<LedgerScope, BTreeMap<&str, u32>> = BTreeMap::new();
        for (row, indexed) in rows.iter().zip(indexed) {
            let count = &row[0];
            let key = touched
                .entry((count.scope, count.day))
                .or_insert_with(|| day_key(count.scope, count.day));
            for count in *row {
                // A count (of calls, tokens, milliseconds) as a whole number: Redis adds
                // those cheaper than floats, and reads them alike (a float add of whole
                // amounts, as earlier versions made, left a whole number too).
                let add = if count.measure.is_whole() {
                    pipe.cmd("HINCRBY")
                        .arg(&*key)
                        .arg(field(count.measure, &count.id))
                        .arg(count.amount.round() as i64)
                } else {
                    pipe.cmd("HINCRBYFLOAT")
                        .arg(&*key)
                        .arg(field(count.measure, &count.id))
                        .arg(count.amount)
                };
                add.ignore();
            }
            if indexed {
                continue;
            }
            if count.scope == LedgerScope::ConversationModel {
                if let Some((conversation, model)) = split_conversation_model(&count.id) {
                    models
                        .entry(models_key(conversation))
                        .or_default()
                        .insert(model);
                }
            } else if count.scope != LedgerScope::Everything {
                ids.entry((count.scope, count.day))
                    .or_default()
                    .insert(count.id.as_str());
                let seen = last
                    .entry(count.scope)
                    .or_default()
                    .entry(&count.id)
                    .or_default();
                *seen = (*seen).max(count.day);
            }
        }
        for (key, members) in &models {
            pipe.cmd("SADD")
                .arg(key)
                .arg(members.iter().collect::<Vec<_>>())
                .ignore();
        }
        let ids: BTreeMap<String, BTreeSet<&str>> = ids
            .into_iter()
            .map(|((scope, day), members)| (ids_key(scope, day), members))
            .collect();
        for (key, members) in &ids {
            let mut zadd = redis::cmd("ZADD");
            zadd.arg(key);
            for member in members {
                zadd.arg(0).arg(*member);
            }
            pipe.add_command(zadd).ignore();
        }
        // Ids last counted before the retention leave the last-seen index.
        let oldest = crate::orgs::day_of(crate::now_ms()).saturating_sub(LEDGER_RETENTION_DAYS);
        for (scope, days) in &last {
            let mut zadd = redis::cmd("ZADD");
            zadd.arg(last_key(*scope)).arg("GT");
            for (member, day) in days {
                zadd.arg(*day).arg(*member);
            }
            pipe.add_command(zadd).ignore();
            pipe.cmd("ZREMRANGEBYSCORE")
                .arg(last_key(*scope))
                .arg("-inf")
                .arg(format!("({oldest}"))
                .ignore();
        }
        let keep_ms = keep_ms();
        // Each key's expiry, once a day.
        let expiring: BTreeSet<String> = {
            let written = self.ledger_written.lock().ok();
            let set = |key: &String| written.as_ref().is_some_and(|w| w.keys.contains(key));
            touched
                .values()
                .chain(models.keys())
                .chain(ids.keys())
                .cloned()
                .chain(last.keys().map(|scope| last_key(*scope)))
                .filter(|key| !set(key))
                .collect()
        };
        for key in &expiring {
            pipe.cmd("PEXPIRE").arg(key).arg(keep_ms).ignore();
        }
        let mut connection = self.write_connection();
        pipe.query_async::<()>(&mut connection)
            .await
            .map_err(unavailable)?;
        self.replicated(&mut connection).await?;
        if let Ok(mut written) = self.ledger_written.lock() {
            let written = written.today(today);
            for row in rows.iter().filter(|row| row[0].day == today) {
                written
                    .ids
                    .entry(row[0].scope)
                    .or_default()
                    .insert(row[0].id.clone());
            }
            written.keys.extend(expiring);
        }
        Ok(())
    }

    async fn ledger_of(
        &self,
        scope: LedgerScope,
        ids: &[String],
        from: u32,
        to: u32,
    ) -> StoreResult<LedgerRows> {
        let mut rows = LedgerRows::new();
        if ids.is_empty() || from > to {
            return Ok(rows);
        }
        let fields: Vec<String> = ids
            .iter()
            .flat_map(|id| Measure::ALL.map(|measure| field(measure, id)))
            .collect();
        let days = self.day_fields(scope, &fields, from, to).await?;
        for values in days {
            for (name, value) in fields.iter().zip(values) {
                if let Some(value) = value {
                    add_field(&mut rows, name, value);
                }
            }
        }
        Ok(rows)
    }

    async fn ledger_days(
        &self,
        scope: LedgerScope,
        id: &str,
        from: u32,
        to: u32,
    ) -> StoreResult<Vec<(u32, BTreeMap<Measure, f64>)>> {
        if from > to {
            return Ok(Vec::new());
        }
        // Every day's row in one round trip.
        let fields: Vec<String> = Measure::ALL.map(|measure| field(measure, id)).to_vec();
        let days = self.day_fields(scope, &fields, from, to).await?;
        Ok((from..=to)
            .zip(days)
            .filter_map(|(day, values)| {
                let row: BTreeMap<Measure, f64> = Measure::ALL
                    .into_iter()
                    .zip(values)
                    .filter_map(|(measure, value)| Some((measure, value?)))
                    .collect();
                (!row.is_empty()).then_some((day, row))
            })
            .collect())
    }

    async fn conversation_models(&self, conversation: &str) -> StoreResult<Vec<String>> {
        let mut models: Vec<String> = redis::cmd("SMEMBERS")
            .arg(models_key(conversation))
            .query_async(&mut self.connection())
            .await
            .map_err(unavailable)?;
        models.sort();
        Ok(models)
    }

    async fn link_session(&self, session: &str, conversation: &str) -> StoreResult<()> {
        let linked: Option<String> = redis::cmd("SET")
            .arg(link_key("s", session))
            .arg(conversation)
            .arg("NX")
            .arg("PX")
            .arg(keep_ms())
            .query_async(&mut self.write_connection())
            .await
            .map_err(unavailable)?;
        if linked.is_some() {
            let mut connection = self.write_connection();
            redis::cmd("SET")
                .arg(link_key("c", conversation))
                .arg(session)
                .arg("NX")
                .arg("PX")
                .arg(keep_ms())
                .query_async::<()>(&mut connection)
                .await
                .map_err(unavailable)?;
            self.replicated(&mut connection).await?;
        }
        Ok(())
    }

    async fn session_conversation(&self, session: &str) -> StoreResult<Option<String>> {
        redis::cmd("GET")
            .arg(link_key("s", session))
            .query_async(&mut self.connection())
            .await
            .map_err(unavailable)
    }

    async fn conversation_session(&self, conversation: &str) -> StoreResult<Option<String>> {
        redis::cmd("GET")
            .arg(link_key("c", conversation))
            .query_async(&mut self.connection())
            .await
            .map_err(unavailable)
    }

    async fn own_conversations(&self, owners: &[(String, ConversationOwner)]) -> StoreResult<()> {
        if owners.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (conversation, owner) in owners {
            let json = serde_json::to_string(owner).unwrap_or_default();
            pipe.cmd("SET")
                .arg(owner_key(conversation))
                .arg(json)
                .arg("NX")
                .arg("PX")
                .arg(keep_ms())
                .ignore();
        }
        let mut connection = self.write_connection();
        pipe.query_async::<()>(&mut connection)
            .await
            .map_err(unavailable)?;
        self.replicated(&mut connection).await
    }

    async fn conversation_owners(
        &self,
        conversations: &[String],
    ) -> StoreResult<HashMap<String, ConversationOwner>> {
        if conversations.is_empty() {
            return Ok(HashMap::new());
        }
        let keys: Vec<String> = conversations.iter().map(|id| owner_key(id)).collect();
        let found: Vec<Option<String>> = redis::cmd("MGET")
            .arg(keys)
            .query_async(&mut self.connection())
            .await
            .map_err(unavailable)?;
        Ok(conversations
            .iter()
            .zip(found)
            .filter_map(|(id, json)| Some((id.clone(), serde_json::from_str(&json?).ok()?)))
            .collect())
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
        if from > to || limit == 0 {
            return Ok((Vec::new(), 0));
        }
        let start = match first_after(within, after) {
            Bound::From("") => "-".to_owned(),
            Bound::From(id) => format!("[{id}"),
            Bound::After(id) => format!("({id}"),
        };
        let past = past(within);
        let end = past
            .as_ref()
            .map_or("+".to_owned(), |past| format!("({past}"));
        let everything = (
            past.as_ref()
                .map_or("-".to_owned(), |_| format!("[{within}")),
            end.clone(),
        );
        let mut pipe = redis::pipe();
        for day in from..=to {
            let key = ids_key(scope, day);
            pipe.cmd("ZRANGE")
                .arg(&key)
                .arg(&start)
                .arg(&end)
                .arg("BYLEX")
                .arg("LIMIT")
                .arg(0)
                .arg(limit)
                .cmd("ZLEXCOUNT")
                .arg(&key)
                .arg(&everything.0)
                .arg(&everything.1);
        }
        let answers: Vec<redis::Value> = pipe
            .query_async(&mut self.connection())
            .await
            .map_err(unavailable)?;
        let mut pages = Vec::new();
        let mut counted: Vec<(u32, u64)> = Vec::new();
        for (day, pair) in (from..=to).zip(answers.chunks(2)) {
            let [ids, count] = pair else {
                break;
            };
            let corrupt = |err: redis::ParsingError| StoreError::Corrupt(err.to_string());
            pages.push(redis::from_redis_value::<Vec<String>>(ids.clone()).map_err(corrupt)?);
            let count: u64 = redis::from_redis_value(count.clone()).map_err(corrupt)?;
            if count > 0 {
                counted.push((day, count));
            }
        }
        let today = crate::orgs::day_of(crate::now_ms());
        let total = match counted.as_slice() {
            [] => 0,
            [(_, count)] => *count,
            // Up to today, the ids of the range are those last counted in it.
            _ if to >= today && within.is_empty() => redis::cmd("ZCOUNT")
                .arg(last_key(scope))
                .arg(from)
                .arg("+inf")
                .query_async(&mut self.connection())
                .await
                .map_err(unavailable)?,
            // Ids counted on several days are counted once: the union's size (of those
            // within), computed in Redis into a key of the same slot that goes at once.
            days => {
                let scratch = format!(
                    "sandgate:{{gateway-orgs}}:ledger-ids-union:{}",
                    rand::random::<u64>()
                );
                let mut union = redis::pipe();
                union
                    .cmd("ZUNIONSTORE")
                    .arg(&scratch)
                    .arg(days.len())
                    .ignore();
                for (day, _) in days {
                    union.arg(ids_key(scope, *day));
                }
                union
                    .cmd("ZLEXCOUNT")
                    .arg(&scratch)
                    .arg(&everything.0)
                    .arg(&everything.1);
                union.cmd("DEL").arg(&scratch).ignore();
                let (total,): (u64,) = union
                    .query_async(&mut self.write_connection())
                    .await
                    .map_err(unavailable)?;
                total
            }
        };
        Ok((merge_ids(pages, limit), total))
    }
}
