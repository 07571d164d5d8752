//! The ConversationInfo schemas as an OpenAPI document's components: the models' own
//! JSON Schema (either release's, [`crate::documented_schema`]) relinked to
//! `#/components/schemas/`, with what the models' own validators refuse
//! ([`validators`]) or coerce ([`coerced`]) that their schema does not say, so that the
//! document describes what the service validates. The edge serves them at
//! `/openapi.json`.

mod coerced;
mod validators;

use serde_json::{Map, Value};

/// The ConversationInfo schemas the REST document shows, as its components: every model
/// under its name, the body itself as `ConversationInfo`.
pub fn openapi_schemas() -> Map<String, Value> {
    components(crate::documented_schema())
}

/// `schema`'s `$defs`, and `schema` itself as `ConversationInfo`, as components.
fn components(conversation_schema: &Value) -> Map<String, Value> {
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
    require_discriminators(&mut schemas);
    schemas.values_mut().for_each(returned_redacted);
    validators::require_validated_fields(&mut schemas);
    validators::constrain_validated_values(&mut schemas);
    coerced::widen_coerced_fields(&mut schemas);
    schemas
}

/// The models mark their secrets `writeOnly` (never in a response); Sandgate's records
/// return them redacted (`**********`), so a read's answer holds them and the document
/// says so: `format: password` stays, `writeOnly` goes.
fn returned_redacted(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            map.remove("writeOnly");
            map.values_mut().for_each(returned_redacted);
        }
        Value::Array(items) => items.iter_mut().for_each(returned_redacted),
        _ => {}
    }
}

/// The names a model of the agent-server's has in the document: its own, and 1.34's where
/// that release's differs (`{name}_1_34`).
pub(super) fn both_releases(model: &str) -> [String; 2] {
    [model.to_owned(), format!("{model}_1_34")]
}

/// The models' unions as the models judge them: pydantic's schema maps each variant under
/// a generated name and leaves the discriminator (`kind`, `type`) optional in the
/// variants, while the models refuse a variant without it. Each union's mapping becomes
/// discriminator value → variant, and each variant requires its discriminator.
fn require_discriminators(schemas: &mut Map<String, Value>) {
    let snapshot = schemas.clone();
    // A variant's value of its union's discriminator.
    let tag = |variant: &str, property: &str| {
        snapshot
            .get(variant)?
            .get("properties")?
            .get(property)?
            .get("const")?
            .as_str()
            .map(str::to_owned)
    };
    let mut variants = Vec::new();
    for schema in schemas.values_mut() {
        remap_unions(schema, &tag, &mut variants);
    }
    for (name, property) in variants {
        let Some(Value::Object(variant)) = schemas.get_mut(&name) else {
            continue;
        };
        let required = variant
            .entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(required) = required
            && !required.iter().any(|field| field == property.as_str())
        {
            required.push(Value::from(property));
        }
    }
}

/// Every discriminated union in `schema`, however deep (a union may sit in a property, or
/// in an `anyOf` with null): its mapping keyed by the variants' tags, and each variant
/// that has a tag collected as (variant, discriminator).
fn remap_unions(
    schema: &mut Value,
    tag: &impl Fn(&str, &str) -> Option<String>,
    variants: &mut Vec<(String, String)>,
) {
    match schema {
        Value::Object(object) => {
            if let Some(Value::Object(discriminator)) = object.get_mut("discriminator")
                && let Some(property) = discriminator
                    .get("propertyName")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            {
                let mut mapping = Map::new();
                for (key, reference) in discriminator
                    .get("mapping")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                {
                    let name = reference.as_str().and_then(|r| r.rsplit('/').next());
                    match name.and_then(|name| Some((name, tag(name, &property)?))) {
                        Some((name, value)) => {
                            variants.push((name.to_owned(), property.clone()));
                            mapping.insert(value, reference.clone());
                        }
                        None => {
                            mapping.insert(key.clone(), reference.clone());
                        }
                    }
                }
                discriminator.insert("mapping".into(), Value::Object(mapping));
            }
            for value in object.values_mut() {
                remap_unions(value, tag, variants);
            }
        }
        Value::Array(items) => {
            for item in items {
                remap_unions(item, tag, variants);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;
