//! The audit log on every backend: ids that page, newest first, and the bound.

use sandgate_store::AuditEntry;

use super::open;
use crate::common::Backend;

fn entry(index: usize) -> AuditEntry {
    AuditEntry {
        at_ms: 1_000 + index as i64,
        actor: "admin".into(),
        source: Some("192.0.2.7".into()),
        action: "warm_config.put".into(),
        target: format!("pool-{index}"),
        detail: serde_json::json!({"count": index}),
        ..AuditEntry::default()
    }
}

async fn the_audit_log_pages_newest_first_within_its_bound(backend: Backend) {
    let store = open(&backend).await;
    assert_eq!(store.audit.audit_entries(None, 10).await.expect("read"), []);
    let mut ids = Vec::new();
    for index in 0..7 {
        ids.push(
            store
                .audit
                .append_audit(&entry(index), 5)
                .await
                .expect("append"),
        );
    }
    // Kept: the last five, newest first, each with the id its append returned.
    let all = store.audit.audit_entries(None, 100).await.expect("read");
    let targets: Vec<_> = all.iter().map(|entry| entry.target.as_str()).collect();
    assert_eq!(targets, ["pool-6", "pool-5", "pool-4", "pool-3", "pool-2"]);
    let listed_ids: Vec<_> = all.iter().map(|entry| entry.id.clone()).collect();
    assert_eq!(
        listed_ids,
        ids[2..].iter().rev().cloned().collect::<Vec<_>>()
    );
    assert_eq!(
        all[0],
        AuditEntry {
            id: ids[6].clone(),
            ..entry(6)
        }
    );
    // Pages: older than the last one seen, to the end.
    let first = store.audit.audit_entries(None, 2).await.expect("page");
    let second = store
        .audit
        .audit_entries(Some(&first[1].id), 2)
        .await
        .expect("page");
    let third = store
        .audit
        .audit_entries(Some(&second[1].id), 2)
        .await
        .expect("page");
    let paged: Vec<_> = [first, second, third]
        .concat()
        .into_iter()
        .map(|entry| entry.target)
        .collect();
    assert_eq!(paged, ["pool-6", "pool-5", "pool-4", "pool-3", "pool-2"]);
    // A cursor no entry could have reads nothing, and fails nothing.
    for cursor in ["", "abc", "1-x", "-", "99999999999999999999999-1", "(0-1"] {
        assert_eq!(
            store
                .audit
                .audit_entries(Some(cursor), 10)
                .await
                .expect("read"),
            [],
            "{cursor:?}"
        );
    }
}

crate::on_both_backends!(the_audit_log_pages_newest_first_within_its_bound,);
