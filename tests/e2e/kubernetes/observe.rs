//! What the driver reads of the cluster: pull failures, unschedulable, crashing and ready
//! pods, and a pod the cluster refuses to create.

use axum::http::Method;
use sandgate_runtime_api::sandboxes::driver::{Observed, SandboxDriver};
use sandgate_store::{Restarts, SandboxState};
use serde_json::json;

use crate::common::fake_kube::{DEPLOYMENTS, PODS, REPLICA_SETS};

use super::*;

#[tokio::test]
async fn observe_reads_pull_failures_unschedulable_crashing_and_ready_pods() {
    let (fake, driver) = start().await;
    fake.put(
        PODS,
        pod(
            "sandbox-pull-7d9f-x1",
            "pull",
            waiting(
                "ImagePullBackOff",
                "Back-off pulling image \"ghcr.io/acme/agent-server:nope\"",
            ),
        ),
    );
    fake.put(
        PODS,
        pod(
            "sandbox-full-7d9f-x2",
            "full",
            json!({
                "phase": "Pending",
                "conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.",
                }],
            }),
        ),
    );
    fake.put(
        PODS,
        pod(
            "sandbox-up-7d9f-x3",
            "up",
            json!({
                "phase": "Running",
                "conditions": [{ "type": "Ready", "status": "True" }],
                "containerStatuses": [{
                    "name": "sandbox", "image": "ghcr.io/acme/agent-server:1.4.2", "imageID": "sha256:1",
                    "ready": true, "restartCount": 0, "started": true,
                    "state": { "running": { "startedAt": "2026-01-01T00:00:05Z" } },
                }],
            }),
        ),
    );
    fake.put(
        PODS,
        pod(
            "sandbox-crash-7d9f-x4",
            "crash",
            json!({
                "phase": "Running",
                "containerStatuses": [{
                    "name": "sandbox", "image": "ghcr.io/acme/agent-server:1.4.2", "imageID": "sha256:1",
                    "ready": false, "restartCount": 5,
                    "state": { "waiting": { "reason": "CrashLoopBackOff",
                        "message": "back-off 2m40s restarting failed container=sandbox" } },
                    "lastState": { "terminated": { "exitCode": 1, "reason": "Error" } },
                }],
            }),
        ),
    );
    fake.put(
        PODS,
        pod(
            "sandbox-new-7d9f-x5",
            "new",
            waiting("ContainerCreating", ""),
        ),
    );
    // A sandbox the caller did not ask about.
    fake.put(
        PODS,
        pod(
            "sandbox-other-7d9f-x6",
            "other",
            waiting("ErrImagePull", "not found"),
        ),
    );
    let records: Vec<_> = ["pull", "full", "up", "crash", "new", "gone"]
        .into_iter()
        .map(|id| sandbox(id, Some("v1_current")))
        .collect();

    let observed = driver.observe(&records).await.expect("observe");

    // The kubelet keeps trying: starting, with the reason (the service calls it failed
    // past the start timeout).
    assert_eq!(
        observed["pull"],
        Observed::new(SandboxState::Starting, Some(
                "image pull failing: ImagePullBackOff: Back-off pulling image \"ghcr.io/acme/agent-server:nope\""
                    .into()
            ))
    );
    assert_eq!(observed["full"].state, SandboxState::Starting);
    let detail = observed["full"].detail.as_deref().expect("a detail");
    assert!(detail.starts_with("unschedulable: "), "{detail}");
    assert!(detail.contains("Insufficient cpu"), "{detail}");
    assert_eq!(observed["up"], Observed::new(SandboxState::Running, None));
    assert_eq!(observed["crash"].state, SandboxState::Starting);
    let detail = observed["crash"].detail.as_deref().expect("a detail");
    assert!(detail.contains("CrashLoopBackOff"), "{detail}");
    assert!(detail.contains("exit code 1"), "{detail}");
    // Its restarts, as the legacy API's restart_count and restart_reasons show them.
    assert_eq!(
        observed["crash"].restarts,
        Restarts {
            count: 5,
            reasons: vec!["Error (exit code 1)".into()],
        }
    );
    assert_eq!(observed["up"].restarts, Restarts::default());
    assert_eq!(observed["new"], Observed::new(SandboxState::Starting, None));
    // Only what was asked about, and nothing for a sandbox without a pod.
    assert_eq!(observed.len(), 5, "{observed:?}");

    // A list of Sandgate's pods; and, for the sandbox without one ("gone"), of its
    // Deployments and ReplicaSets, which say why a pod is missing.
    let requests = fake.requests();
    assert_eq!(requests.len(), 3, "{requests:?}");
    let mut paths: Vec<&str> = requests[1..]
        .iter()
        .map(|request| request.path.as_str())
        .collect();
    paths.sort_unstable();
    assert_eq!(
        paths,
        [
            "/apis/apps/v1/namespaces/sandboxes/deployments",
            "/apis/apps/v1/namespaces/sandboxes/replicasets"
        ]
    );
    assert_eq!(requests[0].method, Method::GET);
    assert_eq!(requests[0].path, "/api/v1/namespaces/sandboxes/pods");
    let query = requests[0].query.as_deref().expect("a query");
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    assert!(
        pairs.contains(&(
            "labelSelector".into(),
            "app.kubernetes.io/managed-by=sandgate".into()
        )),
        "{query}"
    );

    // Nothing live to ask about: no call at all.
    assert!(driver.observe(&[]).await.expect("observe").is_empty());
    assert_eq!(fake.requests().len(), 3);

    // One sandbox (a session's status read): only its pods are listed.
    let one = driver.observe(&records[..1]).await.expect("observe one");
    assert_eq!(one.len(), 1);
    assert_eq!(one["pull"].state, SandboxState::Starting);
    let requests = fake.requests();
    assert_eq!(
        requests.len(),
        4,
        "every sandbox asked about has a pod: one call"
    );
    let query = requests[3].query.as_deref().expect("a query");
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    assert!(
        pairs.contains(&(
            "labelSelector".into(),
            "app.kubernetes.io/managed-by=sandgate,sandgate.dev/runtime-id=pull".into()
        )),
        "{query}"
    );
}

#[tokio::test]
async fn a_pod_the_cluster_refuses_to_create_shows_why() {
    let (fake, driver) = start().await;
    let refused = sandbox("f0rb1d", None);
    let stalled = sandbox("57a11", None);
    let pending = sandbox("n0p0d", None);
    for record in [&refused, &stalled, &pending] {
        driver.create(record, &keys(KEY)).await.expect("create");
    }
    // What the ReplicaSet controller and the Deployment controller write when admission
    // refuses the pod, and after the progress deadline.
    let forbidden = "pods \"sandbox-f0rb1d-5d4f8-\" is forbidden: violates PodSecurity \"restricted:latest\": runAsNonRoot != true";
    fake.put(
        REPLICA_SETS,
        json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {
                "name": "sandbox-f0rb1d-5d4f8", "namespace": NAMESPACE,
                "labels": {"app.kubernetes.io/managed-by": "sandgate", "sandgate.dev/runtime-id": "f0rb1d"},
            },
            "spec": {"selector": {"matchLabels": {"sandgate.dev/runtime-id": "f0rb1d"}}},
            "status": {"replicas": 0, "conditions": [{
                "type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": forbidden,
            }]},
        }),
    );
    let mut deployment = object(&fake, DEPLOYMENTS, "sandbox-57a11");
    deployment["status"] = json!({"conditions": [
        {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
         "message": "ReplicaSet \"sandbox-57a11-6c9\" has timed out progressing."},
    ]});
    fake.put(DEPLOYMENTS, deployment);

    let observed = driver
        .observe(&[refused.clone(), stalled.clone(), pending.clone()])
        .await
        .expect("observe");
    assert_eq!(
        observed["f0rb1d"],
        Observed::new(
            SandboxState::Starting,
            Some(format!(
                "the cluster refuses to create its pod: FailedCreate: {forbidden}"
            ))
        )
    );
    assert_eq!(observed["57a11"].state, SandboxState::Error);
    let detail = observed["57a11"].detail.as_deref().expect("a detail");
    assert!(detail.contains("ProgressDeadlineExceeded"), "{detail}");
    // No pod and nothing said: the stored state stands.
    assert!(!observed.contains_key("n0p0d"), "{observed:?}");
}
