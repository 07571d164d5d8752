//! How failures of the `kubernetes` driver end, against the fake API server with injected
//! faults, on a clock the test moves: a refused warm create heals after its backoff, a
//! failed start and a sandbox in error recover through a start and a resume, a pod that
//! waits (pull, container config, crash loop, scheduling) says why and then fails past
//! the start timeout, and the pools' listing says what the reconciler's gauges say.

use std::sync::Arc;

use axum::http::Method;
use sandgate_proto::sandboxes::v1::sandboxes_server::Sandboxes as _;
use sandgate_proto::sandboxes::v1::{ListPoolsRequest, PoolStatus};
use sandgate_runtime_api::ambient::Clock as _;
use sandgate_runtime_api::sandboxes::SandboxError;
use sandgate_runtime_api::sandboxes::kubernetes::KubernetesDriver;
use sandgate_runtime_api::sandboxes::pools::{HEAL_BACKOFF_BASE, HEAL_BACKOFF_MAX};
use sandgate_store::SandboxState;
use serde_json::json;

use crate::common::fake_kube::{CLAIMS, DEPLOYMENTS, FakeKube, INGRESSES, PODS, SECRETS, SERVICES};
use crate::common::{Backend, RUNTIME_KEY};
use crate::kubernetes::{NAMESPACE, object, objects_of, options, pod, sandbox, waiting};
use crate::warm_pools::{Fixture, Replica};

/// A replica whose reconciler keeps a pool of `count` (`v1_current`) on the fake cluster.
async fn cluster(count: i64) -> (FakeKube, Replica, Fixture) {
    let fake = FakeKube::start().await;
    let driver = Arc::new(KubernetesDriver::with_client(fake.client(), options()));
    let fixture = Fixture::new(Backend::embedded(), count);
    let replica = fixture.replica_with(
        crate::store_conformance::open(&fixture.backend).await,
        driver,
    );
    (fake, replica, fixture)
}

/// The pools as the Sandboxes service lists them.
async fn pools(replica: &Replica) -> Vec<PoolStatus> {
    let mut request = tonic::Request::new(ListPoolsRequest {});
    request
        .metadata_mut()
        .insert("x-api-key", RUNTIME_KEY.parse().expect("metadata"));
    replica
        .service
        .list_pools(request)
        .await
        .expect("pools")
        .into_inner()
        .pools
}

fn deployment_creates(fake: &FakeKube) -> usize {
    fake.requests()
        .iter()
        .filter(|request| request.method == Method::POST && request.path.ends_with("/deployments"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_warm_create_heals_after_its_backoff_and_waits_longer_each_time() {
    let (fake, replica, fixture) = cluster(1).await;
    fake.fail_next(
        Method::POST,
        DEPLOYMENTS,
        403,
        "Forbidden",
        "deployments.apps is forbidden: exceeded quota: sandboxes",
    );
    let pass = replica.pass().await;
    assert_eq!((pass.created, pass.replaced), (1, 0));
    let pool = &pools(&replica).await[0];
    assert_eq!((pool.ready, pool.starting, pool.failed), (0, 0, 1));
    assert_eq!(pool.state, "backing_off");
    assert!(pool.failures[0].contains("exceeded quota"), "{pool:?}");
    assert!(
        pool.failures[1].starts_with("failed sandboxes are replaced in "),
        "{pool:?}"
    );
    let due = pass.next_heal_ms.expect("a replacement is due");

    // Before the backoff ends, passes leave the failed slot alone: no create at full rate.
    let creates = deployment_creates(&fake);
    assert_eq!(replica.pass().await.created, 0);
    assert_eq!(deployment_creates(&fake), creates);

    // The replacement is refused too: the next one waits about twice as long.
    fake.fail_next(
        Method::POST,
        SERVICES,
        500,
        "InternalError",
        "etcdserver: request timed out",
    );
    fixture.clock.advance(due - fixture.clock.now_ms());
    let pass = replica.pass().await;
    assert_eq!((pass.created, pass.replaced), (1, 1), "{pass:?}");
    let wait = pass.next_heal_ms.expect("a replacement is due") - fixture.clock.now_ms();
    let base = HEAL_BACKOFF_BASE.as_millis() as i64;
    assert!(wait >= base && wait <= 2 * base, "{wait}");
    assert!(wait <= HEAL_BACKOFF_MAX.as_millis() as i64);
    let pool = &pools(&replica).await[0];
    assert_eq!(pool.failed, 1, "{pool:?}");
    assert!(
        pool.failures
            .iter()
            .any(|failure| failure.contains("2 failure(s) in a row")),
        "{pool:?}"
    );

    // The fault cleared: once the backoff is over, the slot is refilled.
    fixture.clock.advance(wait);
    let pass = replica.pass().await;
    assert_eq!((pass.created, pass.replaced), (1, 1), "{pass:?}");
    let pool = &pools(&replica).await[0];
    assert_eq!((pool.starting, pool.failed), (1, 0), "{pool:?}");
    assert!(pool.failures.is_empty(), "{pool:?}");
    assert_eq!(pool.state, "filling");
    let warm = replica.warm().await;
    assert_eq!(warm.len(), 1);
    let id = warm[0].runtime_id.clone();
    for (resource, found) in objects_of(&fake, &id) {
        assert!(found.is_some(), "{resource} of the replacement is missing");
    }

    // Once it runs, its slot's failures are forgotten: a later failure starts afresh.
    fake.put(
        PODS,
        pod(
            &format!("sandbox-{id}-x1"),
            &id,
            json!({
                "phase": "Running",
                "containerStatuses": [{
                    "name": "sandbox", "image": "i", "imageID": "", "ready": true,
                    "restartCount": 0, "state": {"running": {}},
                }],
            }),
        ),
    );
    replica.pass().await;
    let warm = replica.warm().await;
    assert_eq!(
        (warm[0].state, warm[0].slot_failures),
        (SandboxState::Running, 0)
    );
    let pool = &pools(&replica).await[0];
    assert_eq!((pool.ready, pool.state.as_str()), (1, "ready"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_start_and_a_sandbox_in_error_recover_through_start_and_resume() {
    let (fake, replica, _fixture) = cluster(0).await;
    let spec = sandbox("unused", None).spec;
    fake.fail_next(
        Method::POST,
        INGRESSES,
        500,
        "InternalError",
        "etcdserver: leader changed",
    );
    let err = replica
        .sandboxes
        .start(spec.clone(), "conv-f".into())
        .await
        .expect_err("the ingress is refused");
    assert!(matches!(err, SandboxError::Driver(_)), "{err:?}");
    let failed = replica
        .sandboxes
        .session("conv-f")
        .await
        .expect("read")
        .expect("the failed sandbox is recorded");
    assert_eq!(failed.state, SandboxState::Error);
    assert!(
        failed
            .status_detail
            .as_deref()
            .is_some_and(|detail| detail.contains("leader changed")),
        "{failed:?}"
    );

    // The same start again starts it again: the same sandbox, all its objects, a new key.
    let (started, claimed) = replica
        .sandboxes
        .start(spec.clone(), "conv-f".into())
        .await
        .expect("the start is retried");
    assert!(!claimed);
    assert_eq!(started.runtime_id, failed.runtime_id);
    assert_eq!(started.state, SandboxState::Starting);
    assert_eq!(started.status_detail, None);
    let id = started.runtime_id.clone();
    for (resource, found) in objects_of(&fake, &id) {
        assert!(found.is_some(), "{resource} is missing after the retry");
    }
    let key = replica.sandboxes.view(started.clone()).session_api_key;
    let secret = object(&fake, SECRETS, &format!("sandbox-{id}-session"));
    assert_eq!(secret["stringData"]["SESSION_API_KEY"], key);

    // Later its image cannot be had, and someone deleted its Service and Ingress: a resume
    // makes them again and keeps its workspace claim.
    let claim_uid =
        object(&fake, CLAIMS, &format!("sandbox-{id}-workspace"))["metadata"]["uid"].clone();
    fake.put(
        PODS,
        pod(
            &format!("sandbox-{id}-x1"),
            &id,
            waiting("InvalidImageName", "couldn't parse image name"),
        ),
    );
    fake.remove(SERVICES, NAMESPACE, &format!("sandbox-{id}"));
    fake.remove(INGRESSES, NAMESPACE, &format!("sandbox-{id}"));
    let broken = replica
        .sandboxes
        .session("conv-f")
        .await
        .expect("read")
        .expect("sandbox");
    assert_eq!(broken.state, SandboxState::Error);
    fake.remove(PODS, NAMESPACE, &format!("sandbox-{id}-x1"));
    let resumed = replica.sandboxes.resume(&id).await.expect("resume");
    assert_eq!(resumed.state, SandboxState::Starting);
    for (resource, found) in objects_of(&fake, &id) {
        assert!(found.is_some(), "{resource} is missing after the resume");
    }
    assert_eq!(
        object(&fake, CLAIMS, &format!("sandbox-{id}-workspace"))["metadata"]["uid"],
        claim_uid,
        "the workspace is the one it had"
    );
    let new_key = replica.sandboxes.view(resumed.clone()).session_api_key;
    assert_ne!(new_key, key);
    let secret = object(&fake, SECRETS, &format!("sandbox-{id}-session"));
    assert_eq!(secret["stringData"]["SESSION_API_KEY"], new_key);
    let deployment = object(&fake, DEPLOYMENTS, &format!("sandbox-{id}"));
    assert_eq!(
        deployment["spec"]["template"]["metadata"]["annotations"]["sandgate.dev/session-key-version"],
        resumed.key_nonce.as_str(),
        "a new pod reads the new key"
    );

    // A start in error for the session with another spec says what to do instead.
    fake.put(
        PODS,
        pod(
            &format!("sandbox-{id}-x2"),
            &id,
            waiting("InvalidImageName", "couldn't parse image name"),
        ),
    );
    let mut other = spec;
    other.image = "ghcr.io/acme/agent-server:2.0.0".into();
    let err = replica
        .sandboxes
        .start(other, "conv-f".into())
        .await
        .expect_err("another spec");
    let SandboxError::Conflict(message) = err else {
        panic!("{err:?}")
    };
    assert!(
        message.contains("/stop") && message.contains("/resume"),
        "{message}"
    );
}

/// Each waiting state reaches the sandbox's detail at once, and its error past the start
/// timeout; a waiting warm sandbox is no claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_waiting_state_is_the_detail_then_an_error_past_the_start_timeout() {
    let (fake, replica, fixture) = cluster(0).await;
    let unschedulable = json!({
        "phase": "Pending",
        "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 Insufficient memory.",
        }],
    });
    let mut crashing = waiting(
        "CrashLoopBackOff",
        "back-off 5m0s restarting failed container",
    );
    crashing["containerStatuses"][0]["restartCount"] = json!(6);
    crashing["containerStatuses"][0]["lastState"] =
        json!({"terminated": {"exitCode": 1, "reason": "Error"}});
    let cases = [
        (
            "config",
            waiting(
                "CreateContainerConfigError",
                "container has runAsNonRoot and image will run as root",
            ),
            "run_as_user",
        ),
        (
            "backoff",
            waiting("ImagePullBackOff", "Back-off pulling image"),
            "ImagePullBackOff",
        ),
        (
            "pull",
            waiting("ErrImagePull", "manifest unknown"),
            "ErrImagePull",
        ),
        ("crash", crashing, "CrashLoopBackOff"),
        ("sched", unschedulable, "Insufficient memory"),
    ];
    let mut ids = Vec::new();
    for (session, status, _) in &cases {
        let (started, _) = replica
            .sandboxes
            .start(sandbox("unused", None).spec, (*session).into())
            .await
            .expect("start");
        let id = started.runtime_id;
        fake.put(PODS, pod(&format!("sandbox-{id}-x1"), &id, status.clone()));
        ids.push(id);
    }
    for (session, _, named) in &cases {
        let seen = replica
            .sandboxes
            .session(session)
            .await
            .expect("read")
            .expect("sandbox");
        assert_eq!(seen.state, SandboxState::Starting, "{session}");
        let detail = seen.status_detail.unwrap_or_default();
        assert!(detail.contains(named), "{session}: {detail}");
    }

    let timeout = replica.sandboxes.options().start_timeout.as_millis() as i64;
    fixture.clock.advance(timeout);
    for (session, _, named) in &cases {
        let seen = replica
            .sandboxes
            .session(session)
            .await
            .expect("read")
            .expect("sandbox");
        assert_eq!(seen.state, SandboxState::Error, "{session}");
        let detail = seen.status_detail.unwrap_or_default();
        assert!(
            detail.contains("SANDBOX_START_TIMEOUT") && detail.contains(named),
            "{session}: {detail}"
        );
    }
    // None of them was left for a claim either: each is still its session's, and a start
    // of the same spec for another session gets a sandbox of its own. (Seen failing, "a
    // sandbox in error was claimed", with a failed sandbox kept in the claim index and
    // taken by `claim_by`.)
    for ((session, _, _), id) in cases.iter().zip(&ids) {
        let seen = replica
            .sandboxes
            .session(session)
            .await
            .expect("read")
            .expect("sandbox");
        assert_eq!(&seen.runtime_id, id, "{session}");
    }
    let (started, claimed) = replica
        .sandboxes
        .start(sandbox("unused", None).spec, "after-the-errors".into())
        .await
        .expect("start");
    assert!(!claimed, "a sandbox in error was claimed");
    assert!(
        !ids.contains(&started.runtime_id),
        "a sandbox in error was given to another session: {}",
        started.runtime_id
    );
}

/// The SDK's `APIRemoteWorkspace` starts in `/` (its image's WORKDIR): the workspace is
/// mounted beside the image's files, not over them, so the container can start.
#[tokio::test]
async fn a_root_working_directory_keeps_the_image_and_mounts_the_workspace_beside_it() {
    let fake = FakeKube::start().await;
    let driver = KubernetesDriver::with_client(fake.client(), options());
    for (working_dir, mounted) in [
        ("/", "/workspace"),
        ("/.", "/workspace"),
        ("/srv/w", "/srv/w"),
    ] {
        let mut record = sandbox("r00t", None);
        record.runtime_id = format!("r00t{}", working_dir.len());
        record.spec.working_dir = working_dir.into();
        sandgate_runtime_api::sandboxes::driver::SandboxDriver::create(
            &driver,
            &record,
            &crate::kubernetes::keys(crate::kubernetes::KEY),
        )
        .await
        .expect("create");
        let deployment = object(
            &fake,
            DEPLOYMENTS,
            &format!("sandbox-{}", record.runtime_id),
        );
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["workingDir"], working_dir);
        assert_eq!(
            container["volumeMounts"][0]["mountPath"], mounted,
            "{working_dir}"
        );
    }
}

/// A warm sandbox stuck waiting (its image cannot be pulled) is listed with the reason,
/// is no claim (a start cold-starts rather than inherit its wait), and once past the start
/// timeout is failed and awaits its replacement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_warm_sandbox_is_no_claim_and_is_replaced_past_the_start_timeout() {
    let (fake, replica, fixture) = cluster(1).await;
    replica.pass().await;
    let warm = replica.warm().await;
    let id = warm[0].runtime_id.clone();
    fake.put(
        PODS,
        pod(
            &format!("sandbox-{id}-x1"),
            &id,
            waiting("ImagePullBackOff", "Back-off pulling image \"agent:nope\""),
        ),
    );
    let pool = &pools(&replica).await[0];
    assert_eq!((pool.starting, pool.failed), (1, 0), "{pool:?}");
    assert!(pool.failures[0].contains("ImagePullBackOff"), "{pool:?}");

    let (started, claimed) = replica
        .sandboxes
        .start(warm[0].spec.clone(), "conv-c".into())
        .await
        .expect("start");
    assert!(!claimed, "a stuck warm sandbox was claimed");
    assert_ne!(started.runtime_id, id);

    let timeout = replica.sandboxes.options().start_timeout.as_millis() as i64;
    fixture.clock.advance(timeout);
    let pass = replica.pass().await;
    assert_eq!(pass.replaced, 0, "{pass:?}");
    assert!(pass.next_heal_ms.is_some(), "{pass:?}");
    let pool = &pools(&replica).await[0];
    assert_eq!(pool.failed, 1, "{pool:?}");
    assert!(
        pool.failures[0].contains("SANDBOX_START_TIMEOUT"),
        "{pool:?}"
    );
    fixture.clock.advance(HEAL_BACKOFF_BASE.as_millis() as i64);
    let pass = replica.pass().await;
    assert_eq!((pass.replaced, pass.created), (1, 1), "{pass:?}");
    assert!(
        fake.object(DEPLOYMENTS, NAMESPACE, &format!("sandbox-{id}"))
            .is_none()
    );
}
