//! What the gateway's management writes to the audit log: who (the master key, or a
//! virtual key by its alias and abbreviation), from where, what and on what, with the
//! change's limits and names. Never a key, a metadata value or anything else a field may
//! hide a secret in: of a body, only the fields of [`KEPT`] (short), and the names of the
//! others.

use std::net::IpAddr;

use sandgate_proto::models::v1::{KeyOperation, OrgOperation};
use sandgate_store::{AuditEntry, Store, StoredModel};
use serde_json::{Map, Value};

use crate::keys::{Caller, descriptor, key_name};
use crate::support::now_ms;

/// The fields of a management body an entry keeps with their values: limits, names and
/// the ids a change is on.
const KEPT: &[&str] = &[
    "key_alias",
    "user_id",
    "team_id",
    "team_alias",
    "max_budget",
    "budget_duration",
    "max_budget_per_session",
    "max_parallel_requests",
    "rpm_limit",
    "tpm_limit",
    "models",
    "duration",
    "blocked",
    "role",
    "user_role",
    "spend",
    "max_budget_in_team",
];
/// A kept text's longest, and a list's most items; a body's most field names.
const MAX_TEXT: usize = 200;
const MAX_ITEMS: usize = 50;

/// Who `caller` is, in an entry.
pub(crate) fn actor(caller: &Caller) -> String {
    match caller {
        Caller::Master => "master key".to_owned(),
        Caller::Virtual { key, .. } => format!("key {}", descriptor(key)),
    }
}

pub(crate) fn key_action(operation: KeyOperation) -> Option<&'static str> {
    match operation {
        KeyOperation::Generate => Some("key.generate"),
        KeyOperation::Update => Some("key.update"),
        KeyOperation::Delete => Some("key.delete"),
        KeyOperation::Info | KeyOperation::List | KeyOperation::Unspecified => None,
    }
}

pub(crate) fn org_action(operation: OrgOperation) -> Option<&'static str> {
    Some(match operation {
        OrgOperation::TeamNew => "team.new",
        OrgOperation::TeamUpdate => "team.update",
        OrgOperation::TeamDelete => "team.delete",
        OrgOperation::TeamMemberAdd => "team.member_add",
        OrgOperation::TeamMemberUpdate => "team.member_update",
        OrgOperation::TeamMemberDelete => "team.member_delete",
        OrgOperation::TeamBlock => "team.block",
        OrgOperation::TeamUnblock => "team.unblock",
        OrgOperation::UserNew => "user.new",
        OrgOperation::UserUpdate => "user.update",
        OrgOperation::UserDelete => "user.delete",
        OrgOperation::TeamInfo
        | OrgOperation::TeamList
        | OrgOperation::UserList
        | OrgOperation::UserInfo
        | OrgOperation::UserInfoV2
        | OrgOperation::BudgetInfo
        | OrgOperation::SpendReport
        | OrgOperation::Unspecified => return None,
    })
}

/// The change a management call made, as an entry: `body` the call's, `answer` the
/// gateway's (where a new key's name or a new team's id is).
pub(crate) fn entry(
    caller: &Caller,
    source: Option<IpAddr>,
    action: &str,
    body: &[u8],
    answer: &[u8],
) -> AuditEntry {
    let body = object(body);
    let answer = object(answer);
    AuditEntry {
        at_ms: now_ms(),
        actor: actor(caller),
        source: source.map(|address| address.to_string()),
        action: action.to_owned(),
        target: target(action, &body, &answer),
        detail: detail(&body),
        ..AuditEntry::default()
    }
}

/// An added model, as an entry: its name, its upstream model, and where it goes (the
/// scheme and host of its base: a query or userinfo may carry a credential).
pub(crate) fn model_added(
    caller: &Caller,
    source: Option<IpAddr>,
    model: &StoredModel,
) -> AuditEntry {
    let host = url::Url::parse(&model.api_base)
        .ok()
        .map(|url| format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default()))
        .unwrap_or_default();
    AuditEntry {
        at_ms: now_ms(),
        actor: actor(caller),
        source: source.map(|address| address.to_string()),
        action: "model.add".to_owned(),
        target: short(&model.model_name).to_owned(),
        detail: serde_json::json!({"model": short(&model.model), "api_base": short(&host)}),
        ..AuditEntry::default()
    }
}

/// Records `entry` in `store`'s audit log.
pub(crate) async fn record(store: &Store, entry: AuditEntry) {
    sandgate_store::audit::record(store.audit.as_ref(), entry).await;
}

fn object(bytes: &[u8]) -> Map<String, Value> {
    match serde_json::from_slice(bytes) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// What the change is on: a key by its alias and abbreviation (never the key), a team or
/// a user by its id.
fn target(action: &str, body: &Map<String, Value>, answer: &Map<String, Value>) -> String {
    let text = |map: &Map<String, Value>, field: &str| {
        map.get(field)
            .and_then(Value::as_str)
            .map(|value| short(value).to_owned())
    };
    let target = if action == "key.generate" {
        let name = text(answer, "key_name").unwrap_or_default();
        match text(answer, "key_alias") {
            Some(alias) => Some(format!("{alias} ({name})")),
            None => Some(name),
        }
    } else if action.starts_with("key.") {
        let mut keys: Vec<String> = body
            .get("keys")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .chain(body.get("key"))
            .filter_map(Value::as_str)
            .map(key_name)
            .collect();
        keys.extend(
            body.get("key_aliases")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(|alias| short(alias).to_owned()),
        );
        keys.truncate(MAX_ITEMS);
        (!keys.is_empty()).then(|| keys.join(", "))
    } else if action.starts_with("team.") {
        text(body, "team_id")
            .or_else(|| text(answer, "team_id"))
            .or_else(|| list(body, "team_ids"))
    } else {
        text(body, "user_id")
            .or_else(|| text(answer, "user_id"))
            .or_else(|| list(body, "user_ids"))
    };
    target.unwrap_or_default()
}

fn list(map: &Map<String, Value>, field: &str) -> Option<String> {
    let items: Vec<&str> = map
        .get(field)?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .map(short)
        .take(MAX_ITEMS)
        .collect();
    (!items.is_empty()).then(|| items.join(", "))
}

/// The kept fields of `body` with their values, and the names of all its fields.
fn detail(body: &Map<String, Value>) -> Value {
    let mut detail = Map::new();
    for (field, value) in body {
        if KEPT.contains(&field.as_str()) {
            detail.insert(field.clone(), kept(value));
        }
    }
    // A member added or changed: who, and as what.
    if let Some(Value::Object(member)) = body.get("member") {
        let member: Map<String, Value> = member
            .iter()
            .filter(|(field, _)| KEPT.contains(&field.as_str()))
            .map(|(field, value)| (field.clone(), kept(value)))
            .collect();
        detail.insert("member".to_owned(), Value::Object(member));
    }
    let fields: Vec<Value> = body
        .keys()
        .take(MAX_ITEMS)
        .map(|field| Value::String(short(field).to_owned()))
        .collect();
    detail.insert("fields".to_owned(), Value::Array(fields));
    Value::Object(detail)
}

fn kept(value: &Value) -> Value {
    match value {
        Value::String(text) => Value::String(short(text).to_owned()),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .take(MAX_ITEMS)
                .filter(|item| !item.is_object() && !item.is_array())
                .map(kept)
                .collect(),
        ),
        Value::Object(_) => Value::String("{…}".to_owned()),
        other => other.clone(),
    }
}

/// `text` cut to [`MAX_TEXT`] bytes, at a character's boundary.
fn short(text: &str) -> &str {
    if text.len() <= MAX_TEXT {
        return text;
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_key_s_value_and_its_metadata_never_reach_an_entry() {
        let secret = "sk-0123456789abcdef0123456789abcdefSECRET";
        let body = json!({
            "key": secret,
            "key_alias": "ci",
            "max_budget": 5.0,
            "metadata": {"token": "hidden-value"},
            "models": ["gpt", {"nested": "hidden-value"}],
        });
        let entry = entry(
            &Caller::Master,
            Some("192.0.2.1".parse().expect("address")),
            "key.update",
            body.to_string().as_bytes(),
            b"{}",
        );
        let text = serde_json::to_string(&entry).expect("json");
        assert!(
            !text.contains("SECRET") && !text.contains("hidden-value"),
            "{text}"
        );
        assert_eq!(entry.target, "sk-...CRET");
        assert_eq!(entry.actor, "master key");
        assert_eq!(entry.source.as_deref(), Some("192.0.2.1"));
        assert_eq!(entry.detail["max_budget"], json!(5.0));
        assert_eq!(entry.detail["models"], json!(["gpt"]));
        assert_eq!(
            entry.detail["fields"],
            json!(["key", "key_alias", "max_budget", "metadata", "models"])
        );
    }

    #[test]
    fn a_new_key_is_named_by_its_alias_and_abbreviation_and_long_texts_are_cut() {
        let long = "é".repeat(500);
        let entry = entry(
            &Caller::Master,
            None,
            "key.generate",
            json!({"key_alias": long}).to_string().as_bytes(),
            json!({"key": "sk-secret", "key_name": "sk-...abcd", "key_alias": "ci"})
                .to_string()
                .as_bytes(),
        );
        assert_eq!(entry.target, "ci (sk-...abcd)");
        assert!(entry.detail["key_alias"].as_str().expect("alias").len() <= MAX_TEXT);
    }
}
