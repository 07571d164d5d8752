//! A fake Kubernetes API server on port 0, for the `kubernetes` sandbox driver's tests.
//! It keeps objects in memory by (resource, namespace, name) and speaks the subset of the
//! API the driver uses, with the real API's status codes and `Status` bodies: create (409
//! `AlreadyExists`), get, list with equality label selectors, merge and strategic merge
//! patches, and delete (404 `NotFound`). Anything else is answered 404 with a message
//! naming the request, so that a test fails saying what the driver asked for. Every request
//! is recorded, and tests put Pods in place of the kubelet and scheduler.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

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

/// What a path names: `/api/v1/namespaces/{ns}/{resource}[/{name}]` or
/// `/apis/{group}/{version}/namespaces/{ns}/{resource}[/{name}]`.
fn route(path: &str) -> Option<(String, String, Option<String>)> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (prefix, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => ((*version).to_owned(), rest),
        ["apis", group, version, rest @ ..] => (format!("{group}/{version}"), rest),
        _ => return None,
    };
    let (namespace, resource, name) = match rest {
        ["namespaces", namespace, resource] => (namespace, resource, None),
        ["namespaces", namespace, resource, name] => (namespace, resource, Some(*name)),
        _ => return None,
    };
    let resource = format!("{prefix}/{resource}");
    KINDS
        .iter()
        .any(|(known, _)| *known == resource)
        .then(|| (resource, (*namespace).to_owned(), name.map(str::to_owned)))
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

async fn handle(
    State(store): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let parsed: Option<Value> = (!body.is_empty())
        .then(|| serde_json::from_slice(&body).ok())
        .flatten();
    let mut store = store.lock().expect("fake kube store");
    store.requests.push(Recorded {
        method: method.clone(),
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        content_type: content_type.clone(),
        body: parsed.clone(),
    });
    let Some((resource, namespace, name)) = route(uri.path()) else {
        return unsupported(&method, &uri);
    };
    if let Some(at) = store
        .injected
        .iter()
        .position(|failure| failure.method == method && failure.resource == resource)
    {
        let failure = store.injected.remove(at);
        let name = name.unwrap_or_default();
        return status(
            failure.code,
            &failure.reason,
            failure.message,
            &name,
            &resource,
        );
    }
    match (method.clone(), name) {
        (Method::POST, None) => match parsed {
            Some(object) => create(&mut store, &resource, &namespace, object),
            None => status(
                400,
                "BadRequest",
                "the body is not JSON".into(),
                "",
                &resource,
            ),
        },
        (Method::GET, None) => list(&store, &resource, &namespace, uri.query()),
        (Method::GET, Some(name)) => match store.objects.get(&key(&resource, &namespace, &name)) {
            Some(object) => axum::Json(object.clone()).into_response(),
            None => not_found(&resource, &name),
        },
        (Method::PATCH, Some(name)) => patch(
            &mut store,
            key(&resource, &namespace, &name),
            content_type.as_deref(),
            parsed,
        ),
        (Method::DELETE, Some(name)) => {
            match store.objects.remove(&key(&resource, &namespace, &name)) {
                Some(_) => status(200, "", String::new(), &name, &resource),
                None => not_found(&resource, &name),
            }
        }
        _ => unsupported(&method, &uri),
    }
}

fn unsupported(method: &Method, uri: &Uri) -> Response {
    tracing::warn!(%method, %uri, "fake kube API: unsupported request");
    status(
        404,
        "NotFound",
        format!("fake kube API: unsupported request {method} {uri}"),
        "",
        "",
    )
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

fn create(store: &mut Store, resource: &str, namespace: &str, mut object: Value) -> Response {
    let Some(name) = object["metadata"]["name"].as_str().map(str::to_owned) else {
        return status(
            422,
            "Invalid",
            "metadata.name: Required value".into(),
            "",
            resource,
        );
    };
    if let Some(other) = object["metadata"]["namespace"].as_str()
        && other != namespace
    {
        let message =
            "the namespace of the provided object does not match the namespace sent on the request";
        return status(400, "BadRequest", message.into(), &name, resource);
    }
    let key = key(resource, namespace, &name);
    if store.objects.contains_key(&key) {
        let message = format!("{} already exists", qualified(resource, &name));
        return status(409, "AlreadyExists", message, &name, resource);
    }
    store.version += 1;
    let version = store.version;
    let metadata = object["metadata"].as_object_mut().expect("metadata object");
    metadata.insert("namespace".into(), namespace.into());
    metadata.insert("uid".into(), format!("uid-{version}").into());
    metadata.insert("resourceVersion".into(), version.to_string().into());
    metadata.insert("generation".into(), 1.into());
    metadata.insert(
        "creationTimestamp".into(),
        format!(
            "2026-01-01T00:{:02}:{:02}Z",
            version / 60 % 60,
            version % 60
        )
        .into(),
    );
    store.objects.insert(key, object.clone());
    (StatusCode::CREATED, axum::Json(object)).into_response()
}

/// Whether `labels` satisfy `selector`: comma-separated `k=v`, `k==v`, `k!=v`, `k`, `!k`.
fn selects(selector: &str, labels: &Map<String, Value>) -> Result<bool, String> {
    for term in selector
        .split(',')
        .map(str::trim)
        .filter(|term| !term.is_empty())
    {
        if term.contains(" in ") || term.contains(" notin ") || term.contains('(') {
            return Err(format!(
                "set-based selector {term:?} is not supported by the fake"
            ));
        }
        let label = |name: &str| labels.get(name.trim()).and_then(Value::as_str);
        let holds = if let Some((name, value)) = term.split_once("!=") {
            label(name) != Some(value.trim())
        } else if let Some((name, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
            label(name) == Some(value.trim())
        } else if let Some(name) = term.strip_prefix('!') {
            label(name).is_none()
        } else {
            label(term).is_some()
        };
        if !holds {
            return Ok(false);
        }
    }
    Ok(true)
}

fn list(store: &Store, resource: &str, namespace: &str, query: Option<&str>) -> Response {
    let query: HashMap<String, String> =
        form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let selector = query.get("labelSelector").map_or("", String::as_str);
    let mut items = Vec::new();
    for (key, object) in &store.objects {
        if key.resource != resource || key.namespace != namespace {
            continue;
        }
        let empty = Map::new();
        let labels = object["metadata"]["labels"].as_object().unwrap_or(&empty);
        match selects(selector, labels) {
            Ok(true) => {
                // Items of a list carry no kind of their own, as the real API answers.
                let mut item = object.clone();
                if let Some(fields) = item.as_object_mut() {
                    fields.remove("kind");
                    fields.remove("apiVersion");
                }
                items.push(item);
            }
            Ok(false) => {}
            Err(message) => return status(400, "BadRequest", message, "", resource),
        }
    }
    let api_version = resource.rsplit_once('/').map_or("v1", |(prefix, _)| prefix);
    axum::Json(json!({
        "kind": format!("{}List", kind_of(resource)),
        "apiVersion": api_version,
        "metadata": { "resourceVersion": store.version.to_string() },
        "items": items,
    }))
    .into_response()
}

fn patch(store: &mut Store, key: Key, content_type: Option<&str>, body: Option<Value>) -> Response {
    let Some(current) = store.objects.get(&key) else {
        return not_found(&key.resource, &key.name);
    };
    let Some(body) = body else {
        return status(
            400,
            "BadRequest",
            "the patch is not JSON".into(),
            &key.name,
            &key.resource,
        );
    };
    let mut next = current.clone();
    let applied = match content_type {
        Some("application/merge-patch+json") => {
            merge(&mut next, &body);
            Ok(())
        }
        Some("application/strategic-merge-patch+json") => strategic(&mut next, &body),
        other => {
            let message = format!("the fake does not take {other:?} patches");
            return status(
                415,
                "UnsupportedMediaType",
                message,
                &key.name,
                &key.resource,
            );
        }
    };
    if let Err(message) = applied {
        return status(422, "Invalid", message, &key.name, &key.resource);
    }
    store.version += 1;
    let version = store.version;
    let spec_changed = next["spec"] != current["spec"];
    let metadata = next["metadata"].as_object_mut().expect("metadata object");
    metadata.insert("resourceVersion".into(), version.to_string().into());
    if spec_changed {
        let generation = metadata["generation"].as_i64().unwrap_or(1) + 1;
        metadata.insert("generation".into(), generation.into());
    }
    store.objects.insert(key, next.clone());
    axum::Json(next).into_response()
}

/// RFC 7386: objects merge key by key, `null` removes, anything else replaces.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let target = target.as_object_mut().expect("an object");
    for (name, value) in fields {
        if value.is_null() {
            target.remove(name);
        } else {
            merge(target.entry(name.clone()).or_insert(Value::Null), value);
        }
    }
}

/// A strategic merge patch, without directives: as [`merge`], except that the lists in
/// [`MERGE_KEYS`] merge item by item by their key.
fn strategic(target: &mut Value, patch: &Value) -> Result<(), String> {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let target = target.as_object_mut().expect("an object");
    for (name, value) in fields {
        if name.starts_with('$') {
            return Err(format!("the fake does not take the directive {name}"));
        }
        let merge_key = MERGE_KEYS
            .iter()
            .find(|(list, _)| list == name)
            .map(|(_, key)| *key);
        match (value, merge_key) {
            (Value::Null, _) => {
                target.remove(name);
            }
            (Value::Array(items), Some(merge_key)) => {
                let slot = target.entry(name.clone()).or_insert_with(|| json!([]));
                if !slot.is_array() {
                    *slot = json!([]);
                }
                let list = slot.as_array_mut().expect("a list");
                for item in items {
                    let id = item.get(merge_key);
                    match list
                        .iter_mut()
                        .find(|existing| existing.get(merge_key) == id)
                    {
                        Some(existing) => strategic(existing, item)?,
                        None => list.push(item.clone()),
                    }
                }
            }
            _ => strategic(target.entry(name.clone()).or_insert(Value::Null), value)?,
        }
    }
    Ok(())
}
