//! The spend reads: `/global/spend/report` (spend per day, grouped by team, user, key,
//! model or session, from the counters, which are exact whatever the spend log kept) and
//! the filters of `/spend/logs`.

use sandgate_proto::error::ErrorDetail;
use sandgate_proto::models::v1::ListSpendLogsRequest;
use sandgate_store::ledger::conversation_id;
use sandgate_store::orgs::DAY_SPEND_RETENTION_DAYS;
use sandgate_store::{SpendLogEntry, SpendScope, Store, day_of};
use serde_json::{Map, Value, json};

use super::bad;
use crate::keys::named_token;

const DAY_MS: i64 = 86_400_000;

/// A day (`2026-03-01`) or a time (RFC 3339) as milliseconds since the epoch; a day
/// names its start, or with `end` its last millisecond.
fn parse_time(text: &str, field: &str, end: bool) -> Result<i64, ErrorDetail> {
    let text = text.trim();
    let refused = || {
        bad(format!(
            "`{field}` must be a day (2026-03-01) or an RFC 3339 time"
        ))
    };
    // speedate also reads a number as a Unix time (`0.5`): only the calendar's forms here.
    let calendar = text
        .as_bytes()
        .get(..5)
        .is_some_and(|head| head[..4].iter().all(u8::is_ascii_digit) && head[4] == b'-');
    if !calendar {
        return Err(refused());
    }
    if let Ok(date) = speedate::Date::parse_str(text) {
        let start = date.timestamp_ms();
        return Ok(if end { start + DAY_MS - 1 } else { start });
    }
    speedate::DateTime::parse_str(text)
        .map(|time| time.timestamp_tz_ms())
        .map_err(|_| refused())
}

fn day_text(day: u32) -> Value {
    Value::String(sandgate_store::orgs::date_of(day))
}

/// `/global/spend/report?start_date=&end_date=&group_by=`: each day's spend of every
/// team (`group_by=team`, the default), user, key (`api_key`), model or session.
pub(super) async fn spend_report(
    store: &Store,
    body: &Map<String, Value>,
) -> Result<Value, ErrorDetail> {
    let date = |field: &str, end: bool| -> Result<Option<i64>, ErrorDetail> {
        match body.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => parse_time(text, field, end).map(Some),
            Some(_) => Err(bad(format!("`{field}` must be a date"))),
        }
    };
    let today = day_of(crate::support::now_ms());
    let to = date("end_date", true)?.map_or(today, day_of);
    let from = date("start_date", false)?.map_or(to.saturating_sub(30), day_of);
    if from > to {
        return Err(bad("`start_date` is after `end_date`"));
    }
    if to - from > DAY_SPEND_RETENTION_DAYS {
        return Err(bad(format!(
            "a report covers at most {DAY_SPEND_RETENTION_DAYS} days (what is kept per day)"
        )));
    }
    let group_by = body
        .get("group_by")
        .and_then(Value::as_str)
        .unwrap_or("team");
    let (scope, list, field) = match group_by {
        "team" => (SpendScope::Team, "teams", "team_id"),
        "user" | "customer" => (SpendScope::User, "users", "user_id"),
        "api_key" | "key" => (SpendScope::Key, "api_keys", "api_key"),
        "model" => (SpendScope::Model, "models", "model"),
        "session" => (SpendScope::Session, "sessions", "session_id"),
        _ => {
            return Err(bad(
                "`group_by` must be team, user, api_key, model or session",
            ));
        }
    };
    let counters = store.orgs.spend_by_day(scope, from, to).await?;
    let mut days: Vec<Value> = Vec::new();
    let mut current: Option<(u32, Vec<Value>)> = None;
    for counter in counters {
        if current.as_ref().is_some_and(|(day, _)| *day != counter.day)
            && let Some((day, groups)) = current.take()
        {
            days.push(json!({"group_by_day": day_text(day), list: groups}));
        }
        let (_, groups) = current.get_or_insert_with(|| (counter.day, Vec::new()));
        let mut group = json!({ field: counter.id, "total_spend": counter.amount });
        if scope == SpendScope::Team {
            group["team_name"] = Value::String(counter.id.clone());
        }
        groups.push(group);
    }
    if let Some((day, groups)) = current {
        days.push(json!({"group_by_day": day_text(day), list: groups}));
    }
    Ok(Value::Array(days))
}

/// What `/spend/logs` keeps of the log: entries of a key, user, team, session, and
/// started within a range.
#[derive(Debug, Default)]
pub(crate) struct ListFilter {
    token: Option<String>,
    user_id: Option<String>,
    team_id: Option<String>,
    session_id: Option<String>,
    start_ms: Option<i64>,
    end_ms: Option<i64>,
}

impl ListFilter {
    pub(crate) fn of(request: &ListSpendLogsRequest) -> Result<Self, ErrorDetail> {
        let some = |text: &str| (!text.is_empty()).then(|| text.to_owned());
        let mut named = Map::new();
        named.insert("api_key".into(), Value::String(request.api_key.clone()));
        Ok(Self {
            token: some(&request.api_key)
                .map(|_| named_token(&named, "api_key"))
                .transpose()?
                .flatten(),
            user_id: some(&request.user_id),
            team_id: some(&request.team_id),
            session_id: some(&request.session_id),
            start_ms: some(&request.start_date)
                .map(|text| parse_time(&text, "start_date", false))
                .transpose()?,
            end_ms: some(&request.end_date)
                .map(|text| parse_time(&text, "end_date", true))
                .transpose()?,
        })
    }

    /// Whether it filters anything.
    pub(crate) fn any(&self) -> bool {
        self.token.is_some()
            || self.user_id.is_some()
            || self.team_id.is_some()
            || self.session_id.is_some()
            || self.start_ms.is_some()
            || self.end_ms.is_some()
    }
}

/// Whether `filter` keeps `entry`.
pub(crate) fn listed(filter: &ListFilter, entry: &SpendLogEntry) -> bool {
    let is = |wanted: &Option<String>, value: &Option<String>| {
        wanted.is_none() || wanted.as_ref() == value.as_ref()
    };
    is(&filter.token, &entry.api_key)
        && is(&filter.user_id, &entry.key_user_id)
        && is(&filter.team_id, &entry.team_id)
        // A session as the ledger names its conversation: a UUID however written.
        && filter.session_id.as_deref().is_none_or(|wanted| {
            entry.session_id.as_deref().is_some_and(|session| {
                conversation_id(session) == conversation_id(wanted)
            })
        })
        && filter
            .start_ms
            .is_none_or(|start| entry.started_at_ms >= start)
        && filter.end_ms.is_none_or(|end| entry.started_at_ms <= end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_and_times_read_as_litellm_takes_them() {
        assert_eq!(parse_time("1970-01-02", "d", false).ok(), Some(DAY_MS));
        assert_eq!(
            parse_time("1970-01-02", "d", true).ok(),
            Some(2 * DAY_MS - 1)
        );
        assert_eq!(
            parse_time("1970-01-01T00:00:01.5Z", "d", false).ok(),
            Some(1_500)
        );
        for refused in ["yesterday", "0.5", "1700000000", "", "-1970-01-01"] {
            assert!(parse_time(refused, "d", false).is_err(), "{refused}");
        }
        assert_eq!(day_text(1), json!("1970-01-02"));
    }

    #[test]
    fn filters_keep_only_what_they_name() {
        let entry = SpendLogEntry {
            api_key: Some("a".repeat(64)),
            key_user_id: Some("u".into()),
            team_id: Some("t".into()),
            started_at_ms: 5 * DAY_MS,
            ..SpendLogEntry::default()
        };
        let filter = ListFilter::of(&ListSpendLogsRequest {
            user_id: "u".into(),
            team_id: "t".into(),
            api_key: "a".repeat(64),
            start_date: "1970-01-06".into(),
            end_date: "1970-01-06".into(),
            ..ListSpendLogsRequest::default()
        })
        .unwrap_or_default();
        assert!(filter.any() && listed(&filter, &entry));
        for other in [
            ListSpendLogsRequest {
                user_id: "v".into(),
                ..ListSpendLogsRequest::default()
            },
            ListSpendLogsRequest {
                start_date: "1970-01-07".into(),
                ..ListSpendLogsRequest::default()
            },
            ListSpendLogsRequest {
                session_id: "s".into(),
                ..ListSpendLogsRequest::default()
            },
        ] {
            let filter = ListFilter::of(&other).unwrap_or_default();
            assert!(!listed(&filter, &entry), "{other:?}");
        }
    }
}
