//! How the fake answers a request: its route (resource, namespace, name), injected
//! failures, and create, get, list with label selectors, and delete.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::patch::patch;
use super::{KINDS, Recorded, Shared, Store, key, kind_of, not_found, qualified, status};

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

pub(super) async fn handle(
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
