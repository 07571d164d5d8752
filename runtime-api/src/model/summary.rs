//! The typed summary the service indexes a conversation by, read from a record that
//! already validated (so the lookups below cannot meet an unexpected shape).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::scalars::{epoch_micros, parse_datetime};

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

fn text(obj: &Map<String, Value>, key: &str) -> Option<String> {
    obj.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn timestamp(obj: &Map<String, Value>, key: &str) -> Option<i64> {
    obj.get(key)
        .and_then(|v| parse_datetime(v).ok())
        .map(|dt| epoch_micros(&dt))
}

fn uuid_of(obj: &Map<String, Value>, key: &str) -> Option<uuid::Uuid> {
    obj.get(key)
        .and_then(Value::as_str)
        .and_then(|s| uuid::Uuid::parse_str(s).ok())
}

/// `None` only if `record` did not validate, which callers rule out.
pub(crate) fn summarize(record: &Value) -> Option<ConversationSummary> {
    let obj = record.as_object()?;
    let agent = obj.get("agent").and_then(Value::as_object)?;
    let agent_kind = text(agent, "kind")?;
    let model = if agent_kind == "ACPAgent" {
        text(obj, "current_model_id").or_else(|| text(agent, "acp_model"))
    } else {
        agent
            .get("llm")
            .and_then(Value::as_object)
            .and_then(|llm| text(llm, "model"))
    };
    let tags = match obj.get("tags") {
        Some(Value::Object(tags)) => tags
            .iter()
            .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
            .collect(),
        _ => BTreeMap::new(),
    };
    Some(ConversationSummary {
        id: uuid_of(obj, "id")?,
        execution_status: match obj.get("execution_status") {
            None => ExecutionStatus::Idle,
            Some(v) => ExecutionStatus::parse(v.as_str()?)?,
        },
        updated_at: timestamp(obj, "updated_at"),
        created_at: timestamp(obj, "created_at"),
        parent_conversation_id: uuid_of(obj, "parent_conversation_id"),
        tags,
        model,
        agent_kind,
        title: text(obj, "title"),
    })
}
