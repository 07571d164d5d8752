//! One conformance suite for every store backend: the same calls, the same answers.
//!
//! By record: conversations (`conversations.rs`), runtime management's records
//! (`admin.rs`), the model gateway's (`gateway.rs`), sandboxes and the reconciler's lease
//! (`sandboxes.rs`), and what only a Redis deployment has (`redis_only.rs`).

mod admin;
mod admission;
mod audit;
mod conversations;
mod gateway;
mod ledger;
mod orgs;
mod redis_only;
mod sandboxes;

use std::collections::BTreeMap;

use sandgate_store::{
    Launch, Restarts, SandboxSpec, SandboxState, Store, StoredConversation, StoredSandbox,
    SweepIndex, Timeline,
};
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::common::Backend;

pub async fn open(backend: &Backend) -> Store {
    let backend = match backend {
        Backend::Embedded(dir) => sandgate_store::Backend::Embedded {
            data_dir: dir.path().to_path_buf(),
        },
        Backend::Redis(redis) => sandgate_store::Backend::Redis {
            url: redis.url(),
            tls: redis.tls(),
            min_replicas_ack: 0,
        },
    };
    Store::open(&backend).await.expect("store opens")
}

fn record(
    id: Uuid,
    version: u64,
    parent: Option<Uuid>,
    tags: &[(&str, &str)],
) -> StoredConversation {
    StoredConversation {
        id,
        version,
        owner: "static:abc".into(),
        execution_status: "running".into(),
        updated_at: Some(1),
        received_at: 2,
        deleted: false,
        parent_id: parent,
        tags: tags
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect::<BTreeMap<_, _>>(),
        model: Some("gpt".into()),
        lifecycle: Vec::new(),
        record: RawValue::from_string(format!(r#"{{"id":"{id}","v":{version}}}"#)).expect("raw"),
    }
}

fn sandbox(id: &str, session: Option<&str>, state: SandboxState) -> StoredSandbox {
    StoredSandbox {
        runtime_id: id.into(),
        version: 1,
        session_id: session.map(Into::into),
        pool: Some("v1_current".into()),
        claim_key: "claim".into(),
        spec: SandboxSpec::default(),
        state,
        status_detail: None,
        key_sha256: "00".into(),
        key_nonce: "nonce".into(),
        created_at_ms: 100,
        changed_at_ms: 100,
        // Kept and read back as written, like every other field.
        restarts: Restarts {
            count: 2,
            reasons: vec!["OOMKilled (exit code 137)".into()],
        },
        slot_failures: 3,
        personalised: true,
        active_at_ms: 50,
        timeline: session.map(|_| Timeline {
            launch: Launch::Cold,
            cold_reason: Some("pool_empty".into()),
            started_at_ms: 60,
            running_at_ms: Some(70),
            alive_at_ms: Some(80),
            first_webhook_at_ms: Some(90),
            first_llm_call_at_ms: None,
        }),
        source_address: None,
    }
}

/// `record` changed by `change`, as the next version.
fn next(record: &StoredSandbox, change: impl FnOnce(&mut StoredSandbox)) -> StoredSandbox {
    let mut next = record.clone();
    change(&mut next);
    next.version += 1;
    next
}

async fn put(store: &Store, previous: Option<&StoredSandbox>, next: &StoredSandbox) {
    assert!(
        store
            .sandboxes
            .put_sandbox(previous, next, None)
            .await
            .expect("put"),
        "{} written",
        next.runtime_id
    );
}

/// The ids a sweep index lists up to `until_ms`, at most `limit`.
async fn swept(store: &Store, index: SweepIndex, until_ms: i64, limit: usize) -> Vec<String> {
    store
        .sandboxes
        .swept_sandboxes(index, until_ms, limit)
        .await
        .expect("swept")
        .into_iter()
        .map(|record| record.runtime_id)
        .collect()
}
