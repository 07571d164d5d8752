//! The ledger: what each conversation, team, user, key and model cost, per day, as
//! counters added to where the facts happen (a call settled, a sandbox's state changed),
//! never by scanning records. Read by id (a conversation's page) or whole for a range of
//! days (a rollup by team, user, key or model).

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::StoreResult;

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
}

impl LedgerScope {
    pub const ALL: [Self; 6] = [
        Self::Conversation,
        Self::ConversationModel,
        Self::Team,
        Self::User,
        Self::Key,
        Self::Model,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Conversation => "conversation",
            Self::ConversationModel => "conversation_model",
            Self::Team => "team",
            Self::User => "user",
            Self::Key => "key",
            Self::Model => "model",
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
}

impl Measure {
    pub const ALL: [Self; 9] = [
        Self::Spend,
        Self::Calls,
        Self::FailedCalls,
        Self::PromptTokens,
        Self::CompletionTokens,
        Self::RunningMs,
        Self::PausedMs,
        Self::Events,
        Self::Webhooks,
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
        }
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

/// How long a day's counters are kept after their day.
pub const LEDGER_RETENTION_DAYS: u32 = 400;

#[async_trait]
pub trait LedgerStore: Send + Sync + 'static {
    /// Adds `counts`, all or none.
    async fn add_ledger(&self, counts: &[LedgerCount]) -> StoreResult<()>;

    /// The counters of `ids` of `scope` over the days `from..=to`, summed; an id without
    /// any is left out.
    async fn ledger_of(
        &self,
        scope: LedgerScope,
        ids: &[String],
        from: u32,
        to: u32,
    ) -> StoreResult<LedgerRows>;

    /// Every id of `scope` counted in the days `from..=to`, its counters summed.
    async fn ledger_rollup(
        &self,
        scope: LedgerScope,
        from: u32,
        to: u32,
    ) -> StoreResult<LedgerRows>;

    /// The models `conversation`'s calls were counted for (its
    /// [`LedgerScope::ConversationModel`] rows' models), so that a conversation's page
    /// reads its own rows, not every conversation's.
    async fn conversation_models(&self, conversation: &str) -> StoreResult<Vec<String>>;
}

/// The conversation and model of a [`LedgerScope::ConversationModel`] id.
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
