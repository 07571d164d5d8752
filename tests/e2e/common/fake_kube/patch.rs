//! Patches as the API server applies them: RFC 7386 merge patches, and strategic merge
//! patches whose known lists merge item by item by their key.

use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::{Key, MERGE_KEYS, Store, not_found, status};

pub(super) fn patch(
    store: &mut Store,
    key: Key,
    content_type: Option<&str>,
    body: Option<Value>,
) -> Response {
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
