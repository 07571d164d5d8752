//! TEMPORARY stand-in with the agreed API; replaced by the schema-driven validator.
use serde_json::Value;
use std::collections::BTreeMap;

pub const REDACTED: &str = "**********";

#[derive(Clone, Debug)]
pub enum LocItem {
    Key(String),
    Index(usize),
}

#[derive(Clone, Debug)]
pub struct ValidationError {
    pub error_type: &'static str,
    pub loc: Vec<LocItem>,
    pub msg: String,
    pub input: Value,
    pub ctx: Option<Value>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
}

pub struct ConversationSummary {
    pub id: uuid::Uuid,
    pub execution_status: ExecutionStatus,
    pub updated_at: Option<i64>,
    pub created_at: Option<i64>,
    pub parent_conversation_id: Option<uuid::Uuid>,
    pub tags: BTreeMap<String, String>,
    pub model: Option<String>,
    pub agent_kind: String,
    pub title: Option<String>,
}

pub struct ValidConversation {
    pub record: Value,
    pub summary: ConversationSummary,
}

fn err(t: &'static str, loc: Vec<LocItem>, msg: &str) -> ValidationError {
    ValidationError {
        error_type: t,
        loc,
        msg: msg.into(),
        input: Value::Null,
        ctx: None,
    }
}

pub fn parse_json(body: &[u8]) -> Result<Value, ValidationError> {
    serde_json::from_slice(body).map_err(|e| {
        err(
            "json_invalid",
            vec![LocItem::Index(e.column())],
            "JSON decode error",
        )
    })
}

pub fn validate_conversation(body: Value) -> Result<ValidConversation, Vec<ValidationError>> {
    let Some(obj) = body.as_object() else {
        return Err(vec![err(
            "model_attributes_type",
            vec![],
            "Input should be a valid dictionary or object to extract fields from",
        )]);
    };
    let id = obj
        .get("id")
        .and_then(Value::as_str)
        .and_then(|s| uuid::Uuid::parse_str(s).ok())
        .ok_or_else(|| {
            vec![err(
                "missing",
                vec![LocItem::Key("id".into())],
                "Field required",
            )]
        })?;
    let ts = |k: &str| {
        obj.get(k)
            .and_then(Value::as_str)
            .and_then(|s| speedate::DateTime::parse_str(s).ok())
            .map(|d| d.timestamp() * 1_000_000 + i64::from(d.time.microsecond))
    };
    let status = match obj.get("execution_status").and_then(Value::as_str) {
        Some("paused") => ExecutionStatus::Paused,
        Some("deleting") => ExecutionStatus::Deleting,
        Some("running") => ExecutionStatus::Running,
        _ => ExecutionStatus::Idle,
    };
    let tags = match obj.get("tags") {
        Some(t) => validate_tags(t)?,
        None => BTreeMap::new(),
    };
    let summary = ConversationSummary {
        id,
        execution_status: status,
        updated_at: ts("updated_at"),
        created_at: ts("created_at"),
        parent_conversation_id: obj
            .get("parent_conversation_id")
            .and_then(Value::as_str)
            .and_then(|s| uuid::Uuid::parse_str(s).ok()),
        tags,
        model: obj
            .get("agent")
            .and_then(|a| a.get("llm"))
            .and_then(|l| l.get("model"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        agent_kind: "Agent".into(),
        title: None,
    };
    Ok(ValidConversation {
        record: body,
        summary,
    })
}

pub fn validate_tags(tags: &Value) -> Result<BTreeMap<String, String>, Vec<ValidationError>> {
    let Some(obj) = tags.as_object() else {
        return Err(vec![err(
            "dict_type",
            vec![LocItem::Key("tags".into())],
            "Input should be a valid dictionary",
        )]);
    };
    let mut out = BTreeMap::new();
    for (k, v) in obj {
        if k.is_empty()
            || !k
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        {
            return Err(vec![err(
                "value_error",
                vec![LocItem::Key("tags".into())],
                &format!(
                    "Value error, Tag key '{k}' is invalid: keys must be lowercase alphanumeric only"
                ),
            )]);
        }
        out.insert(k.clone(), v.as_str().unwrap_or_default().to_owned());
    }
    Ok(out)
}

impl ValidationError {
    pub fn to_fastapi_json(&self) -> Value {
        let mut loc = vec![Value::from("body")];
        loc.extend(self.loc.iter().map(|l| match l {
            LocItem::Key(k) => Value::from(k.clone()),
            LocItem::Index(i) => Value::from(*i),
        }));
        serde_json::json!({"type": self.error_type, "loc": loc, "msg": self.msg, "input": self.input})
    }
}

pub fn schema() -> &'static Value {
    static SCHEMA: std::sync::LazyLock<Value> =
        std::sync::LazyLock::new(|| serde_json::json!({"type": "object"}));
    &SCHEMA
}
