//! The `kubernetes` sandbox driver against a fake API server (one per test): the objects
//! it creates (the session key in a Secret, the restricted Pod Security Standard, every
//! object owned by the Deployment), how it pauses, resumes (a new key, a new pod) and
//! deletes them, how it cleans up a half-made sandbox, and what it reads from pods,
//! Deployments and ReplicaSets. Every object the tests make validates strictly against the
//! Kubernetes schemas and is checked rule by rule against the restricted standard
//! (tests/k8s/check_sandbox_objects.py, with scripts/check-k8s's kubernetes-validate).

use std::collections::BTreeMap;

use axum::http::Method;
use sandgate_runtime_api::sandboxes::driver::{Observed, Refusal, SandboxDriver, SandboxKeys};
use sandgate_runtime_api::sandboxes::kubernetes::{
    KubernetesDriver, KubernetesOptions, PodSecurity,
};
use sandgate_store::{Restarts, SandboxSpec, SandboxState, StoredSandbox};
use serde_json::{Value, json};

use crate::common::fake_kube::{
    CLAIMS, DEPLOYMENTS, FakeKube, INGRESSES, PODS, REPLICA_SETS, SECRETS, SERVICES,
};
use crate::common::{driver_output, repository, tool};
use sandgate_runtime_api::ambient::Clock;

pub(crate) const NAMESPACE: &str = "sandboxes";
pub(crate) const KEY: &str = "session-key-of-the-first-run";
/// The secret key of every sandbox of these tests: a sandbox keeps its own for life.
pub(crate) const SECRET_KEY: &str = "secret-key-of-the-sandbox";

/// The keys a sandbox is started with: `session`, and its one secret key.
pub(crate) fn keys(session: &str) -> SandboxKeys {
    SandboxKeys {
        session: session.to_owned(),
        secret: SECRET_KEY.to_owned(),
    }
}

pub(crate) fn options() -> KubernetesOptions {
    KubernetesOptions {
        namespace: NAMESPACE.into(),
        storage_class: Some("fast-ssd".into()),
        ephemeral_storage: "25Gi".into(),
        port: 8000,
        ingress_class: Some("nginx".into()),
        tls_secret: Some("runtime-wildcard-tls".into()),
        base_url: "runtime.example.com".into(),
        separator: "-".into(),
        pod_security: PodSecurity::Restricted,
    }
}

pub(crate) fn sandbox(runtime_id: &str, pool: Option<&str>) -> StoredSandbox {
    StoredSandbox {
        runtime_id: runtime_id.into(),
        version: 1,
        session_id: None,
        pool: pool.map(str::to_owned),
        claim_key: "claim".into(),
        spec: SandboxSpec {
            image: "ghcr.io/acme/agent-server:1.4.2".into(),
            command: vec!["/usr/local/bin/agent-server".into(), "--port=8000".into()],
            working_dir: "/workspace".into(),
            environment: BTreeMap::from([
                ("LOG_LEVEL".into(), "debug".into()),
                (
                    "OH_WEBHOOKS_0_BASE_URL".into(),
                    "https://app.example.com".into(),
                ),
            ]),
            run_as_user: Some(1000),
            run_as_group: Some(1001),
            fs_group: Some(1002),
            fuse_s3_mount: None,
            resource_factor: None,
        },
        state: SandboxState::Starting,
        status_detail: None,
        key_sha256: "digest".into(),
        key_nonce: "nonce".into(),
        created_at_ms: 0,
        changed_at_ms: 0,
        restarts: Restarts::default(),
        slot_failures: 0,
        personalised: false,
        active_at_ms: 0,
        timeline: None,
    }
}

pub(crate) async fn start() -> (FakeKube, KubernetesDriver) {
    start_with(PodSecurity::Restricted).await
}

async fn start_with(pod_security: PodSecurity) -> (FakeKube, KubernetesDriver) {
    let fake = FakeKube::start().await;
    let options = KubernetesOptions {
        pod_security,
        ..options()
    };
    let driver = KubernetesDriver::with_client(fake.client(), options);
    (fake, driver)
}

/// The reference to the sandbox's Deployment its other objects carry.
fn owner(fake: &FakeKube, runtime_id: &str) -> Value {
    let deployment = object(fake, DEPLOYMENTS, &format!("sandbox-{runtime_id}"));
    json!([{
        "apiVersion": "apps/v1", "kind": "Deployment",
        "name": format!("sandbox-{runtime_id}"),
        "uid": deployment["metadata"]["uid"],
    }])
}

/// The container's `SESSION_API_KEY` entry: from the sandbox's Secret.
fn key_from_secret(runtime_id: &str) -> Value {
    entry_from_secret(runtime_id, "SESSION_API_KEY")
}

/// The container's entry of `name`, read from the sandbox's Secret under that name.
fn entry_from_secret(runtime_id: &str, name: &str) -> Value {
    json!({"name": name, "valueFrom": {"secretKeyRef": {
        "name": format!("sandbox-{runtime_id}-session"), "key": name, "optional": false,
    }}})
}

pub(crate) fn object(fake: &FakeKube, resource: &str, name: &str) -> Value {
    fake.object(resource, NAMESPACE, name)
        .unwrap_or_else(|| panic!("{resource} {name} exists"))
}

/// The entry `name` of a container's `env`.
fn env_entry<'a>(container: &'a Value, name: &str) -> &'a Value {
    container["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|entry| entry["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {container}"))
}

/// The value of `name` in a container's `env`.
fn env_value<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    container["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|entry| entry["name"] == name)
        .and_then(|entry| entry["value"].as_str())
}

fn assert_labels(object: &Value, runtime_id: &str, pool: &str) {
    let labels = &object["metadata"]["labels"];
    assert_eq!(
        labels["app.kubernetes.io/managed-by"], "sandgate",
        "{object}"
    );
    assert_eq!(labels["sandgate.dev/runtime-id"], runtime_id, "{object}");
    assert_eq!(labels["sandgate.dev/pool"], pool, "{object}");
}

/// Every object of the sandbox, by resource: `None` where it is missing.
pub(crate) fn objects_of(fake: &FakeKube, runtime_id: &str) -> Vec<(&'static str, Option<Value>)> {
    let name = format!("sandbox-{runtime_id}");
    vec![
        (DEPLOYMENTS, fake.object(DEPLOYMENTS, NAMESPACE, &name)),
        (
            SECRETS,
            fake.object(SECRETS, NAMESPACE, &format!("{name}-session")),
        ),
        (SERVICES, fake.object(SERVICES, NAMESPACE, &name)),
        (INGRESSES, fake.object(INGRESSES, NAMESPACE, &name)),
        (
            CLAIMS,
            fake.object(CLAIMS, NAMESPACE, &format!("{name}-workspace")),
        ),
    ]
}

#[tokio::test]
async fn create_makes_the_deployment_service_ingress_and_claim() {
    let (fake, driver) = start().await;
    let record = sandbox("a1b2c3", Some("v1_current"));
    driver.create(&record, &keys(KEY)).await.expect("create");

    let deployment = object(&fake, DEPLOYMENTS, "sandbox-a1b2c3");
    assert_labels(&deployment, "a1b2c3", "v1_current");
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(spec["strategy"]["type"], "Recreate");
    assert_eq!(spec["revisionHistoryLimit"], 1);
    assert_eq!(
        spec["selector"]["matchLabels"]["sandgate.dev/runtime-id"],
        "a1b2c3"
    );
    assert_labels(&spec["template"], "a1b2c3", "v1_current");
    let pod = &spec["template"]["spec"];
    assert_eq!(
        pod["securityContext"],
        json!({"runAsUser": 1000, "runAsGroup": 1001, "fsGroup": 1002, "runAsNonRoot": true,
               "seccompProfile": {"type": "RuntimeDefault"}})
    );
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "ghcr.io/acme/agent-server:1.4.2");
    assert_eq!(
        container["command"],
        json!(["/usr/local/bin/agent-server", "--port=8000"])
    );
    assert_eq!(container["workingDir"], "/workspace");
    assert_eq!(
        container["securityContext"],
        json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}})
    );
    // The key reaches the pod from the sandbox's Secret, never in clear in the Deployment
    // (nor so in its ReplicaSets and pods, which the `view` role reads).
    let key_entry = env_entry(container, "SESSION_API_KEY");
    assert_eq!(key_entry, &key_from_secret("a1b2c3"));
    assert_eq!(
        env_entry(container, "OH_SECRET_KEY"),
        &entry_from_secret("a1b2c3", "OH_SECRET_KEY")
    );
    assert!(!deployment.to_string().contains(SECRET_KEY), "{deployment}");
    assert!(!deployment.to_string().contains(KEY), "{deployment}");
    let secret = object(&fake, SECRETS, "sandbox-a1b2c3-session");
    assert_labels(&secret, "a1b2c3", "v1_current");
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(
        secret["stringData"],
        json!({"SESSION_API_KEY": KEY, "OH_SECRET_KEY": SECRET_KEY})
    );
    assert_eq!(env_value(container, "LOG_LEVEL"), Some("debug"));
    assert_eq!(
        env_value(container, "OH_WEBHOOKS_0_BASE_URL"),
        Some("https://app.example.com")
    );
    assert_eq!(container["ports"][0]["containerPort"], 8000);
    let resources = &container["resources"];
    assert_eq!(resources["requests"]["ephemeral-storage"], "25Gi");
    assert_eq!(resources["limits"]["ephemeral-storage"], "25Gi");
    assert_eq!(resources["requests"]["cpu"], "1000m");
    assert_eq!(resources["requests"]["memory"], "2048Mi");
    assert_eq!(resources["limits"]["cpu"], "2000m");
    assert_eq!(resources["limits"]["memory"], "4096Mi");
    assert_eq!(
        pod["volumes"],
        json!([{"name": "workspace",
                "persistentVolumeClaim": {"claimName": "sandbox-a1b2c3-workspace"}}])
    );
    assert_eq!(
        container["volumeMounts"],
        json!([{"name": "workspace", "mountPath": "/workspace"}])
    );
    assert_eq!(pod["automountServiceAccountToken"], false);

    let claim = object(&fake, CLAIMS, "sandbox-a1b2c3-workspace");
    assert_labels(&claim, "a1b2c3", "v1_current");
    assert_eq!(
        claim["spec"],
        json!({"accessModes": ["ReadWriteOnce"], "storageClassName": "fast-ssd",
               "resources": {"requests": {"storage": "10Gi"}}})
    );

    let service = object(&fake, SERVICES, "sandbox-a1b2c3");
    assert_labels(&service, "a1b2c3", "v1_current");
    assert_eq!(service["spec"]["type"], "ClusterIP");
    assert_eq!(
        service["spec"]["ports"],
        json!([{"name": "http", "port": 80, "targetPort": 8000}])
    );
    assert_eq!(
        service["spec"]["selector"],
        json!({"app.kubernetes.io/managed-by": "sandgate", "sandgate.dev/runtime-id": "a1b2c3"})
    );

    let ingress = object(&fake, INGRESSES, "sandbox-a1b2c3");
    assert_labels(&ingress, "a1b2c3", "v1_current");
    assert_eq!(ingress["spec"]["ingressClassName"], "nginx");
    assert_eq!(
        ingress["spec"]["tls"],
        json!([{"hosts": ["a1b2c3-runtime.example.com"], "secretName": "runtime-wildcard-tls"}])
    );
    assert_eq!(
        ingress["spec"]["rules"],
        json!([{"host": "a1b2c3-runtime.example.com", "http": {"paths": [{
            "path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "sandbox-a1b2c3", "port": {"number": 80}}}
        }]}}])
    );

    // Every object but the Deployment is its dependent: deleting it deletes them.
    let owned_by = owner(&fake, "a1b2c3");
    assert!(owned_by[0]["uid"].is_string(), "{owned_by}");
    for dependent in [&secret, &claim, &service, &ingress] {
        assert_eq!(
            dependent["metadata"]["ownerReferences"], owned_by,
            "{dependent}"
        );
    }
    assert!(deployment["metadata"].get("ownerReferences").is_none());

    // Five creates, each a JSON POST into the sandbox namespace; the Deployment first,
    // whose uid the others name.
    let requests = fake.requests();
    assert_eq!(requests.len(), 5, "{requests:?}");
    assert!(requests[0].path.ends_with("/deployments"), "{requests:?}");
    for request in &requests {
        assert_eq!(request.method, Method::POST);
        assert!(
            request.path.contains("/namespaces/sandboxes/"),
            "{request:?}"
        );
        assert_eq!(request.content_type.as_deref(), Some("application/json"));
    }
}

#[tokio::test]
async fn a_cold_sandbox_is_labelled_cold_and_its_resources_scale_with_its_factor() {
    let (fake, driver) = start().await;
    let mut record = sandbox("c0ffee", None);
    record.spec.resource_factor = Some(2.0);
    record.spec.run_as_user = None;
    record.spec.run_as_group = None;
    record.spec.fs_group = None;
    driver.create(&record, &keys(KEY)).await.expect("create");

    for (resource, found) in objects_of(&fake, "c0ffee") {
        assert_labels(
            &found.unwrap_or_else(|| panic!("{resource}")),
            "c0ffee",
            "cold",
        );
    }
    let deployment = object(&fake, DEPLOYMENTS, "sandbox-c0ffee");
    let pod = &deployment["spec"]["template"]["spec"];
    // No user asked: the image's, which must not be root.
    assert_eq!(
        pod["securityContext"],
        json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}})
    );
    let resources = &pod["containers"][0]["resources"];
    assert_eq!(resources["requests"]["cpu"], "2000m");
    assert_eq!(resources["requests"]["memory"], "4096Mi");
    assert_eq!(resources["limits"]["cpu"], "4000m");
    assert_eq!(resources["limits"]["memory"], "8192Mi");
    // The scratch disk does not scale: it is the installation's setting.
    assert_eq!(resources["requests"]["ephemeral-storage"], "25Gi");
}

#[tokio::test]
async fn what_the_pod_security_level_refuses_and_allows() {
    let mut root = sandbox("r007", None).spec;
    root.run_as_user = Some(0);
    let mut fuse = sandbox("f05e", None).spec;
    fuse.fuse_s3_mount = Some(true);
    let plain = sandbox("p1a1n", None).spec;

    let (_, restricted) = start_with(PodSecurity::Restricted).await;
    let refusal = restricted.admit(&root).expect_err("root");
    assert_eq!(refusal.field, "run_as_user");
    assert!(
        refusal.message.contains("SANDBOX_POD_SECURITY=baseline"),
        "{refusal:?}"
    );
    let Refusal {
        field,
        input,
        message,
    } = restricted.admit(&fuse).expect_err("fuse");
    assert_eq!(input, json!(true));
    assert_eq!(field, "fuse_s3_mount");
    assert!(
        message.contains("SANDBOX_POD_SECURITY=privileged"),
        "{message}"
    );
    assert_eq!(restricted.admit(&plain), Ok(()));

    let (fake, baseline) = start_with(PodSecurity::Baseline).await;
    assert_eq!(baseline.admit(&root), Ok(()));
    assert_eq!(
        baseline.admit(&fuse).map_err(|refusal| refusal.field),
        Err("fuse_s3_mount")
    );
    let mut record = sandbox("r007", None);
    record.spec = root;
    baseline.create(&record, &keys(KEY)).await.expect("create");
    let pod = object(&fake, DEPLOYMENTS, "sandbox-r007")["spec"]["template"]["spec"].clone();
    assert_eq!(pod["securityContext"]["runAsUser"], 0);
    assert!(
        pod["securityContext"].get("runAsNonRoot").is_none(),
        "{pod}"
    );
    assert_eq!(
        pod["containers"][0]["securityContext"],
        json!({"allowPrivilegeEscalation": false})
    );

    let (_, privileged) = start_with(PodSecurity::Privileged).await;
    assert_eq!(privileged.admit(&fuse), Ok(()));
}

#[tokio::test]
async fn a_fuse_s3_sandbox_runs_privileged_with_an_empty_dir_and_no_claim() {
    let (fake, driver) = start_with(PodSecurity::Privileged).await;
    let mut record = sandbox("f05e", Some("s3"));
    record.spec.fuse_s3_mount = Some(true);
    driver.create(&record, &keys(KEY)).await.expect("create");

    assert!(fake.names(CLAIMS, NAMESPACE).is_empty());
    let deployment = object(&fake, DEPLOYMENTS, "sandbox-f05e");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"],
        json!([{"name": "workspace", "emptyDir": {}}])
    );
    assert_eq!(
        pod["containers"][0]["volumeMounts"][0]["mountPath"],
        "/workspace"
    );
    // /dev/fuse and CAP_SYS_ADMIN come with a privileged container.
    assert_eq!(
        pod["containers"][0]["securityContext"],
        json!({"privileged": true})
    );
    assert!(fake.object(SERVICES, NAMESPACE, "sandbox-f05e").is_some());
    assert!(fake.object(INGRESSES, NAMESPACE, "sandbox-f05e").is_some());
}

#[tokio::test]
async fn pause_keeps_the_claim_and_resume_restarts_on_the_original_image_with_a_new_key() {
    let (fake, driver) = start().await;
    let record = sandbox("9a05e", Some("v1_current"));
    driver.create(&record, &keys(KEY)).await.expect("create");

    driver.pause(&record).await.expect("pause");
    let paused = object(&fake, DEPLOYMENTS, "sandbox-9a05e");
    assert_eq!(paused["spec"]["replicas"], 0);
    assert!(
        fake.object(CLAIMS, NAMESPACE, "sandbox-9a05e-workspace")
            .is_some()
    );
    let pause = fake.requests().pop().expect("the pause request");
    assert_eq!(pause.method, Method::PATCH);
    assert_eq!(
        pause.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert_eq!(pause.body, Some(json!({"spec": {"replicas": 0}})));

    // The record a later start would carry may name another image: the workload keeps its own.
    let mut resumed_record = record.clone();
    resumed_record.spec.image = "ghcr.io/acme/agent-server:2.0.0".into();
    driver
        .resume(&resumed_record, &keys("session-key-of-the-second-run"))
        .await
        .expect("resume");
    let resumed = object(&fake, DEPLOYMENTS, "sandbox-9a05e");
    assert_eq!(resumed["spec"]["replicas"], 1);
    let containers = resumed["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 1, "{containers:?}");
    let container = &containers[0];
    assert_eq!(container["image"], "ghcr.io/acme/agent-server:1.4.2");
    // The new key is in the Secret; the pod template names the key's version, so the
    // Deployment starts a new pod, which reads it.
    let secret = object(&fake, SECRETS, "sandbox-9a05e-session");
    assert_eq!(
        secret["stringData"],
        json!({"SESSION_API_KEY": "session-key-of-the-second-run", "OH_SECRET_KEY": SECRET_KEY}),
        "a new session key beside the secret key the sandbox keeps for life"
    );
    assert_eq!(
        resumed["spec"]["template"]["metadata"]["annotations"]["sandgate.dev/session-key-version"],
        resumed_record.key_nonce.as_str()
    );
    assert!(!resumed.to_string().contains("session-key-of"), "{resumed}");
    let key_entry = env_entry(container, "SESSION_API_KEY");
    assert_eq!(key_entry, &key_from_secret("9a05e"));
    assert_eq!(
        env_entry(container, "OH_SECRET_KEY"),
        &entry_from_secret("9a05e", "OH_SECRET_KEY")
    );
    assert_eq!(env_value(container, "LOG_LEVEL"), Some("debug"));
    assert_eq!(container["env"].as_array().expect("env").len(), 4);
    assert!(
        fake.object(CLAIMS, NAMESPACE, "sandbox-9a05e-workspace")
            .is_some()
    );
    let requests = fake.requests();
    let secret_patch = &requests[requests.len() - 2];
    assert_eq!(secret_patch.method, Method::PATCH);
    assert!(
        secret_patch
            .path
            .ends_with("/secrets/sandbox-9a05e-session")
    );
    let resume = requests.last().expect("the resume request").clone();
    assert_eq!(resume.method, Method::PATCH);
    assert_eq!(
        resume.content_type.as_deref(),
        Some("application/strategic-merge-patch+json")
    );
    let body = resume.body.expect("a patch body").to_string();
    assert!(!body.contains("image"), "{body}");
}

#[tokio::test]
async fn delete_removes_that_sandboxs_objects_and_leaves_the_others() {
    let (fake, driver) = start().await;
    let doomed = sandbox("dead01", Some("v1_current"));
    let kept = sandbox("a11ve", Some("v1_current"));
    driver
        .create(&doomed, &keys(KEY))
        .await
        .expect("create doomed");
    driver
        .create(&kept, &keys("other-key"))
        .await
        .expect("create kept");

    driver.delete(&doomed.runtime_id).await.expect("delete");
    for (resource, found) in objects_of(&fake, "dead01") {
        assert!(found.is_none(), "{resource} of the deleted sandbox is left");
    }
    for (resource, found) in objects_of(&fake, "a11ve") {
        assert!(found.is_some(), "{resource} of the other sandbox is gone");
    }
    let deletes: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|request| request.method == Method::DELETE)
        .collect();
    assert_eq!(deletes.len(), 5, "{deletes:?}");
    for request in &deletes {
        assert!(
            request.path.ends_with("/sandbox-dead01")
                || request.path.ends_with("/sandbox-dead01-workspace")
                || request.path.ends_with("/sandbox-dead01-session"),
            "{request:?}"
        );
        // Dependents (the ReplicaSet, the pod) are deleted too, not orphaned.
        assert_eq!(
            request.body.as_ref().map(|body| &body["propagationPolicy"]),
            Some(&json!("Background"))
        );
    }

    // Deleting what is gone already is not an error.
    driver
        .delete(&doomed.runtime_id)
        .await
        .expect("delete again");
}

/// A pod of `runtime_id` with `status`, as the kubelet and the scheduler leave it.
pub(crate) fn pod(name: &str, runtime_id: &str, status: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {
                "app.kubernetes.io/managed-by": "sandgate",
                "sandgate.dev/runtime-id": runtime_id,
                "sandgate.dev/pool": "v1_current",
            },
        },
        "spec": { "containers": [{ "name": "sandbox", "image": "ghcr.io/acme/agent-server:1.4.2" }] },
        "status": status,
    })
}

pub(crate) fn waiting(reason: &str, message: &str) -> Value {
    json!({
        "phase": "Pending",
        "containerStatuses": [{
            "name": "sandbox", "image": "ghcr.io/acme/agent-server:1.4.2", "imageID": "",
            "ready": false, "restartCount": 0,
            "state": { "waiting": { "reason": reason, "message": message } },
        }],
    })
}

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
async fn a_half_made_sandbox_is_removed_and_errors_name_the_object() {
    let (fake, driver) = start().await;
    let record = sandbox("p4r71a1", Some("v1_current"));
    fake.fail_next(
        Method::POST,
        INGRESSES,
        422,
        "Invalid",
        "Ingress.networking.k8s.io \"sandbox-p4r71a1\" is invalid: spec.rules[0].host: Invalid value",
    );

    let err = driver
        .create(&record, &keys(KEY))
        .await
        .expect_err("the ingress is refused");
    let message = err.to_string();
    assert!(
        message.contains("Ingress sandboxes/sandbox-p4r71a1"),
        "{message}"
    );
    assert!(message.contains("Invalid (422)"), "{message}");
    assert!(
        message.contains("the half-made sandbox was removed"),
        "{message}"
    );
    assert!(!message.contains(KEY), "{message}");
    // Nothing is left to wait for a retry that may never come.
    for (resource, found) in objects_of(&fake, "p4r71a1") {
        assert!(
            found.is_none(),
            "{resource} of the half-made sandbox is left"
        );
    }

    // The cleanup fails too (etcd is electing a leader): the error says the sweep retries,
    // and a retry of the create finds the Deployment in place (409), reads its uid and
    // makes the rest.
    fake.fail_next(
        Method::POST,
        SERVICES,
        500,
        "InternalError",
        "etcdserver: request timed out",
    );
    fake.fail_next(
        Method::DELETE,
        DEPLOYMENTS,
        500,
        "InternalError",
        "etcdserver: leader changed",
    );
    let message = driver
        .create(&record, &keys(KEY))
        .await
        .expect_err("the service fails")
        .to_string();
    assert!(message.contains("InternalError (500)"), "{message}");
    assert!(message.contains("the orphan sweep retries"), "{message}");
    assert!(
        fake.object(DEPLOYMENTS, NAMESPACE, "sandbox-p4r71a1")
            .is_some()
    );
    driver.create(&record, &keys(KEY)).await.expect("retry");
    for (resource, found) in objects_of(&fake, "p4r71a1") {
        let found = found.unwrap_or_else(|| panic!("{resource} missing after the retry"));
        if resource != DEPLOYMENTS {
            assert_eq!(
                found["metadata"]["ownerReferences"],
                owner(&fake, "p4r71a1")
            );
        }
    }
    driver
        .create(&record, &keys(KEY))
        .await
        .expect("a third create");
    assert_eq!(fake.names(DEPLOYMENTS, NAMESPACE), ["sandbox-p4r71a1"]);

    // A sandbox the cluster lost: the error names the object and the API's reason.
    let err = driver
        .pause(&sandbox("l057", None))
        .await
        .expect_err("nothing to pause");
    assert_eq!(
        err.to_string(),
        "cannot patch Deployment sandboxes/sandbox-l057: NotFound (404): deployments.apps \"sandbox-l057\" not found"
    );
}

#[tokio::test]
async fn resuming_a_sandbox_an_older_release_made_moves_its_key_into_a_secret() {
    let (fake, driver) = start().await;
    let record = sandbox("01d", None);
    driver.create(&record, &keys(KEY)).await.expect("create");
    // As an older release left it: the key in clear in the pod template, no secret key,
    // no Secret.
    let mut deployment = object(&fake, DEPLOYMENTS, "sandbox-01d");
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array_mut()
        .expect("env");
    env.retain(|entry| entry["name"] != "OH_SECRET_KEY");
    for entry in env {
        if entry["name"] == "SESSION_API_KEY" {
            *entry = json!({"name": "SESSION_API_KEY", "value": KEY});
        }
    }
    fake.put(DEPLOYMENTS, deployment);
    fake.remove(SECRETS, NAMESPACE, "sandbox-01d-session");

    driver
        .resume(&record, &keys("the-new-key"))
        .await
        .expect("resume");
    let secret = object(&fake, SECRETS, "sandbox-01d-session");
    assert_eq!(
        secret["stringData"],
        json!({"SESSION_API_KEY": "the-new-key", "OH_SECRET_KEY": SECRET_KEY})
    );
    assert_eq!(secret["metadata"]["ownerReferences"], owner(&fake, "01d"));
    let resumed = object(&fake, DEPLOYMENTS, "sandbox-01d");
    assert!(!resumed.to_string().contains(KEY), "{resumed}");
    let container = &resumed["spec"]["template"]["spec"]["containers"][0];
    let key_entry = env_entry(container, "SESSION_API_KEY");
    assert_eq!(key_entry, &key_from_secret("01d"));
    // (Added by the patch, with the `"value": null` that removes a value where there is one.)
    assert_eq!(
        env_entry(container, "OH_SECRET_KEY")["valueFrom"],
        entry_from_secret("01d", "OH_SECRET_KEY")["valueFrom"],
        "a sandbox made before secret keys gets one at its resume"
    );
    never_read_a_secret(&fake);
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

/// The real binary with `--sandbox-driver kubernetes`, finding the (fake) cluster through
/// its kubeconfig: a start creates the sandbox's objects before it answers, a pause scales
/// it to zero, and the URL answered is the Ingress's host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_drives_the_cluster_its_kubeconfig_names() {
    let kube = FakeKube::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"http://{}\"}}\nusers:\n- name: fake\n  user: {{}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: fake}}\ncurrent-context: fake\n",
            kube.address
        ),
    )
    .expect("kubeconfig");
    let data = dir.path().join("data");
    let args: Vec<String> = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().expect("utf-8"),
        "--default-api-key",
        crate::common::RUNTIME_KEY,
        "--sandbox-driver",
        "kubernetes",
        "--sandbox-namespace",
        NAMESPACE,
        "--storage-class",
        "fast-ssd",
        "--runtime-base-url",
        "runtime.example.com",
        "--runtime-disable-ssl",
        "false",
    ]
    .map(str::to_owned)
    .to_vec();
    let kubeconfig = kubeconfig.display().to_string();
    let sandgate =
        crate::common::SandgateProcess::spawn(&args, &[("KUBECONFIG", &kubeconfig)]).await;
    let client = reqwest::Client::new();

    let started: Value = client
        .post(sandgate.url("/start"))
        .header("x-api-key", crate::common::RUNTIME_KEY)
        .json(&json!({
            "image": "ghcr.io/acme/agent-server:2.0", "command": ["/agent"],
            "working_dir": "/workspace", "environment": {}, "session_id": "conv-k8s",
        }))
        .send()
        .await
        .expect("start")
        .json()
        .await
        .expect("JSON");
    let id = started["runtime_id"].as_str().expect("runtime_id");
    assert_eq!(started["url"], format!("https://{id}-runtime.example.com"));
    let name = format!("sandbox-{id}");
    let deployment = kube
        .object(DEPLOYMENTS, NAMESPACE, &name)
        .expect("deployment created");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "ghcr.io/acme/agent-server:2.0"
    );
    assert!(kube.object(INGRESSES, NAMESPACE, &name).is_some());
    let key = started["session_api_key"].as_str().expect("key");
    assert!(!deployment.to_string().contains(key), "{deployment}");
    let secret = kube
        .object(SECRETS, NAMESPACE, &format!("{name}-session"))
        .expect("the key's Secret");
    assert_eq!(secret["stringData"]["SESSION_API_KEY"], key);

    // The pod restarted twice (out of memory): the legacy fields the SDK logs say so.
    kube.put(
        PODS,
        pod(
            &format!("{name}-7d9f-x1"),
            id,
            json!({
                "phase": "Running",
                "containerStatuses": [{
                    "name": "sandbox", "image": "ghcr.io/acme/agent-server:2.0", "imageID": "",
                    "ready": true, "restartCount": 2, "started": true,
                    "state": { "running": { "startedAt": "2026-01-01T00:03:00Z" } },
                    "lastState": { "terminated": { "exitCode": 137, "reason": "OOMKilled" } },
                }],
            }),
        ),
    );
    let session: Value = client
        .get(sandgate.url("/sessions/conv-k8s"))
        .header("x-api-key", crate::common::RUNTIME_KEY)
        .send()
        .await
        .expect("session")
        .json()
        .await
        .expect("JSON");
    assert_eq!(session["pod_status"], "ready", "{session}");
    assert_eq!(session["restart_count"], 2, "{session}");
    assert_eq!(
        session["restart_reasons"],
        json!(["OOMKilled (exit code 137)"])
    );

    // Root, under the default restricted standard: refused before anything is made.
    let refused = client
        .post(sandgate.url("/start"))
        .header("x-api-key", crate::common::RUNTIME_KEY)
        .json(&json!({
            "image": "ghcr.io/acme/agent-server:2.0", "command": ["/agent"],
            "working_dir": "/workspace", "environment": {}, "session_id": "conv-root",
            "run_as_user": 0,
        }))
        .send()
        .await
        .expect("start as root");
    assert_eq!(refused.status(), 422);
    let body: Value = refused.json().await.expect("JSON");
    assert_eq!(
        body["detail"][0]["loc"],
        json!(["body", "run_as_user"]),
        "{body}"
    );
    assert_eq!(
        body["detail"][0]["input"], 0,
        "the input echoed, as FastAPI does"
    );
    assert!(
        body["detail"][0]["msg"]
            .as_str()
            .is_some_and(|msg| msg.contains("SANDBOX_POD_SECURITY")),
        "{body}"
    );
    assert_eq!(kube.names(DEPLOYMENTS, NAMESPACE).len(), 1);

    let paused = client
        .post(sandgate.url("/pause"))
        .header("x-api-key", crate::common::RUNTIME_KEY)
        .json(&json!({ "runtime_id": id }))
        .send()
        .await
        .expect("pause");
    assert_eq!(paused.status(), 200);
    let deployment = kube
        .object(DEPLOYMENTS, NAMESPACE, &name)
        .expect("deployment kept");
    assert_eq!(deployment["spec"]["replicas"], 0);
}

/// Every object the driver sends in the tests' shapes (a warm sandbox with its user, a cold
/// one without, resumed, paused; a FUSE one under `privileged`) validates strictly against
/// the Kubernetes 1.32 and 1.37 schemas, and every pod but the FUSE one meets the
/// restricted Pod Security Standard, rule by rule.
#[tokio::test]
async fn the_objects_sent_validate_strictly_and_meet_the_restricted_standard() {
    let python = tool("k8s-venv/bin/python", "scripts/check-k8s");
    let mut objects = Vec::new();

    let (fake, driver) = start().await;
    let warm = sandbox("a1b2c3", Some("v1_current"));
    let mut cold = sandbox("c0ffee", None);
    cold.spec.run_as_user = None;
    cold.spec.run_as_group = None;
    cold.spec.fs_group = None;
    cold.spec.resource_factor = Some(2.0);
    for record in [&warm, &cold] {
        driver.create(record, &keys(KEY)).await.expect("create");
    }
    driver.pause(&cold).await.expect("pause");
    driver
        .resume(&cold, &keys("a-new-key"))
        .await
        .expect("resume");
    driver.pause(&warm).await.expect("pause");
    driver.delete(&warm.runtime_id).await.expect("delete");
    driver
        .create(&warm, &keys(KEY))
        .await
        .expect("create again");
    never_read_a_secret(&fake);
    objects.extend(fake.all());

    let (fake, driver) = start_with(PodSecurity::Privileged).await;
    let mut fuse = sandbox("f05e", Some("s3"));
    fuse.spec.fuse_s3_mount = Some(true);
    driver.create(&fuse, &keys(KEY)).await.expect("create");
    objects.extend(fake.all());
    let kinds: std::collections::BTreeSet<String> = objects
        .iter()
        .filter_map(|object| object["kind"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        [
            "Deployment",
            "Ingress",
            "PersistentVolumeClaim",
            "Secret",
            "Service"
        ]
    );

    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), Value::Array(objects).to_string()).expect("write");
    let mut checker = tokio::process::Command::new(python);
    checker
        .arg(repository("tests/k8s/check_sandbox_objects.py"))
        .arg(file.path())
        .args(["--privileged", "sandbox-f05e"]);
    let report = driver_output(checker, String::new).await;
    assert!(report.contains("0 problems"), "{report}");
}

/// A replica whose reconciler drives the fake cluster, its clock `since_made_ms` past the
/// time the fake stamps on the objects it creates (2026-01-01T00:00:xx).
async fn sweeping(
    since_made_ms: i64,
) -> (
    FakeKube,
    std::sync::Arc<KubernetesDriver>,
    crate::warm_pools::Replica,
    crate::warm_pools::Fixture,
) {
    let fake = FakeKube::start().await;
    let driver = std::sync::Arc::new(KubernetesDriver::with_client(fake.client(), options()));
    let fixture = crate::warm_pools::Fixture::new(crate::common::Backend::embedded(), 0);
    let replica = fixture.replica_with(
        crate::store_conformance::open(&fixture.backend).await,
        driver.clone(),
    );
    let made_ms = 1_767_225_600_000;
    fixture
        .clock
        .advance(made_ms + since_made_ms - fixture.clock.now_ms());
    (fake, driver, replica, fixture)
}

/// The reconciler's orphan sweep: Sandgate's workloads that no record names are deleted
/// once older than the grace period; a sandbox with a record, and a young orphan (a start
/// that may still be writing), are left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orphan_sweep_deletes_workloads_no_record_names() {
    let (fake, driver, replica, fixture) = sweeping(5 * 60_000).await;

    let (kept, _) = replica
        .sandboxes
        .start(sandbox("unused", None).spec, "conv-kept".into())
        .await
        .expect("start");
    driver
        .create(&sandbox("0rphan", None), &keys(KEY))
        .await
        .expect("an orphan's objects");

    // Five minutes old: too young to be called an orphan.
    let pass = replica.reconciler.pass().await.expect("pass");
    assert_eq!(pass.orphans, 0);
    assert!(
        fake.object(DEPLOYMENTS, NAMESPACE, "sandbox-0rphan")
            .is_some()
    );

    // An hour on, the next sweep deletes every object of the orphan, and only those.
    fixture.clock.advance(3_600_000);
    let pass = replica.reconciler.pass().await.expect("pass");
    assert_eq!(pass.orphans, 1, "{pass:?}");
    for (resource, found) in objects_of(&fake, "0rphan") {
        assert!(found.is_none(), "{resource} of the orphan is left");
    }
    for (resource, found) in objects_of(&fake, &kept.runtime_id) {
        assert!(
            found.is_some(),
            "{resource} of a recorded sandbox was swept"
        );
    }
    never_read_a_secret(&fake);
}

/// The driver writes Secrets and never reads one: the chart's Role grants it create, patch
/// and delete on them only (the sandbox namespace also holds the wildcard certificate).
fn never_read_a_secret(fake: &FakeKube) {
    let reads: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|request| request.method == Method::GET && request.path.contains("/secrets"))
        .collect();
    assert!(reads.is_empty(), "{reads:?}");
}

/// A sweep that would delete most of what the platform runs deletes nothing: a Sandgate
/// pointed at an empty (or another installation's) store must not empty the namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orphan_sweep_refuses_to_delete_most_of_the_namespace() {
    let (fake, driver, replica, _fixture) = sweeping(3_600_000).await;
    let orphans = sandgate_runtime_api::sandboxes::reconciler::ORPHAN_SWEEP_GUARD + 1;
    for i in 0..orphans {
        driver
            .create(&sandbox(&format!("0rphan{i}"), None), &keys(KEY))
            .await
            .expect("an orphan's objects");
    }
    let pass = replica.reconciler.pass().await.expect("pass");
    assert_eq!(pass.orphans, 0);
    assert_eq!(fake.names(DEPLOYMENTS, NAMESPACE).len(), orphans);
}
