//! Sandgate's edge: the documented REST paths, translated into gRPC calls to the services.
//! No business logic lives here: requests become messages (credentials and `x-*` headers
//! become metadata) and gRPC statuses become the REST contracts' statuses and bodies.

mod admin;
mod audit;
mod body;
mod catalog;
pub mod channel;
mod client;
mod console;
mod conversations;
mod error;
mod gateway_types;
mod health;
mod key_types;
mod keys;
mod ledger;
mod llm;
mod metadata;
mod model_gw;
mod model_info;
mod models;
mod observe;
mod openapi;
mod org_types;
mod orgs;
mod params;
mod routes;
mod runtimes;
mod sandboxes;
mod settings;
mod state;
mod warm_configs;
mod webhook;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::response::IntoResponse;
use http::StatusCode;
use serde_json::{Map, Value};

use crate::state::AppState;

pub use body::holding;
pub use channel::GrpcChannel;
pub use error::ApiError;
pub use model_gw::{LocalModelGateway, ModelGw};
pub use observe::describe_metrics;

/// The largest request body the edge accepts by default: real webhook payloads with many
/// skills reach hundreds of kilobytes.
pub const DEFAULT_BODY_LIMIT: usize = 8 * 1024 * 1024;

/// The largest request body the model gateway's LLM routes accept by default: images
/// travel base64-encoded in the body, and LiteLLM's proxy takes tens of megabytes.
pub const DEFAULT_GATEWAY_BODY_LIMIT: usize = 32 * 1024 * 1024;

pub struct EdgeConfig {
    /// Bodies past this many bytes are answered 413.
    pub body_limit: usize,
    /// The same, on the model gateway's LLM routes (chat completions, responses, …).
    pub gateway_body_limit: usize,
    /// The ConversationInfo schemas of the models the runtime API validates with, as the
    /// components of the document served at `/openapi.json`
    /// (`sandgate_conversation::openapi_schemas`).
    pub conversation_schemas: Map<String, Value>,
    /// The model gateway; without it the gateway's routes answer 503.
    pub model_gw: Option<ModelGw>,
    /// Proxies whose `X-Forwarded-For` names the client (`--trusted-proxies`); from any
    /// other peer the peer is the client.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Whether the operator console is served at `/console` (`--console`).
    pub console: bool,
}

/// The edge's routes, calling the runtime API over `runtime_api`.
pub fn router(runtime_api: GrpcChannel, config: EdgeConfig) -> Router {
    let (router, generated) = routes::api(config.gateway_body_limit).split_for_parts();
    let document = openapi::document(generated, &config.conversation_schemas);
    let openapi = serde_json::to_vec(&document).unwrap_or_default().into();
    let state = AppState::new(
        runtime_api,
        config.model_gw,
        openapi,
        config.body_limit,
        config.trusted_proxies,
    );
    let api = router
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(config.body_limit))
        .with_state(state.clone());
    let app = if config.console {
        console::routes(api.clone(), state).merge(api)
    } else {
        api
    };
    app.layer(axum::middleware::from_fn_with_state(
        std::sync::Arc::new(observe::RequestSeries::default()),
        observe::observe,
    ))
}

/// The OpenAPI document `/openapi.json` serves, with `conversation_schemas` (the models'
/// ConversationInfo schemas, as components) as its ConversationInfo.
pub fn openapi_document(conversation_schemas: &Map<String, Value>) -> Value {
    let (_, generated) = routes::api(DEFAULT_GATEWAY_BODY_LIMIT).split_for_parts();
    openapi::document(generated, conversation_schemas)
}

/// 404, except that a path with a trailing slash is redirected (307, method and body
/// kept) to the path without it, as the reference's framework does. The target is always
/// a path on this host: leading slashes (and backslashes, which browsers read as slashes)
/// collapse into one, so `//evil.example/` never becomes a redirect to another host.
async fn not_found(uri: http::Uri) -> axum::response::Response {
    let path = uri.path();
    if path.len() > 1 && path.ends_with('/') {
        let mut location = format!(
            "/{}",
            path.trim_start_matches(['/', '\\']).trim_end_matches('/')
        );
        if let Some(query) = uri.query() {
            location = format!("{location}?{query}");
        }
        return axum::response::Redirect::temporary(&location).into_response();
    }
    ApiError::Edge(StatusCode::NOT_FOUND, "Not Found".into()).into_response()
}

async fn method_not_allowed() -> ApiError {
    ApiError::Edge(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed".into())
}
