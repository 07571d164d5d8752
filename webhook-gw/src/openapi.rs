//! The OpenAPI document of the REST surface, served at `/openapi.json`. The
//! ConversationInfo schema comes from the caller (the runtime API owns the model), so the
//! document always describes what the service validates.

use serde_json::{Map, Value};

pub(crate) const DOCUMENT: &str = include_str!("openapi.json");

/// The document, with `schema`'s `$defs` (and `schema` itself as `ConversationInfo`)
/// added to `components.schemas`.
pub fn document(conversation_schema: &Value) -> Value {
    let mut document: Value =
        serde_json::from_str(DOCUMENT).unwrap_or_else(|_| Value::Object(Map::new()));
    let relinked: Value = serde_json::from_str(
        &conversation_schema
            .to_string()
            .replace("#/$defs/", "#/components/schemas/"),
    )
    .unwrap_or(Value::Null);
    let mut schemas = Map::new();
    if let Value::Object(mut root) = relinked {
        if let Some(Value::Object(defs)) = root.remove("$defs") {
            schemas.extend(defs);
        }
        schemas.insert("ConversationInfo".into(), Value::Object(root));
    }
    if let Some(Value::Object(components)) = document.get_mut("components")
        && let Some(Value::Object(existing)) = components.get_mut("schemas")
    {
        existing.extend(schemas);
    }
    document
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_embedded_document_is_json() {
        let document: serde_json::Value = serde_json::from_str(super::DOCUMENT).unwrap();
        assert_eq!(document["openapi"], "3.1.0");
        assert!(document["paths"].as_object().unwrap().len() >= 6);
    }
}
