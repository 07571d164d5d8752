//! The `kubernetes` sandbox driver against a fake API server (one per test): the objects
//! it creates (the session key in a Secret, the restricted Pod Security Standard, every
//! object owned by the Deployment), how it pauses, resumes (a new key, a new pod) and
//! deletes them, how it cleans up a half-made sandbox, and what it reads from pods,
//! Deployments and ReplicaSets. Every object the tests make validates strictly against the
//! Kubernetes schemas and is checked rule by rule against the restricted standard
//! (tests/k8s/check_sandbox_objects.py, with scripts/check-k8s's kubernetes-validate).
//!
//! By concern: the objects a sandbox is made of (`objects.rs`), pause, resume and delete
//! (`lifecycle.rs`), what the driver reads of pods and the cluster's refusals
//! (`observe.rs`), `serve` on a cluster (`serve.rs`) and the orphan sweep (`orphans.rs`).

mod lifecycle;
mod objects;
mod observe;
mod orphans;
mod serve;

use std::collections::BTreeMap;

use axum::http::Method;
use sandgate_runtime_api::sandboxes::driver::SandboxKeys;
use sandgate_runtime_api::sandboxes::kubernetes::{
    KubernetesDriver, KubernetesOptions, PodSecurity,
};
use sandgate_store::{Restarts, SandboxSpec, SandboxState, StoredSandbox};
use serde_json::{Value, json};

use crate::common::fake_kube::{CLAIMS, DEPLOYMENTS, FakeKube, INGRESSES, SECRETS, SERVICES};

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
        source_address: None,
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
