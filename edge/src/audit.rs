//! `GET /api/admin/audit` → RuntimeAdmin's ListAuditEntries: the operators' changes,
//! newest first, with the admin token.

use axum::Json;
use axum::extract::{RawQuery, State};
use http::HeaderMap;
use sandgate_proto::admin::v1::{self as pb, ListAuditEntriesRequest};
use serde::Serialize;
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::conversations::query_integer;
use crate::error::{ApiError, DetailBody, ValidationBody, after_caller};
use crate::metadata;
use crate::state::AppState;

/// `GET /api/admin/audit`'s query.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[expect(dead_code, reason = "read from the raw query; here for the document")]
pub(crate) struct AuditQuery {
    /// The `next` of the page before: this page holds older entries
    before: Option<String>,
    /// Page size; 0 or absent means 100; more than 1000 means 1000
    #[param(maximum = 4294967295.0, default = 100)]
    limit: Option<u64>,
}

/// One change made with the admin token or the model gateway's master key: never a
/// secret.
#[derive(Serialize, ToSchema)]
pub(crate) struct AuditEntry {
    /// Increasing with time; a page's `next` is its last entry's
    id: String,
    /// Milliseconds since the epoch
    at_ms: i64,
    /// `admin`, `master key`, or `key <alias> (<abbreviation>)`
    actor: String,
    /// The client's address, when known
    source: Option<String>,
    /// `warm_config.put`, `warm_config.delete`, `key.generate`, `team.update`…
    action: String,
    /// A configuration's name, a key's alias and abbreviation, a team's or user's id…
    target: String,
    /// The change's limits and names
    #[schema(value_type = Option<Object>)]
    detail: Option<Value>,
}

/// A page of the audit log.
#[derive(Serialize, ToSchema)]
pub(crate) struct AuditPage {
    entries: Vec<AuditEntry>,
    /// `before` for the next page; absent on the last
    next: Option<String>,
}

#[utoipa::path(
    get,
    path = "/api/admin/audit",
    operation_id = "list_audit_entries",
    tag = "Runtime management",
    summary = "The audit log: every change made with the admin token or the master key, newest first",
    security(("AdminToken" = [])),
    params(AuditQuery),
    responses(
        (status = 200, description = "A page", body = AuditPage),
        (status = 401, description = "Missing, invalid or expired admin token", body = DetailBody),
        (status = 403, description = "No admin password is configured: `Admin functionality is disabled`", body = DetailBody),
        (status = 422, description = "Validation error", body = ValidationBody),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<AuditPage>, ApiError> {
    let request = match request_of(query.as_deref()) {
        Ok(request) => request,
        Err(error) => {
            // The caller is judged before its query.
            let probe = metadata::request(
                &headers,
                ListAuditEntriesRequest {
                    limit: 1,
                    ..ListAuditEntriesRequest::default()
                },
            );
            return Err(after_caller(error, state.admin.clone().list_audit_entries(probe)).await);
        }
    };
    let page = state
        .admin
        .clone()
        .list_audit_entries(metadata::request(&headers, request))
        .await?
        .into_inner();
    Ok(Json(AuditPage {
        entries: page.entries.into_iter().map(entry).collect(),
        next: (!page.next.is_empty()).then_some(page.next),
    }))
}

fn request_of(query: Option<&str>) -> Result<ListAuditEntriesRequest, ApiError> {
    let mut request = ListAuditEntriesRequest::default();
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match name.as_ref() {
            "before" => request.before = value.into_owned(),
            "limit" => request.limit = query_integer("limit", &value)?,
            _ => {}
        }
    }
    Ok(request)
}

fn entry(entry: pb::AuditEntry) -> AuditEntry {
    AuditEntry {
        id: entry.id,
        at_ms: entry.at_ms,
        actor: entry.actor,
        source: (!entry.source.is_empty()).then_some(entry.source),
        action: entry.action,
        target: entry.target,
        detail: serde_json::from_slice(&entry.detail_json).ok(),
    }
}
