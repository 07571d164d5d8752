//! A sandbox's life past its pool: claims (exact match, cold starts when the pool is
//! empty), pause and resume with the session key rotated, resume on the original image,
//! and the cleanup of idle paused and stopped sandboxes.

use sandgate_runtime_api::sandboxes::SandboxError;
use sandgate_store::SandboxState;

use super::{DAY_MS, Fixture, IMAGE, default_spec, pool, saved};
use crate::common::Backend;

async fn an_exhausted_pool_cold_starts_and_refills(backend: Backend) {
    let fixture = Fixture::new(backend, 1);
    let replica = fixture.replica().await;
    replica.pass().await;
    fixture.clock.advance(2_000);

    let (first, claimed) = replica
        .sandboxes
        .start(default_spec(), "conv-a".into())
        .await
        .expect("start");
    assert!(claimed, "the warm sandbox is claimed");
    assert_eq!(first.state, SandboxState::Running);
    assert_eq!(first.pool.as_deref(), Some("v1_current"));

    let (second, claimed) = replica
        .sandboxes
        .start(default_spec(), "conv-b".into())
        .await
        .expect("start");
    assert!(!claimed, "the pool is empty: a cold start");
    assert_eq!(second.state, SandboxState::Starting);
    assert_eq!(second.pool, None);

    let pass = replica.pass().await;
    assert_eq!(pass.created, 1, "the pool refills");
    assert_eq!(replica.pools().await, [pool("v1_current", IMAGE, 1, 0, 1)]);

    // A start for a session that already has a sandbox answers that sandbox.
    let (again, claimed) = replica
        .sandboxes
        .start(default_spec(), "conv-a".into())
        .await
        .expect("start");
    assert!(!claimed);
    assert_eq!(again.runtime_id, first.runtime_id);
}

async fn a_claim_needs_an_exact_match_less_the_per_deployment_keys(backend: Backend) {
    let fixture = Fixture::new(backend, 1);
    let replica = fixture.replica().await;
    replica.pass().await;

    let mut other_deployment = default_spec();
    other_deployment
        .environment
        .insert("OH_WEBHOOKS_0_BASE_URL".into(), "http://app-b/hooks".into());
    other_deployment
        .environment
        .insert("OH_ALLOW_CORS_ORIGINS_0".into(), "https://app-b".into());
    let mut extra_key = default_spec();
    extra_key.environment.insert("DEBUG".into(), "1".into());
    let mut other_command = default_spec();
    other_command.command.push("--verbose".into());
    let mut other_dir = default_spec();
    other_dir.working_dir = "/home/agent".into();

    for (session, spec) in [
        ("c1", &extra_key),
        ("c2", &other_command),
        ("c3", &other_dir),
    ] {
        let (_, claimed) = replica
            .sandboxes
            .start(spec.clone(), session.into())
            .await
            .expect("start");
        assert!(!claimed, "{session}: a different spec cold-starts");
    }
    // Still warm and starting: a starting sandbox is claimed rather than cold-starting.
    let (sandbox, claimed) = replica
        .sandboxes
        .start(other_deployment, "c4".into())
        .await
        .expect("start");
    assert!(claimed, "only per-deployment keys differ: claimed");
    assert_eq!(sandbox.pool.as_deref(), Some("v1_current"));
}

async fn pause_resume_and_the_session_key(backend: Backend) {
    let fixture = Fixture::new(backend, 0);
    let replica = fixture.replica().await;
    let (sandbox, _) = replica
        .sandboxes
        .start(default_spec(), "conv-p".into())
        .await
        .expect("start");
    let id = sandbox.runtime_id.clone();
    let first_key = replica.sandboxes.view(sandbox.clone()).session_api_key;
    assert_eq!(first_key.len(), 64);
    assert_eq!(
        replica
            .store
            .session_keys
            .sandbox_for_key(&sandgate_runtime_api::auth::session_key_digest(&first_key))
            .await
            .expect("key"),
        Some(id.clone())
    );

    // Only a paused (or failed) sandbox resumes.
    let refused = replica.sandboxes.resume(&id).await.expect_err("starting");
    assert!(matches!(refused, SandboxError::Conflict(_)), "{refused:?}");

    let paused = replica.sandboxes.pause(&id).await.expect("pause");
    assert_eq!(paused.state, SandboxState::Paused);
    assert_eq!(
        replica.sandboxes.pause(&id).await.expect("again").state,
        SandboxState::Paused
    );

    let resumed = replica.sandboxes.resume(&id).await.expect("resume");
    assert_eq!(resumed.state, SandboxState::Starting);
    let second_key = replica.sandboxes.view(resumed).session_api_key;
    assert_ne!(second_key, first_key, "a resume rotates the key");
    let digest = sandgate_runtime_api::auth::session_key_digest;
    assert_eq!(
        replica
            .store
            .session_keys
            .sandbox_for_key(&digest(&first_key))
            .await
            .expect("key"),
        None
    );
    assert_eq!(
        replica
            .store
            .session_keys
            .sandbox_for_key(&digest(&second_key))
            .await
            .expect("key"),
        Some(id.clone())
    );

    let refused = replica.sandboxes.resume(&id).await.expect_err("not paused");
    assert!(matches!(refused, SandboxError::Conflict(_)));

    let stopped = replica.sandboxes.stop(&id).await.expect("stop");
    assert_eq!(stopped.state, SandboxState::Stopped);
    assert_eq!(
        replica
            .store
            .session_keys
            .sandbox_for_key(&digest(&second_key))
            .await
            .expect("key"),
        None
    );
    assert!(matches!(
        replica.sandboxes.pause(&id).await,
        Err(SandboxError::Conflict(_))
    ));
    assert!(matches!(
        replica.sandboxes.pause("nope").await,
        Err(SandboxError::NotFound(_))
    ));
}

async fn a_paused_conversation_resumes_on_its_original_image(backend: Backend) {
    let fixture = Fixture::new(backend, 1);
    let replica = fixture.replica().await;
    replica.pass().await;
    let (sandbox, claimed) = replica
        .sandboxes
        .start(default_spec(), "conv-r".into())
        .await
        .expect("start");
    assert!(claimed);
    replica
        .sandboxes
        .pause(&sandbox.runtime_id)
        .await
        .expect("pause");

    replica
        .store
        .warm_configs
        .put_warm_config("v1_current", &saved("ghcr.io/acme/agent:3.0", 1))
        .await
        .expect("save");
    replica.pass().await;
    assert!(
        replica
            .warm()
            .await
            .iter()
            .all(|record| record.spec.image == "ghcr.io/acme/agent:3.0")
    );

    let resumed = replica
        .sandboxes
        .resume(&sandbox.runtime_id)
        .await
        .expect("resume");
    assert_eq!(resumed.spec.image, IMAGE);
    assert_eq!(resumed.runtime_id, sandbox.runtime_id);
}

async fn idle_paused_sandboxes_are_deleted_and_stopped_ones_forgotten(backend: Backend) {
    let fixture = Fixture::new(backend, 0);
    let replica = fixture.replica().await;
    let (idle, _) = replica
        .sandboxes
        .start(default_spec(), "idle".into())
        .await
        .expect("start");
    let (busy, _) = replica
        .sandboxes
        .start(default_spec(), "busy".into())
        .await
        .expect("start");
    replica
        .sandboxes
        .pause(&idle.runtime_id)
        .await
        .expect("pause");

    fixture.clock.advance(10 * DAY_MS - 1);
    assert_eq!(replica.pass().await.retired, 0, "not yet ten days");
    fixture.clock.advance(1);
    assert_eq!(replica.pass().await.retired, 1);
    let listed = replica.sandboxes.list().await.expect("list");
    let state_of = |id: &str| listed.iter().find(|r| r.runtime_id == id).map(|r| r.state);
    assert_eq!(state_of(&idle.runtime_id), Some(SandboxState::Stopped));
    assert_eq!(
        state_of(&busy.runtime_id),
        Some(SandboxState::Running),
        "running ones stay"
    );

    // Stopped sandboxes are listed for an hour, then forgotten.
    fixture.clock.advance(3_600_000);
    assert_eq!(replica.pass().await.retired, 1);
    let listed = replica.sandboxes.list().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].runtime_id, busy.runtime_id);
    assert!(
        replica
            .sandboxes
            .session("idle")
            .await
            .expect("read")
            .is_none()
    );
}

/// The idle sweep's boundary, on the clock the test moves: a claimed sandbox that runs is
/// left alone a millisecond short of its idle period since it was last active, and paused
/// once the period is over; one active a second later is not paused with it.
async fn the_idle_sweep_pauses_a_sandbox_once_its_idle_period_is_over(backend: Backend) {
    use sandgate_runtime_api::ambient::Clock as _;

    let fixture = Fixture::new(backend, 0);
    let replica = fixture.replica().await;
    let idle_ms =
        i64::try_from(replica.sandboxes.options().idle_after.as_millis()).expect("an idle period");
    assert!(
        idle_ms > 2_000,
        "idle pause is on, longer than the steps below"
    );
    let running = |session: &'static str| {
        let sandboxes = replica.sandboxes.clone();
        let clock = fixture.clock.clone();
        async move {
            let (started, _) = sandboxes
                .start(default_spec(), session.into())
                .await
                .expect("start");
            // The local driver's start takes two seconds of the clock.
            let record = loop {
                let record = sandboxes
                    .session(session)
                    .await
                    .expect("read")
                    .expect("sandbox");
                if record.state == SandboxState::Running {
                    break record;
                }
                assert_eq!(record.state, SandboxState::Starting, "{session}");
                clock.advance(1_000);
            };
            assert_eq!(record.runtime_id, started.runtime_id);
            record
        }
    };
    let quiet = running("quiet").await;
    fixture.clock.advance(1_000);
    let later = running("later").await;
    let last_active =
        |record: &sandgate_store::StoredSandbox| record.changed_at_ms.max(record.active_at_ms);
    assert!(last_active(&later) > last_active(&quiet));
    let state = |session: &'static str| {
        let sandboxes = replica.sandboxes.clone();
        async move {
            sandboxes
                .session(session)
                .await
                .expect("read")
                .expect("sandbox")
                .state
        }
    };

    fixture
        .clock
        .advance(last_active(&quiet) + idle_ms - 1 - fixture.clock.now_ms());
    assert_eq!(
        replica.pass().await.paused,
        0,
        "a millisecond short of the idle period"
    );
    assert_eq!(state("quiet").await, SandboxState::Running);
    fixture.clock.advance(1);
    assert_eq!(replica.pass().await.paused, 1, "the idle period is over");
    assert_eq!(state("quiet").await, SandboxState::Paused);
    assert_eq!(
        state("later").await,
        SandboxState::Running,
        "active later: not idle yet"
    );

    fixture
        .clock
        .advance(last_active(&later) + idle_ms - fixture.clock.now_ms());
    assert_eq!(replica.pass().await.paused, 1);
    assert_eq!(state("later").await, SandboxState::Paused);
}

crate::on_both_backends!(
    an_exhausted_pool_cold_starts_and_refills,
    a_claim_needs_an_exact_match_less_the_per_deployment_keys,
    pause_resume_and_the_session_key,
    a_paused_conversation_resumes_on_its_original_image,
    idle_paused_sandboxes_are_deleted_and_stopped_ones_forgotten,
    the_idle_sweep_pauses_a_sandbox_once_its_idle_period_is_over,
);
