//! The ledger: what each conversation, team, user, key and model cost, per day, as
//! counters added to where the facts happen (a call settled, a sandbox's state changed),
//! never by scanning records. Read by id (a conversation's page) or whole for a range of
//! days (a rollup by team, user, key, model or a tag's value).

use std::collections::{BTreeMap, HashMap};

pub mod coalescing;
pub mod tagging;

use async_trait::async_trait;

use crate::{DayCounts, StoreResult};

/// What a ledger row is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LedgerScope {
    /// A conversation, by its id (the session id its calls carry).
    Conversation,
    /// A conversation's calls to one model: [`conversation_model`] of the two.
    ConversationModel,
    Team,
    User,
    /// A virtual key, by its token (its sha256).
    Key,
    /// A model, by the name clients ask for.
    Model,
    /// Everything counted, under the one id [`EVERYTHING`]: the rollup by day.
    Everything,
    /// The conversations carrying a tag, by [`tag_id`] of its key and value: what a
    /// conversation counts, counted again for each tag it had when it was counted.
    Tag,
}

/// The one id of [`LedgerScope::Everything`].
pub const EVERYTHING: &str = "all";

impl LedgerScope {
    pub const ALL: [Self; 8] = [
        Self::Conversation,
        Self::ConversationModel,
        Self::Team,
        Self::User,
        Self::Key,
        Self::Model,
        Self::Everything,
        Self::Tag,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Conversation => "conversation",
            Self::ConversationModel => "conversation_model",
            Self::Team => "team",
            Self::User => "user",
            Self::Key => "key",
            Self::Model => "model",
            Self::Everything => "everything",
            Self::Tag => "tag",
        }
    }
}

/// What a counter counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// The calls' cost, at their entries' prices.
    Spend,
    Calls,
    /// Calls whose answer was not a success.
    FailedCalls,
    PromptTokens,
    CompletionTokens,
    /// Milliseconds a conversation's sandbox ran, and was paused.
    RunningMs,
    PausedMs,
    /// Events a conversation's agent-server posted that were stored (each once).
    Events,
    /// Conversation updates (webhook deliveries) accepted.
    Webhooks,
    /// Of the input, tokens read from the provider's cache, and written to it.
    CacheReadTokens,
    CacheWriteTokens,
    /// A conversation's sandbox time at the operator's prices per sandbox-hour.
    SandboxCost,
}

impl Measure {
    pub const ALL: [Self; 12] = [
        Self::Spend,
        Self::Calls,
        Self::FailedCalls,
        Self::PromptTokens,
        Self::CompletionTokens,
        Self::RunningMs,
        Self::PausedMs,
        Self::Events,
        Self::Webhooks,
        Self::CacheReadTokens,
        Self::CacheWriteTokens,
        Self::SandboxCost,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Spend => "spend",
            Self::Calls => "calls",
            Self::FailedCalls => "failed_calls",
            Self::PromptTokens => "prompt_tokens",
            Self::CompletionTokens => "completion_tokens",
            Self::RunningMs => "running_ms",
            Self::PausedMs => "paused_ms",
            Self::Events => "events",
            Self::Webhooks => "webhooks",
            Self::CacheReadTokens => "cache_read_tokens",
            Self::CacheWriteTokens => "cache_write_tokens",
            Self::SandboxCost => "sandbox_cost",
        }
    }

    /// A count of whole things (calls, tokens, milliseconds, events), not an amount of
    /// money.
    pub fn is_whole(self) -> bool {
        !matches!(self, Self::Spend | Self::SandboxCost)
    }

    pub fn of_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|measure| measure.name() == name)
    }
}

/// An amount to add to one counter of one day (days since the epoch, UTC).
#[derive(Clone, Debug, PartialEq)]
pub struct LedgerCount {
    pub day: u32,
    pub scope: LedgerScope,
    pub id: String,
    pub measure: Measure,
    pub amount: f64,
}

/// One id's counters, summed over the days read.
pub type LedgerRows = BTreeMap<String, BTreeMap<Measure, f64>>;

/// The id of a conversation's calls to `model`.
pub fn conversation_model(conversation: &str, model: &str) -> String {
    format!("{conversation}\u{1f}{model}")
}

/// The id of a tag's counters: its key, then its value.
pub fn tag_id(key: &str, value: &str) -> String {
    format!("{}{value}", tag_prefix(key))
}

/// What the ids of a tag key's counters start with (see [`LedgerStore::ledger_ids`]'s
/// `within`).
pub fn tag_prefix(key: &str) -> String {
    format!("{key}\u{1f}")
}

/// Who a conversation's calls are billed to: the first virtual key that counted a call
/// for it (the key that owns its session), its user, team and alias as they were then.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConversationOwner {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_alias: Option<String>,
}

/// How long a day's counters are kept after their day.
pub const LEDGER_RETENTION_DAYS: u32 = 400;

/// Counts summed per counter until they are written: what a batch of calls or deliveries
/// adds, at most one count per counter, and what a refused write puts back. Kept as a row
/// of measures per day, scope and id (a call adds several measures to each of its ids).
#[derive(Debug, Default)]
pub struct LedgerSums(DayCounts<LedgerScope, [f64; Measure::ALL.len()]>);

impl LedgerSums {
    pub fn add(&mut self, count: LedgerCount) {
        self.add_measures(
            count.day,
            count.scope,
            &count.id,
            &[(count.measure, count.amount)],
        );
    }

    /// Adds `measures` to `id`'s row of `day`, at once.
    pub fn add_measures(
        &mut self,
        day: u32,
        scope: LedgerScope,
        id: &str,
        measures: &[(Measure, f64)],
    ) {
        self.0.add(day, scope, id, |row| {
            for (measure, amount) in measures {
                row[*measure as usize] += amount;
            }
        });
    }

    /// Adds `counts` (a batch, or a write that failed, put back).
    pub fn merge(&mut self, counts: impl IntoIterator<Item = LedgerCount>) {
        for count in counts {
            self.add(count);
        }
    }

    /// The distinct ids counted (each a row of measures).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The counts as the store takes them (one per counter counted), emptying `self`.
    pub fn take(&mut self) -> Vec<LedgerCount> {
        let mut counts = Vec::with_capacity(self.len() * 4);
        for (day, scope, id, row) in self.0.take() {
            for (measure, amount) in Measure::ALL.into_iter().zip(row) {
                if amount != 0.0 {
                    counts.push(LedgerCount {
                        day,
                        scope,
                        id: id.clone(),
                        measure,
                        amount,
                    });
                }
            }
        }
        counts
    }
}

/// What this process wrote already and need not write again (a link, an owner, each
/// kept by the store first-wins): at most `max` remembered, past it the memory starts
/// again (a write made twice changes nothing).
#[derive(Debug)]
pub struct WrittenOnce {
    max: usize,
    written: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl WrittenOnce {
    pub fn new(max: usize) -> Self {
        Self {
            max,
            written: std::sync::Mutex::default(),
        }
    }

    pub fn contains(&self, id: &str) -> bool {
        self.written
            .lock()
            .is_ok_and(|written| written.contains(id))
    }

    /// Remembers `ids` as written.
    pub fn extend(&self, ids: impl IntoIterator<Item = String>) {
        if let Ok(mut written) = self.written.lock() {
            for id in ids {
                if written.len() >= self.max {
                    written.clear();
                }
                written.insert(id);
            }
        }
    }
}

/// A page of a rollup: the rows of the ids after the page's start, in order, and how many
/// ids the days hold in all.
#[derive(Debug, Default, PartialEq)]
pub struct LedgerPage {
    pub rows: LedgerRows,
    /// The last id of the page, when more follow.
    pub next: Option<String>,
    pub total: u64,
}

#[async_trait]
pub trait LedgerStore: Send + Sync + 'static {
    /// Adds `counts`, at once.
    async fn add_ledger(&self, counts: &[LedgerCount]) -> StoreResult<()>;

    /// The rows of `ids`, summed over the days `from..=to`.
    async fn ledger_of(
        &self,
        scope: LedgerScope,
        ids: &[String],
        from: u32,
        to: u32,
    ) -> StoreResult<LedgerRows>;

    /// `id`'s row of each day of `from..=to` that counted something, in order: what the
    /// rollup by day reads. By default a read a day; a backend may read them at once.
    async fn ledger_days(
        &self,
        scope: LedgerScope,
        id: &str,
        from: u32,
        to: u32,
    ) -> StoreResult<Vec<(u32, BTreeMap<Measure, f64>)>> {
        let mut days = Vec::new();
        let ids = [id.to_owned()];
        for day in from..=to {
            if let Some(row) = self.ledger_of(scope, &ids, day, day).await?.remove(id) {
                days.push((day, row));
            }
        }
        Ok(days)
    }

    /// The ids counted in `scope` on the days `from..=to` that sort after `after`, at
    /// most `limit` of them, in order, and how many distinct ids those days hold; with a
    /// `within` (one ending in `\u{1f}`, as [`tag_prefix`]), only the ids starting with it.
    /// Read from an index of the ids (not the counters), so a page costs its own rows
    /// whatever the days hold. `ConversationModel` has no index (it is read by
    /// conversation), nor has `Everything` (its one id is read by day).
    async fn ledger_ids(
        &self,
        scope: LedgerScope,
        from: u32,
        to: u32,
        within: &str,
        after: &str,
        limit: usize,
    ) -> StoreResult<(Vec<String>, u64)>;

    /// Tells the ledger `conversation`'s tags as they now are (its update was recorded):
    /// its counts go under them from now on (see [`tagging`]). Nothing by default.
    fn note_tags(&self, _conversation: &str, _tags: &BTreeMap<String, String>) {}

    /// Records who each conversation's calls are billed to, unless it is recorded already
    /// (the first stays). Kept as long as the ledger's days.
    async fn own_conversations(&self, owners: &[(String, ConversationOwner)]) -> StoreResult<()>;

    /// The owners recorded of `conversations` (those with none are absent).
    async fn conversation_owners(
        &self,
        conversations: &[String],
    ) -> StoreResult<HashMap<String, ConversationOwner>>;

    /// The models a conversation's calls were counted for.
    async fn conversation_models(&self, conversation: &str) -> StoreResult<Vec<String>>;

    /// Links a sandbox's session to the conversation it serves, both ways, unless the
    /// session is linked already (its first conversation keeps it). Kept as long as the
    /// ledger's days.
    async fn link_session(&self, session: &str, conversation: &str) -> StoreResult<()>;

    /// The conversation a sandbox's session serves, once linked.
    async fn session_conversation(&self, session: &str) -> StoreResult<Option<String>>;

    /// The session of the sandbox that serves `conversation`, once linked.
    async fn conversation_session(&self, conversation: &str) -> StoreResult<Option<String>>;

    /// A page of the rollup of `scope` over `from..=to`: the rows of at most `limit` ids
    /// after `after` (of those starting with `within`).
    async fn ledger_page(
        &self,
        scope: LedgerScope,
        from: u32,
        to: u32,
        within: &str,
        after: &str,
        limit: usize,
    ) -> StoreResult<LedgerPage> {
        if from > to || limit == 0 {
            return Ok(LedgerPage::default());
        }
        let (mut ids, total) = self
            .ledger_ids(scope, from, to, within, after, limit + 1)
            .await?;
        let next = (ids.len() > limit).then(|| {
            ids.truncate(limit);
            ids[limit - 1].clone()
        });
        let rows = self.ledger_of(scope, &ids, from, to).await?;
        Ok(LedgerPage { rows, next, total })
    }
}

/// No ledger (`--ledger off`): every count is dropped, every read is empty.
pub struct Unkept;

#[async_trait]
impl LedgerStore for Unkept {
    async fn add_ledger(&self, _: &[LedgerCount]) -> StoreResult<()> {
        Ok(())
    }

    async fn ledger_of(
        &self,
        _: LedgerScope,
        _: &[String],
        _: u32,
        _: u32,
    ) -> StoreResult<LedgerRows> {
        Ok(LedgerRows::new())
    }

    async fn ledger_ids(
        &self,
        _: LedgerScope,
        _: u32,
        _: u32,
        _: &str,
        _: &str,
        _: usize,
    ) -> StoreResult<(Vec<String>, u64)> {
        Ok((Vec::new(), 0))
    }

    async fn own_conversations(&self, _: &[(String, ConversationOwner)]) -> StoreResult<()> {
        Ok(())
    }

    async fn conversation_owners(
        &self,
        _: &[String],
    ) -> StoreResult<HashMap<String, ConversationOwner>> {
        Ok(HashMap::new())
    }

    async fn conversation_models(&self, _: &str) -> StoreResult<Vec<String>> {
        Ok(Vec::new())
    }

    async fn link_session(&self, _: &str, _: &str) -> StoreResult<()> {
        Ok(())
    }

    async fn session_conversation(&self, _: &str) -> StoreResult<Option<String>> {
        Ok(None)
    }

    async fn conversation_session(&self, _: &str) -> StoreResult<Option<String>> {
        Ok(None)
    }
}

/// The first id after `after` that starts with `within` (both may be empty): where a
/// range read of an index starts, inclusive.
pub(crate) fn first_after<'a>(within: &'a str, after: &'a str) -> Bound<'a> {
    if after.is_empty() || after < within {
        Bound::From(within)
    } else {
        Bound::After(after)
    }
}

/// Where a range of ids starts.
#[derive(Debug, PartialEq)]
pub(crate) enum Bound<'a> {
    From(&'a str),
    After(&'a str),
}

/// The first id past those starting with `within`: `within` with its last character the
/// next one; `None` when `within` is empty (no end).
pub(crate) fn past(within: &str) -> Option<String> {
    let mut chars = within.chars();
    let last = chars.next_back()?;
    let next = char::from_u32(u32::from(last) + 1).unwrap_or(char::MAX);
    Some(format!("{}{next}", chars.as_str()))
}

/// The first `limit` of the ids each day gave, merged in order without repeats.
pub(crate) fn merge_ids(days: impl IntoIterator<Item = Vec<String>>, limit: usize) -> Vec<String> {
    let merged: std::collections::BTreeSet<String> = days.into_iter().flatten().collect();
    merged.into_iter().take(limit).collect()
}

/// A conversation's id as the ledger keeps it: a UUID, however written (the agent-server
/// names its conversation with dashes in the calls' session header, its webhooks carry
/// it as JSON), as its 32 lowercase hex digits; any other id as it is.
pub fn conversation_id(id: &str) -> std::borrow::Cow<'_, str> {
    match uuid::Uuid::try_parse(id) {
        Ok(uuid) if id.len() != 32 || id.bytes().any(|byte| byte.is_ascii_uppercase()) => {
            std::borrow::Cow::Owned(uuid.simple().to_string())
        }
        _ => std::borrow::Cow::Borrowed(id),
    }
}

pub fn split_conversation_model(id: &str) -> Option<(&str, &str)> {
    id.split_once('\u{1f}')
}

/// Adds a stored counter's `field` (`<measure>|<id>`) and `amount` to `rows`; a field of
/// no known measure is skipped.
pub(crate) fn add_field(rows: &mut LedgerRows, field: &str, amount: f64) {
    let Some((measure, id)) = field.split_once('|') else {
        return;
    };
    let Some(measure) = Measure::of_name(measure) else {
        return;
    };
    *rows
        .entry(id.to_owned())
        .or_default()
        .entry(measure)
        .or_default() += amount;
}

/// A counter's field within its scope and day.
pub(crate) fn field(measure: Measure, id: &str) -> String {
    format!("{}|{id}", measure.name())
}

#[cfg(test)]
mod tests {
    use super::conversation_id;

    #[test]
    fn sums_hold_one_count_per_counter_until_taken() {
        use super::{LedgerCount, LedgerScope, LedgerSums, Measure};
        let count = |id: &str, amount| LedgerCount {
            day: 1,
            scope: LedgerScope::Team,
            id: id.to_owned(),
            measure: Measure::Spend,
            amount,
        };
        let mut sums = LedgerSums::default();
        sums.merge([count("a", 1.5), count("b", 1.0), count("a", 2.0)]);
        assert_eq!(sums.len(), 2);
        // Every measure in its own place of the row.
        for measure in Measure::ALL {
            assert_eq!(Measure::ALL[measure as usize], measure);
        }
        let mut taken = sums.take();
        taken.sort_by(|left, right| left.id.cmp(&right.id));
        assert_eq!(taken, [count("a", 3.5), count("b", 1.0)]);
        assert!(sums.is_empty());
    }

    #[test]
    fn a_tag_s_ids_lie_between_its_prefix_and_the_next() {
        use super::{Bound, first_after, past, tag_id, tag_prefix};
        let within = tag_prefix("project");
        let end = past(&within).expect("an end");
        for inside in [tag_id("project", ""), tag_id("project", "zzz\u{10ffff}")] {
            assert!(
                inside.as_str() >= within.as_str() && inside < end,
                "{inside:?}"
            );
        }
        for outside in [
            tag_id("projects", "a"),
            tag_id("proj", "a"),
            "project".to_owned(),
        ] {
            assert!(
                !(outside.as_str() >= within.as_str() && outside < end),
                "{outside:?}"
            );
        }
        assert_eq!(past(""), None);
        assert_eq!(first_after(&within, ""), Bound::From(&within));
        assert_eq!(first_after(&within, "a"), Bound::From(&within));
        let later = tag_id("project", "b");
        assert_eq!(first_after(&within, &later), Bound::After(&later));
    }

    #[test]
    fn what_was_written_is_remembered_up_to_its_bound() {
        let written = super::WrittenOnce::new(2);
        written.extend(["a".to_owned(), "b".to_owned()]);
        assert!(written.contains("a") && written.contains("b"));
        // Past the bound the memory starts again, with the newest.
        written.extend(["c".to_owned()]);
        assert!(written.contains("c") && !written.contains("a"));
    }

    #[test]
    fn days_are_dates() {
        use crate::orgs::date_of;
        assert_eq!(date_of(0), "1970-01-01");
        assert_eq!(date_of(20_786), "2026-11-29");
        assert_eq!(date_of(11_016), "2000-02-29");
    }

    #[test]
    fn a_uuid_is_kept_as_its_hex_digits_however_written() {
        let hex = "a3485230860f42cca690a0288e0d1624";
        for written in [
            "a3485230-860f-42cc-a690-a0288e0d1624",
            "A3485230-860F-42CC-A690-A0288E0D1624",
            "A3485230860F42CCA690A0288E0D1624",
            hex,
        ] {
            assert_eq!(conversation_id(written), hex, "{written}");
        }
        for other in ["3s2MiE5Xhwi4leHf83U3pj", "conv-a", ""] {
            assert_eq!(conversation_id(other), other);
        }
    }
}
