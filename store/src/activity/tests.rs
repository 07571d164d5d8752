//! The first webhook and first LLM call marks on the embedded backend: written once, on
//! the sandbox that sent them only, whether idle pause is on or not.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Activity;
use crate::timeline::{Launch, Phase, Timeline};
use crate::{Backend, SandboxSpec, SandboxState, Store, StoredSandbox};

async fn store(dir: &tempfile::TempDir) -> Store {
    Store::open(&Backend::Embedded {
        data_dir: dir.path().to_owned(),
    })
    .await
    .expect("open")
}

fn sandbox(runtime_id: &str, session: Option<&str>, timeline: Option<Timeline>) -> StoredSandbox {
    StoredSandbox {
        runtime_id: runtime_id.into(),
        version: 1,
        session_id: session.map(str::to_owned),
        pool: None,
        claim_key: "claim".into(),
        spec: SandboxSpec::default(),
        state: SandboxState::Running,
        status_detail: None,
        key_sha256: format!("{runtime_id}-key"),
        key_nonce: "nonce".into(),
        created_at_ms: 1,
        changed_at_ms: 1,
        restarts: Default::default(),
        slot_failures: 0,
        personalised: false,
        active_at_ms: 0,
        timeline,
        source_address: None,
    }
}

fn started() -> Option<Timeline> {
    Some(Timeline::new(Launch::Cold, Some("no_pool".into()), 1))
}

async fn put(store: &Store, record: &StoredSandbox) {
    assert!(
        store
            .sandboxes
            .put_sandbox(None, record, None)
            .await
            .expect("put")
    );
}

async fn timeline(store: &Store, runtime_id: &str) -> Option<Timeline> {
    store
        .sandboxes
        .sandbox(runtime_id)
        .await
        .expect("read")
        .expect("record")
        .timeline
}

/// Polls until `runtime_id`'s first LLM call is recorded (in the background).
async fn first_llm_call(store: &Store, runtime_id: &str) -> Timeline {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(timeline) = timeline(store, runtime_id).await
            && timeline.first_llm_call_at_ms.is_some()
        {
            return timeline;
        }
        assert!(Instant::now() < deadline, "not recorded in time");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn the_first_webhook_is_recorded_once_on_its_own_sandbox_with_idle_pause_off() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir).await;
    put(&store, &sandbox("mine", Some("session-a"), started())).await;
    put(&store, &sandbox("other", Some("session-b"), started())).await;
    let activity = Activity::new(&store, Duration::ZERO);

    activity.sandbox("mine").await;
    let first = timeline(&store, "mine").await.expect("timeline");
    let at = first.first_webhook_at_ms.expect("first webhook recorded");
    assert!(at >= first.started_at_ms);
    assert_eq!(timeline(&store, "other").await, started());

    activity.sandbox("mine").await;
    assert_eq!(timeline(&store, "mine").await.expect("timeline"), first);
}

#[tokio::test]
async fn a_recorded_first_webhook_costs_no_store_read_after() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir).await;
    put(&store, &sandbox("mine", Some("session-a"), started())).await;
    let activity = Activity::new(&store, Duration::ZERO);
    activity.sandbox("mine").await;

    // Another writer clears it: this process, which remembers having recorded it, does
    // not read the record again.
    let current = store.sandboxes.sandbox("mine").await.unwrap().unwrap();
    let mut cleared = current.clone();
    cleared.version += 1;
    cleared.timeline = started();
    assert!(
        store
            .sandboxes
            .put_sandbox(Some(&current), &cleared, None)
            .await
            .unwrap()
    );
    activity.sandbox("mine").await;
    assert_eq!(timeline(&store, "mine").await, started());
    assert_eq!(activity.firsts.len(), 1);
}

#[tokio::test]
async fn a_warm_sandbox_is_timed_once_claimed_and_an_old_record_is_left_alone() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir).await;
    let warm = sandbox("warm", None, None);
    put(&store, &warm).await;
    put(&store, &sandbox("old", Some("session-old"), None)).await;
    let activity = Activity::new(&store, Duration::from_secs(60));

    activity.sandbox("warm").await;
    activity.sandbox("old").await;
    assert_eq!(timeline(&store, "warm").await, None);
    assert_eq!(timeline(&store, "old").await, None);

    // Claimed after a webhook was seen unclaimed: the next one is its first.
    let mut claimed = warm.clone();
    claimed.version += 1;
    claimed.session_id = Some("session-w".into());
    claimed.timeline = Some(Timeline::new(Launch::Warm, None, 5));
    assert!(
        store
            .sandboxes
            .put_sandbox(Some(&warm), &claimed, None)
            .await
            .unwrap()
    );
    activity.sandbox("warm").await;
    let timed = timeline(&store, "warm").await.expect("timeline");
    assert_eq!(timed.launch, Launch::Warm);
    assert!(timed.first_webhook_at_ms.is_some());
}

#[tokio::test]
async fn the_first_llm_call_of_a_session_is_recorded_on_its_sandbox_only() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir).await;
    put(&store, &sandbox("mine", Some("session-a"), started())).await;
    put(&store, &sandbox("other", Some("session-b"), started())).await;
    let activity: Arc<Activity> = Activity::new(&store, Duration::ZERO);

    activity.llm_call("session-a");
    activity.llm_call("no-such-session");
    let first = first_llm_call(&store, "mine").await;
    assert!(first.first_llm_call_at_ms >= Some(first.started_at_ms));
    assert_eq!(first.first_webhook_at_ms, None);
    assert_eq!(timeline(&store, "other").await, started());

    // A later call, from a process that remembers nothing, leaves the first as it was.
    let fresh = Activity::new(&store, Duration::ZERO);
    let later = first.first_llm_call_at_ms.unwrap() + 1_000;
    assert!(
        fresh
            .first("mine", Phase::FirstLlmCall, later)
            .await
            .unwrap()
    );
    assert_eq!(timeline(&store, "mine").await.expect("timeline"), first);
}

/// A conversation's first call may come before its first webhook has recorded it (the
/// real app server's agent calls first): its mark waits for the record, and is the
/// call's time.
#[tokio::test]
async fn a_first_call_before_its_conversation_is_recorded_is_timed() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir).await;
    put(&store, &sandbox("mine", Some("session-a"), started())).await;
    let activity: Arc<Activity> = Activity::new(&store, Duration::ZERO);
    let conversation = uuid::Uuid::new_v4();
    let before = super::now_ms();
    activity.llm_call(&conversation.to_string());
    let after = super::now_ms();
    // Recorded a moment later (once the mark's first look has likely missed it), as its
    // sandbox's.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let recorded = crate::StoredConversation {
        id: conversation,
        version: 1,
        owner: "sandbox:mine".into(),
        execution_status: "idle".into(),
        updated_at: None,
        received_at: 0,
        deleted: false,
        parent_id: None,
        tags: Default::default(),
        model: None,
        lifecycle: Vec::new(),
        record: serde_json::value::RawValue::from_string("{}".into()).expect("JSON"),
    };
    assert!(
        store
            .conversations
            .compare_and_swap(0, &recorded)
            .await
            .expect("write")
    );
    let first = first_llm_call(&store, "mine").await;
    let marked = first.first_llm_call_at_ms.expect("marked");
    assert!(
        (before..=after).contains(&marked),
        "{marked}: not the call's time ({before}..={after})"
    );
}

/// The marks of a gateway session: its sandbox found and marked; a session that is no
/// sandbox's left alone for a moment, so that its calls' ends (which pass the throttle)
/// cost no store read each.
#[tokio::test]
async fn a_session_without_a_sandbox_is_not_looked_up_again_at_once() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir).await;
    let activity = Activity::new(&store, Duration::from_secs(60));
    let active_at = |store: &Store| {
        let sandboxes = store.sandboxes.clone();
        async move {
            let record = sandboxes.sandbox("late").await.unwrap().expect("record");
            record.active_at_ms
        }
    };

    activity.session("session-late").await;
    assert_eq!(activity.unplaced.len(), 1);
    // Its sandbox appears; a call's end passes the throttle, not the memo: no read.
    put(&store, &sandbox("late", Some("session-late"), started())).await;
    activity.recent.lock().unwrap().clear();
    activity.session("session-late").await;
    assert_eq!(active_at(&store).await, 0);

    // Once the memo lapses, the session's sandbox is found and marked.
    activity.unplaced.forget("session-late");
    activity.recent.lock().unwrap().clear();
    activity.session("session-late").await;
    assert!(active_at(&store).await > 0);
    assert_eq!(activity.unplaced.len(), 0);
}
