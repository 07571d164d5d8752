//! The typed summary the service indexes a conversation by, read from a record that
//! already validated (so the lookups below cannot meet an unexpected shape).

use std::collections::BTreeMap;

use serde_json::Value;

use super::datetime::{epoch_micros, parse_datetime};
use super::scalars::Scalar;

/// ConversationExecutionStatus (spec section 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExecutionStatus {
    Idle,
    Running,
    Paused,
    WaitingForConfirmation,
    Finished,
    Error,
    Stuck,
    Deleting,
}

impl ExecutionStatus {
    pub const ALL: [ExecutionStatus; 8] = [
        Self::Idle,
        Self::Running,
        Self::Paused,
        Self::WaitingForConfirmation,
        Self::Finished,
        Self::Error,
        Self::Stuck,
        Self::Deleting,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Running => "running",
            Self::Paused => "paused",
            Self::WaitingForConfirmation => "waiting_for_confirmation",
            Self::Finished => "finished",
            Self::Error => "error",
            Self::Stuck => "stuck",
            Self::Deleting => "deleting",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == s)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationSummary {
    pub id: uuid::Uuid,
    pub execution_status: ExecutionStatus,
    /// Microseconds since the Unix epoch, UTC; naive datetimes are taken as UTC.
    pub updated_at: Option<i64>,
    pub created_at: Option<i64>,
    pub parent_conversation_id: Option<uuid::Uuid>,
    pub tags: BTreeMap<String, String>,
    /// ACPAgent: `current_model_id`, else `agent.acp_model`; Agent: `agent.llm.model`.
    pub model: Option<String>,
    /// `"Agent"` or `"ACPAgent"`.
    pub agent_kind: String,
    pub title: Option<String>,
}

/// What the summary reads of a record, over either JSON tree (the owned `Value` and the
/// fast path's borrowed one), so both paths summarize with the same code.
pub(crate) trait RecordNode: Sized {
    /// The value at `key` when this is an object.
    fn field(&self, key: &str) -> Option<&Self>;
    /// The item at `index` when this is an array.
    fn item(&self, index: usize) -> Option<&Self>;
    /// The keys when this is an object.
    fn keys(&self) -> Option<Vec<&str>>;
    fn text(&self) -> Option<&str>;
    /// When this is an object: its string-valued entries.
    fn string_entries(&self) -> Option<BTreeMap<String, String>>;
    fn scalar(&self) -> Scalar<'_>;
}

impl RecordNode for Value {
    fn field(&self, key: &str) -> Option<&Self> {
        self.as_object()?.get(key)
    }

    fn item(&self, index: usize) -> Option<&Self> {
        self.as_array()?.get(index)
    }

    fn keys(&self) -> Option<Vec<&str>> {
        Some(self.as_object()?.keys().map(String::as_str).collect())
    }

    fn text(&self) -> Option<&str> {
        self.as_str()
    }

    fn string_entries(&self) -> Option<BTreeMap<String, String>> {
        Some(
            self.as_object()?
                .iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect(),
        )
    }

    fn scalar(&self) -> Scalar<'_> {
        self.into()
    }
}

fn text<R: RecordNode>(node: &R, key: &str) -> Option<String> {
    node.field(key).and_then(R::text).map(str::to_owned)
}

fn timestamp<R: RecordNode>(node: &R, key: &str) -> Option<i64> {
    node.field(key)
        .and_then(|v| parse_datetime(v.scalar()).ok())
        .map(|dt| epoch_micros(&dt))
}

fn uuid_of<R: RecordNode>(node: &R, key: &str) -> Option<uuid::Uuid> {
    node.field(key)
        .and_then(R::text)
        .and_then(|s| uuid::Uuid::parse_str(s).ok())
}

/// `None` only if `record` did not validate, which callers rule out.
pub(crate) fn summarize<R: RecordNode>(record: &R) -> Option<ConversationSummary> {
    let agent = record.field("agent")?;
    let agent_kind = text(agent, "kind")?;
    let model = if agent_kind == "ACPAgent" {
        text(record, "current_model_id").or_else(|| text(agent, "acp_model"))
    } else {
        agent.field("llm").and_then(|llm| text(llm, "model"))
    };
    Some(ConversationSummary {
        id: uuid_of(record, "id")?,
        execution_status: match record.field("execution_status") {
            None => ExecutionStatus::Idle,
            Some(v) => ExecutionStatus::parse(v.text()?)?,
        },
        updated_at: timestamp(record, "updated_at"),
        created_at: timestamp(record, "created_at"),
        parent_conversation_id: uuid_of(record, "parent_conversation_id"),
        tags: record
            .field("tags")
            .and_then(R::string_entries)
            .unwrap_or_default(),
        model,
        agent_kind,
        title: text(record, "title"),
    })
}
