//! The OpenAPI document of the REST surface, served at `/openapi.json`. Generated: each
//! route is registered with its operation (`#[utoipa::path]` on the handler, see
//! `routes.rs`), the requests and answers are the handlers' own types (`ToSchema`), and
//! the ConversationInfo schemas are the real models', as the conversation crate gives them
//! (`sandgate_conversation::openapi_schemas`). The routes the binary serves beside the
//! edge's are described in `served_elsewhere.rs`.

mod served_elsewhere;

use served_elsewhere::ServedElsewhere;

use serde_json::{Map, Value};
use utoipa::Modify;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi, Ref, RefOr};

/// The security schemes operations name (`security(("APIKeyHeader" = []))`): the header a
/// sandbox's key (or a webhook key) travels in, the runtime API key's header, the admin
/// login's bearer token, and the model gateway's master key (or a virtual key).
const SESSION_KEY: &str = "APIKeyHeader";
const RUNTIME_KEY: &str = "RuntimeAPIKey";
const ADMIN_TOKEN: &str = "AdminToken";
const MASTER_KEY: &str = "MasterKey";

/// The document's root: what it is, and how callers authenticate.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Sandgate",
        version = env!("CARGO_PKG_VERSION"),
        description = include_str!("description.md"),
    ),
    modifiers(&SecuritySchemes, &ServedElsewhere),
)]
pub(crate) struct Root;

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            SESSION_KEY,
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "X-Session-API-Key",
                "A key issued to a sandbox, or one of SANDGATE_WEBHOOK_API_KEYS",
            ))),
        );
        components.add_security_scheme(
            RUNTIME_KEY,
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "X-API-Key",
                "The runtime API key (DEFAULT_API_KEY, listed as `default` by \
                 /api/admin/api-keys): reads every conversation and the warm runtime \
                 configurations",
            ))),
        );
        components.add_security_scheme(
            ADMIN_TOKEN,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some(
                        "The token POST /api/admin/login returns; valid 24 hours",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            MASTER_KEY,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "PROXY_MASTER_KEY, or a virtual key from `/key/generate`, as \
                         `Authorization: Bearer <key>`; also taken from `x-api-key` (the \
                         Anthropic SDK), `api-key` (Azure clients) and `x-litellm-api-key`. \
                         Never forwarded upstream. A virtual key calls the LLM routes of its \
                         models and reads its own `/key/info`; the master key alone adds \
                         models, manages keys and lists the spend log",
                    ))
                    .build(),
            ),
        );
    }
}

/// The ConversationInfo of the models the runtime API validates with, as operations name
/// it (`body = ConversationInfo`): its schema is the models' own, which `document` adds.
pub(crate) struct ConversationInfo;

impl utoipa::PartialSchema for ConversationInfo {
    fn schema() -> RefOr<Schema> {
        Ref::from_schema_name("ConversationInfo").into()
    }
}

impl utoipa::ToSchema for ConversationInfo {}

/// The document served: `generated` (the routes' operations and their types) with
/// `conversation_schemas`, the ConversationInfo components.
pub(crate) fn document(generated: OpenApi, conversation_schemas: &Map<String, Value>) -> Value {
    let mut document = match serde_json::to_value(generated) {
        Ok(Value::Object(document)) => document,
        _ => Map::new(),
    };
    if let Some(paths) = object_at(&mut document, "paths") {
        // axum's catch-all segment (`{*id}`) is a plain parameter in the document.
        let routed = std::mem::take(paths);
        paths.extend(
            routed
                .into_iter()
                .map(|(path, item)| (path.replace("{*", "{"), item)),
        );
    }
    if let Some(schemas) = object_at(&mut document, "components")
        .and_then(|components| object_at(components, "schemas"))
    {
        // The models' own, in place of the name the operations refer to them by.
        schemas.extend(conversation_schemas.clone());
    }
    Value::Object(document)
}

/// The object under `key` in `map`, made if absent.
fn object_at<'a>(map: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Map<String, Value>> {
    map.entry(key)
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
}
