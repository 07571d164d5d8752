//! The REST document's parameter defaults are the services' own: each default the edge
//! states (`edge/src/params.rs`) against what the service applies when the parameter is
//! absent, so that neither changes without the other. And every reference of the
//! document, as `/openapi.json` serves it, resolves.

use serde_json::Value;

/// The default the document states for `parameter` of `GET path` (null: none).
fn default_of(document: &Value, path: &str, parameter: &str) -> Value {
    document["paths"][path]["get"]["parameters"]
        .as_array()
        .and_then(|parameters| parameters.iter().find(|found| found["name"] == parameter))
        .map_or(Value::Null, |found| found["schema"]["default"].clone())
}

#[test]
fn the_openapi_defaults_are_the_services_own() {
    let document = sandgate_edge::openapi_document(&serde_json::Map::new());
    let page = sandgate_runtime_api::conversations::DEFAULT_PAGE_SIZE;
    assert_eq!(
        default_of(&document, "/api/v1/conversations", "limit"),
        page
    );
    assert_eq!(
        default_of(&document, "/api/v1/conversations/{id}/events", "limit"),
        page
    );
    assert_eq!(
        default_of(&document, "/spend/logs", "limit"),
        sandgate_model_gw::DEFAULT_SPEND_LOG_LIMIT
    );
    assert_eq!(
        default_of(&document, "/key/list", "size"),
        sandgate_model_gw::DEFAULT_KEY_PAGE_SIZE
    );
    assert_eq!(
        default_of(&document, "/api/admin/audit", "limit"),
        sandgate_runtime_api::admin::audit::DEFAULT_AUDIT_PAGE
    );
    assert_eq!(
        default_of(&document, "/api/ledger/rollup", "limit"),
        sandgate_runtime_api::admin::audit::DEFAULT_AUDIT_PAGE
    );
    // FastAPI's reading of an absent boolean, which `GET /list` follows.
    assert_eq!(default_of(&document, "/list", "show_all"), false);
}

/// Every `$ref` of `value`, depth first.
fn references<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
    match value {
        Value::Object(fields) => {
            if let Some(Value::String(target)) = fields.get("$ref") {
                found.push(target);
            }
            fields.values().for_each(|field| references(field, found));
        }
        Value::Array(items) => items.iter().for_each(|item| references(item, found)),
        _ => {}
    }
}

/// A reference to nothing makes a client skip that part of the schema (schemathesis:
/// "unresolvable references"): the Anthropic error's `type` named a component that was
/// never written.
#[test]
fn every_reference_of_the_document_resolves() {
    let document = sandgate_edge::openapi_document(&sandgate_conversation::openapi_schemas());
    let mut found = Vec::new();
    references(&document, &mut found);
    assert!(found.len() > 100, "{} references", found.len());
    let dangling: std::collections::BTreeSet<&str> = found
        .into_iter()
        .filter(|target| {
            target
                .strip_prefix('#')
                .is_none_or(|pointer| document.pointer(pointer).is_none())
        })
        .collect();
    assert!(dangling.is_empty(), "references to nothing: {dangling:?}");
}
