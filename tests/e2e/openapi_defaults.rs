//! The REST document's parameter defaults are the services' own: each default the edge
//! states (`edge/src/params.rs`) against what the service applies when the parameter is
//! absent, so that neither changes without the other.

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
    // FastAPI's reading of an absent boolean, which `GET /list` follows.
    assert_eq!(default_of(&document, "/list", "show_all"), false);
}
