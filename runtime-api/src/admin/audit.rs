//! The audit log: the admin's changes recorded, and the log read with the admin token.

use std::net::IpAddr;

use sandgate_proto::admin::v1::{self as pb, ListAuditEntriesRequest, ListAuditEntriesResponse};
use sandgate_store::AuditEntry;
use tonic::{Request, Response, Status};

use super::{RuntimeAdminService, store_failed};

/// A page's size when none is asked, and the largest.
pub const DEFAULT_AUDIT_PAGE: u32 = 100;
pub const MAX_AUDIT_PAGE: u32 = 1000;

impl RuntimeAdminService {
    /// Records the admin's change `action` of `target`, made from `source`.
    pub(super) async fn audit(
        &self,
        action: &str,
        target: &str,
        source: Option<IpAddr>,
        detail: serde_json::Value,
    ) {
        let entry = AuditEntry {
            at_ms: self.clock.now_ms(),
            actor: "admin".to_owned(),
            source: source.map(|address| address.to_string()),
            action: action.to_owned(),
            target: target.to_owned(),
            detail,
            ..AuditEntry::default()
        };
        sandgate_store::audit::record(self.store.audit.as_ref(), entry).await;
    }

    /// `ListAuditEntries`, with the admin token.
    pub(super) async fn list_audit(
        &self,
        request: Request<ListAuditEntriesRequest>,
    ) -> Result<Response<ListAuditEntriesResponse>, Status> {
        self.authorize(request.metadata())?;
        let ListAuditEntriesRequest { before, limit } = request.into_inner();
        let limit = match limit {
            0 => DEFAULT_AUDIT_PAGE,
            limit => limit.min(MAX_AUDIT_PAGE),
        } as usize;
        let before = (!before.is_empty()).then_some(before.as_str());
        let entries = self
            .store
            .audit
            .audit_entries(before, limit)
            .await
            .map_err(store_failed)?;
        let next = if entries.len() == limit {
            entries
                .last()
                .map(|entry| entry.id.clone())
                .unwrap_or_default()
        } else {
            String::new()
        };
        Ok(Response::new(ListAuditEntriesResponse {
            entries: entries.into_iter().map(wire).collect(),
            next,
        }))
    }
}

fn wire(entry: AuditEntry) -> pb::AuditEntry {
    pb::AuditEntry {
        id: entry.id,
        at_ms: entry.at_ms,
        actor: entry.actor,
        source: entry.source.unwrap_or_default(),
        action: entry.action,
        target: entry.target,
        detail_json: if entry.detail.is_null() {
            Default::default()
        } else {
            entry.detail.to_string().into_bytes().into()
        },
    }
}
