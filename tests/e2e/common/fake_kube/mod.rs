//! A fake Kubernetes API server on port 0, for the `kubernetes` sandbox driver's tests.
//! It keeps objects in memory by (resource, namespace, name) and speaks the subset of the
//! API the driver uses, with the real API's status codes and `Status` bodies: create (409
//! `AlreadyExists`), get, list with equality label selectors, merge and strategic merge
//! patches, and delete (404 `NotFound`). Anything else is answered 404 with a message
//! naming the request, so that a test fails saying what the driver asked for. Every request
//! is recorded, and tests put Pods in place of the kubelet and scheduler.
//!
//! This file holds the server, its store and what tests call on it, and the `Status`
//! answers; the routing of requests, create and list are in `api.rs`, the patches in
//! `patch.rs`.

mod api;
mod patch;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use api::handle;

pub const DEPLOYMENTS: &str = "apps/v1/deployments";
pub const SERVICES: &str = "v1/services";
pub const INGRESSES: &str = "networking.k8s.io/v1/ingresses";
pub const CLAIMS: &str = "v1/persistentvolumeclaims";
pub const PODS: &str = "v1/pods";
pub const SECRETS: &str = "v1/secrets";
pub const REPLICA_SETS: &str = "apps/v1/replicasets";

/// The resources the fake serves, with their kinds.
const KINDS: &[(&str, &str)] = &[
    (DEPLOYMENTS, "Deployment"),
    (SERVICES, "Service"),
    (INGRESSES, "Ingress"),
    (CLAIMS, "PersistentVolumeClaim"),
    (PODS, "Pod"),
    (SECRETS, "Secret"),
    (REPLICA_SETS, "ReplicaSet"),
];

/// List fields that a strategic merge patch merges item by item, by this key (as the
/// real API's `patchMergeKey`s); any other list is replaced whole.
const MERGE_KEYS: &[(&str, &str)] = &[
    ("containers", "name"),
    ("initContainers", "name"),
    ("env", "name"),
    ("volumes", "name"),
    ("ports", "containerPort"),
    ("volumeMounts", "mountPath"),
];

/// One request, as the fake received it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: Method,
    pub path: String,
    pub query: Option<String>,
    pub content_type: Option<String>,
    pub body: Option<Value>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    resource: String,
    namespace: String,
    name: String,
}

/// A failure a test arranged: the next matching request gets it instead of an answer.
struct Injected {
    method: Method,
    resource: String,
    code: u16,
    reason: String,
    message: String,
}

#[derive(Default)]
struct Store {
    objects: BTreeMap<Key, Value>,
    requests: Vec<Recorded>,
    injected: Vec<Injected>,
    /// Bumped by every write, as the API server's `resourceVersion`.
    version: u64,
}

type Shared = Arc<Mutex<Store>>;

/// The fake API server; stops when dropped.
pub struct FakeKube {
    pub address: SocketAddr,
    store: Shared,
    task: JoinHandle<()>,
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeKube {
    pub async fn start() -> Self {
        let store = Shared::default();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let router = Router::new().fallback(handle).with_state(store.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, router)
                .await
                .expect("fake kube serves");
        });
        Self {
            address,
            store,
            task,
        }
    }

    /// A client of this server: plain http, no credentials.
    pub fn client(&self) -> kube::Client {
        let url = format!("http://{}", self.address)
            .parse()
            .expect("server url");
        kube::Client::try_from(kube::Config::new(url)).expect("kube client")
    }

    fn lock(&self) -> MutexGuard<'_, Store> {
        self.store.lock().expect("fake kube store")
    }

    /// The stored object, as the API would answer it.
    pub fn object(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        self.lock()
            .objects
            .get(&key(resource, namespace, name))
            .cloned()
    }

    /// The names of the stored objects of `resource` in `namespace`, sorted.
    pub fn names(&self, resource: &str, namespace: &str) -> Vec<String> {
        self.lock()
            .objects
            .keys()
            .filter(|key| key.resource == resource && key.namespace == namespace)
            .map(|key| key.name.clone())
            .collect()
    }

    /// Every object the fake holds, each with its kind and apiVersion, as the API server
    /// would answer a read of it.
    pub fn all(&self) -> Vec<Value> {
        self.lock()
            .objects
            .iter()
            .map(|(key, object)| {
                let mut object = object.clone();
                let api_version = key
                    .resource
                    .rsplit_once('/')
                    .map_or("v1", |(prefix, _)| prefix);
                object["apiVersion"] = api_version.into();
                object["kind"] = kind_of(&key.resource).into();
                object
            })
            .collect()
    }

    /// Removes an object, as another client of the cluster would.
    pub fn remove(&self, resource: &str, namespace: &str, name: &str) {
        self.lock().objects.remove(&key(resource, namespace, name));
    }

    /// Inserts or replaces an object (its name and namespace from its metadata), as the
    /// cluster's controllers would: a test's pods.
    pub fn put(&self, resource: &str, mut object: Value) {
        let mut store = self.lock();
        store.version += 1;
        let version = store.version;
        let metadata = object["metadata"].as_object_mut().expect("metadata");
        metadata.insert("resourceVersion".into(), version.to_string().into());
        let name = metadata["name"].as_str().expect("name").to_owned();
        let namespace = metadata["namespace"]
            .as_str()
            .expect("namespace")
            .to_owned();
        store
            .objects
            .insert(key(resource, &namespace, &name), object);
    }

    /// The next `method` on `resource` fails with `code` and a `Status` of `reason`.
    pub fn fail_next(
        &self,
        method: Method,
        resource: &str,
        code: u16,
        reason: &str,
        message: &str,
    ) {
        self.lock().injected.push(Injected {
            method,
            resource: resource.to_owned(),
            code,
            reason: reason.to_owned(),
            message: message.to_owned(),
        });
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.lock().requests.clone()
    }
}

fn key(resource: &str, namespace: &str, name: &str) -> Key {
    Key {
        resource: resource.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
}

fn kind_of(resource: &str) -> &'static str {
    KINDS
        .iter()
        .find(|(known, _)| *known == resource)
        .map_or("Unknown", |(_, kind)| kind)
}

/// A `Status` answer, as the API server sends for every failure.
fn status(code: u16, reason: &str, message: String, name: &str, resource: &str) -> Response {
    let code = StatusCode::from_u16(code).expect("status code");
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": if code.is_success() { "Success" } else { "Failure" },
        "message": message,
        "reason": reason,
        "details": { "name": name, "kind": resource.rsplit('/').next() },
        "code": code.as_u16(),
    });
    (code, axum::Json(body)).into_response()
}

/// `deployments.apps "x"`, as the API names an object in its messages.
fn qualified(resource: &str, name: &str) -> String {
    match resource.split('/').collect::<Vec<_>>().as_slice() {
        [group, _, plural] => format!("{plural}.{group} \"{name}\""),
        [_, plural] => format!("{plural} \"{name}\""),
        _ => format!("\"{name}\""),
    }
}

fn not_found(resource: &str, name: &str) -> Response {
    let message = format!("{} not found", qualified(resource, name));
    status(404, "NotFound", message, name, resource)
}
