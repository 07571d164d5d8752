//! `GET /api/ledger/conversations/{id}` and `GET /api/ledger/rollup` → RuntimeAdmin's
//! ledger, with the admin token: what a conversation cost, and sums by team, user, key,
//! model, conversation, day or a tag's value over a range of days, as JSON or CSV.

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, header};
use sandgate_proto::admin::v1::{
    GetConversationLedgerRequest, LedgerGroup, LedgerMeasures, LedgerRollupRequest,
};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::{IntoParams, ToSchema};

use crate::conversations::query_integer;
use crate::error::{ApiError, DetailBody, ValidationBody, after_caller};
use crate::metadata;
use crate::runtimes::{StartTimeline, Status};
use crate::state::AppState;
use sandgate_proto::sandboxes::v1::SandboxStatus;

/// What a ledger row counts.
#[derive(Serialize, ToSchema)]
pub(crate) struct Measures {
    /// The calls' cost, at their entries' prices
    spend: f64,
    calls: u64,
    /// Calls whose answer was not a success
    failed_calls: u64,
    prompt_tokens: u64,
    completion_tokens: u64,
    /// A conversation's sandbox: milliseconds running (its current state counted to now)
    running_ms: u64,
    /// …and paused
    paused_ms: u64,
    /// A conversation's events stored (each once)
    events: u64,
    /// A conversation's updates (webhook deliveries) accepted
    webhooks: u64,
    /// Of the input, tokens read from the provider's cache
    cache_read_tokens: u64,
    /// …and written to it
    cache_write_tokens: u64,
    /// The sandbox's time at the operator's prices per sandbox-hour (`--sandbox-hour-price`,
    /// `--sandbox-paused-hour-price`), scaled by its resource factor
    sandbox_cost: f64,
}

impl From<LedgerMeasures> for Measures {
    fn from(m: LedgerMeasures) -> Self {
        Self {
            spend: m.spend,
            calls: m.calls,
            failed_calls: m.failed_calls,
            prompt_tokens: m.prompt_tokens,
            completion_tokens: m.completion_tokens,
            running_ms: m.running_ms,
            paused_ms: m.paused_ms,
            events: m.events,
            webhooks: m.webhooks,
            cache_read_tokens: m.cache_read_tokens,
            cache_write_tokens: m.cache_write_tokens,
            sandbox_cost: m.sandbox_cost,
        }
    }
}

/// One conversation's ledger.
#[derive(Serialize, ToSchema)]
pub(crate) struct ConversationLedger {
    conversation_id: String,
    total: Measures,
    /// Its calls by the model they asked for
    by_model: BTreeMap<String, Measures>,
    /// Its sandbox now; absent when it has none
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    sandbox: Option<LedgerSandbox>,
    #[serde(flatten)]
    owner: Owner,
}

/// Who a conversation's calls are billed to: the first virtual key that counted a call
/// for it, and that key's user and team then; absent when none did.
#[derive(Serialize, ToSchema)]
pub(crate) struct Owner {
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    user_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    team_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    key_alias: Option<String>,
}

impl Owner {
    fn of(user_id: String, team_id: String, key_alias: String) -> Self {
        let given = |text: String| (!text.is_empty()).then_some(text);
        Self {
            user_id: given(user_id),
            team_id: given(team_id),
            key_alias: given(key_alias),
        }
    }
}

/// A conversation's sandbox, as its ledger shows it.
#[derive(Serialize, ToSchema)]
pub(crate) struct LedgerSandbox {
    status: Status,
    /// 1: 1 CPU and 2Gi requested
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = f64)]
    resource_factor: Option<f64>,
    /// Its start: warm or cold, why, and its phases
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    start: Option<StartTimeline>,
}

/// A rollup's row.
#[derive(Serialize, ToSchema)]
pub(crate) struct RollupRow {
    id: String,
    #[serde(flatten)]
    measures: Measures,
    /// By conversation: its title, execution status and tags, as the catalog has them
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    tags: Option<BTreeMap<String, String>>,
    /// By conversation: who its calls are billed to
    #[serde(flatten)]
    owner: Owner,
}

/// A page of a rollup.
#[derive(Serialize, ToSchema)]
pub(crate) struct Rollup {
    /// By id
    rows: Vec<RollupRow>,
    /// `after` for the next page; absent on the last
    next: Option<String>,
    /// Rows in the range, over every page
    total_rows: u64,
}

/// The days a ledger read covers.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[expect(dead_code, reason = "read from the raw query; here for the document")]
pub(crate) struct LedgerDays {
    /// The first day (UTC, `2026-11-01`); absent: 30 days before `to`; at most 400 days
    /// before `to` are read (what is kept), and a `from` after `to` reads nothing
    #[param(format = Date)]
    from: Option<String>,
    /// The last day (UTC), included; absent: today
    #[param(format = Date)]
    to: Option<String>,
}

/// A rollup's query beyond its days.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[expect(dead_code, reason = "read from the raw query; here for the document")]
pub(crate) struct RollupQuery {
    /// What rows are: `team`, `user`, `key` (a virtual key, by its token), `model`,
    /// `conversation`, `day` (a row a day, its id the date: everything counted that day)
    /// or `tag:<key>` (a row per value of the tag `<key>`, as `tag:project`: the
    /// conversations carrying it, each counted under the tags it had when its counts were
    /// written)
    #[param(pattern = r"^(team|user|key|model|conversation|day|tag:.+)$")]
    by: String,
    /// Page size; 0 or absent means 100; more than 1000 means 1000
    #[param(maximum = 4294967295.0, default = 100)]
    limit: Option<u64>,
    /// The `next` of the page before
    after: Option<String>,
    /// JSON (the default) or CSV
    #[param(inline)]
    format: Option<LedgerFormat>,
}

/// A rollup's format.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[expect(dead_code, reason = "read from the raw query; here for the document")]
pub(crate) enum LedgerFormat {
    Json,
    Csv,
}

fn invalid(name: &'static str, message: &str, value: &str) -> ApiError {
    ApiError::invalid("value_error", ["query", name], message, Value::from(value))
}

/// A day (`2026-11-01`) as days since the epoch; one before 1970-01-02 is that day (the
/// ledger holds nothing older).
fn day(name: &'static str, value: &str) -> Result<u32, ApiError> {
    let refused = || invalid(name, "Value error, a day is written 2026-11-01", value);
    // The calendar's form alone: speedate also reads a number as a Unix time.
    let calendar = value.len() == 10
        && value.bytes().enumerate().all(|(at, byte)| match at {
            4 | 7 => byte == b'-',
            _ => byte.is_ascii_digit(),
        });
    if !calendar {
        return Err(refused());
    }
    let date = speedate::Date::parse_str(value).map_err(|_| refused())?;
    let day = date.timestamp_ms().div_euclid(86_400_000).max(1);
    Ok(u32::try_from(day).unwrap_or(u32::MAX))
}

#[derive(Default)]
struct Query {
    from: u32,
    to: u32,
    group: Option<LedgerGroup>,
    limit: u32,
    after: String,
    tag: String,
    csv: bool,
}

fn query_of(query: Option<&str>) -> Result<Query, ApiError> {
    let mut read = Query::default();
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match name.as_ref() {
            "from" => read.from = day("from", &value)?,
            "to" => read.to = day("to", &value)?,
            "limit" => read.limit = query_integer("limit", &value)?,
            "after" => read.after = value.into_owned(),
            "by" => {
                read.group = Some(match value.as_ref() {
                    "team" => LedgerGroup::Team,
                    "user" => LedgerGroup::User,
                    "key" => LedgerGroup::Key,
                    "model" => LedgerGroup::Model,
                    "conversation" => LedgerGroup::Conversation,
                    "day" => LedgerGroup::Day,
                    other => match other.strip_prefix("tag:").filter(|key| !key.is_empty()) {
                        Some(key) => {
                            read.tag = key.to_owned();
                            LedgerGroup::Tag
                        }
                        None => {
                            return Err(invalid(
                                "by",
                                "Value error, one of team, user, key, model, conversation, day, tag:<key>",
                                other,
                            ));
                        }
                    },
                })
            }
            "format" => {
                read.csv = match value.as_ref() {
                    "json" => false,
                    "csv" => true,
                    other => return Err(invalid("format", "Value error, json or csv", other)),
                }
            }
            _ => {}
        }
    }
    Ok(read)
}

#[utoipa::path(
    get,
    path = "/api/ledger/conversations/{id}",
    operation_id = "get_conversation_ledger",
    tag = "Ledger",
    summary = "What a conversation cost: its LLM calls, in all and by model, and its sandbox's time",
    security(("AdminToken" = [])),
    params(("id" = String, Path, description = "The conversation's id (the session id its calls carry)"), LedgerDays),
    responses(
        (status = 200, description = "The conversation's ledger (zeros when nothing was counted)", body = ConversationLedger),
        (status = 401, description = "Missing, invalid or expired admin token", body = DetailBody),
        (status = 403, description = "No admin password is configured: `Admin functionality is disabled`", body = DetailBody),
        (status = 422, description = "Validation error", body = ValidationBody),
    ),
)]
pub async fn conversation(
    State(state): State<AppState>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<ConversationLedger>, ApiError> {
    let mut request = GetConversationLedgerRequest {
        conversation_id: id.clone(),
        ..GetConversationLedgerRequest::default()
    };
    match query_of(query.as_deref()) {
        Ok(query) => (request.from_day, request.to_day) = (query.from, query.to),
        Err(error) => {
            let probe = metadata::request(&headers, GetConversationLedgerRequest::default());
            return Err(
                after_caller(error, state.admin.clone().get_conversation_ledger(probe)).await,
            );
        }
    }
    let ledger = state
        .admin
        .clone()
        .get_conversation_ledger(metadata::request(&headers, request))
        .await?
        .into_inner();
    let sandbox = (ledger.sandbox_status() != SandboxStatus::Unspecified).then(|| LedgerSandbox {
        status: ledger.sandbox_status().into(),
        resource_factor: ledger.resource_factor,
        start: ledger.start.clone().map(StartTimeline::from),
    });
    Ok(Json(ConversationLedger {
        owner: Owner::of(
            ledger.user_id.clone(),
            ledger.team_id.clone(),
            ledger.key_alias.clone(),
        ),
        conversation_id: id,
        sandbox,
        total: ledger.total.unwrap_or_default().into(),
        by_model: ledger
            .by_model
            .into_iter()
            .map(|(model, measures)| (model, measures.into()))
            .collect(),
    }))
}

#[utoipa::path(
    get,
    path = "/api/ledger/rollup",
    operation_id = "ledger_rollup",
    tag = "Ledger",
    summary = "The ledger summed by team, user, key, model, conversation, day or a tag's value over a range of days",
    security(("AdminToken" = [])),
    params(RollupQuery, LedgerDays),
    responses(
        (
            status = 200,
            description = "A page of rows, by id (`format=csv`: a header line and a row a line)",
            content((Rollup = "application/json"), (String = "text/csv")),
            headers(("X-Next-After" = String, description = "CSV: the next page's `after`, query-encoded; empty on the last page")),
        ),
        (status = 401, description = "Missing, invalid or expired admin token", body = DetailBody),
        (status = 403, description = "No admin password is configured: `Admin functionality is disabled`", body = DetailBody),
        (status = 422, description = "Validation error", body = ValidationBody),
    ),
)]
pub async fn rollup(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let query = match query_of(query.as_deref()).and_then(|query| match query.group {
        Some(_) => Ok(query),
        None => Err(ApiError::invalid(
            "missing",
            ["query", "by"],
            "Field required",
            Value::Null,
        )),
    }) {
        Ok(query) => query,
        Err(error) => {
            let probe = metadata::request(&headers, LedgerRollupRequest::default());
            return Err(after_caller(error, state.admin.clone().ledger_rollup(probe)).await);
        }
    };
    let request = LedgerRollupRequest {
        group: query.group.unwrap_or_default().into(),
        from_day: query.from,
        to_day: query.to,
        limit: query.limit,
        after: query.after,
        tag: query.tag,
    };
    let page = state
        .admin
        .clone()
        .ledger_rollup(metadata::request(&headers, request))
        .await?
        .into_inner();
    let rows: Vec<RollupRow> = page
        .rows
        .into_iter()
        .map(|row| RollupRow {
            id: row.id,
            measures: row.measures.unwrap_or_default().into(),
            title: (!row.title.is_empty()).then_some(row.title),
            status: (!row.status.is_empty()).then_some(row.status),
            tags: (!row.tags.is_empty()).then(|| row.tags.into_iter().collect()),
            owner: Owner::of(row.user_id, row.team_id, row.key_alias),
        })
        .collect();
    if query.csv {
        // The next page's `after`, as a query value: ids are any text, headers ASCII.
        let next: String = form_urlencoded::byte_serialize(page.next.as_bytes()).collect();
        return Ok((
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
                (header::HeaderName::from_static("x-next-after"), next),
            ],
            csv(&rows),
        )
            .into_response());
    }
    Ok(Json(Rollup {
        rows,
        next: (!page.next.is_empty()).then_some(page.next),
        total_rows: page.total_rows,
    })
    .into_response())
}

/// `rows` as CSV (RFC 4180): a header line, then a row a line.
fn csv(rows: &[RollupRow]) -> String {
    let mut text = String::from(
        "id,spend,calls,failed_calls,prompt_tokens,completion_tokens,cache_read_tokens,cache_write_tokens,running_ms,paused_ms,sandbox_cost,events,webhooks,title,status,tags,user_id,team_id,key_alias\r\n",
    );
    for row in rows {
        let m = &row.measures;
        let tags: Vec<String> = row
            .tags
            .iter()
            .flatten()
            .map(|(key, value)| format!("{key}={value}"))
            .collect();
        text.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\r\n",
            csv_text(&row.id),
            m.spend,
            m.calls,
            m.failed_calls,
            m.prompt_tokens,
            m.completion_tokens,
            m.cache_read_tokens,
            m.cache_write_tokens,
            m.running_ms,
            m.paused_ms,
            m.sandbox_cost,
            m.events,
            m.webhooks,
            csv_text(row.title.as_deref().unwrap_or_default()),
            csv_text(row.status.as_deref().unwrap_or_default()),
            csv_text(&tags.join(";")),
            csv_text(row.owner.user_id.as_deref().unwrap_or_default()),
            csv_text(row.owner.team_id.as_deref().unwrap_or_default()),
            csv_text(row.owner.key_alias.as_deref().unwrap_or_default()),
        ));
    }
    text
}

/// A text cell: quoted, its quotes doubled; one a spreadsheet would read as a formula
/// (`=`, `+`, `-`, `@`, a tab or a carriage return first) starts with `'`.
fn csv_text(text: &str) -> String {
    let formula = text.starts_with(['=', '+', '-', '@', '\t', '\r']);
    format!(
        "\"{}{}\"",
        if formula { "'" } else { "" },
        text.replace('"', "\"\"")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_cells_are_quoted_and_never_a_formula() {
        assert_eq!(csv_text("team-a"), "\"team-a\"");
        assert_eq!(csv_text("a\"b,c\nd"), "\"a\"\"b,c\nd\"");
        assert_eq!(csv_text("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(csv_text("-1+1"), "\"'-1+1\"");
    }

    #[test]
    fn days_are_read_as_days_since_the_epoch() {
        assert_eq!(day("from", "1970-01-02").ok(), Some(1));
        assert_eq!(day("from", "2026-11-29").ok(), Some(20_786));
        assert_eq!(day("from", "1970-01-01").ok(), Some(1));
        assert_eq!(day("from", "0001-01-01").ok(), Some(1));
        for bad in [
            "",
            "yesterday",
            "2026-13-01",
            "0.5",
            "0",
            "1732838400",
            " 2026-11-01",
        ] {
            assert!(day("from", bad).is_err(), "{bad}");
        }
    }
}
