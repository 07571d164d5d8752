//! Sandgate's edge: the documented REST paths, translated into gRPC calls to the services.
//! No business logic lives here: requests become messages (credentials and `x-*` headers
//! become metadata) and gRPC statuses become the REST contracts' statuses and bodies.

mod admin;
mod body;
pub mod channel;
mod client;
mod conversations;
mod error;
mod health;
mod keys;
mod metadata;
mod model_gw;
mod models;
mod observe;
pub mod openapi;
mod sandboxes;
mod settings;
mod state;
mod webhook;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::response::IntoResponse;
use axum::routing::{MethodRouter, get, post, put};
use http::StatusCode;
use sandgate_proto::models::v1::Api;
use serde_json::Value;

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
    /// The document served at `/openapi.json`.
    pub openapi: Value,
    /// The model gateway; without it the gateway's routes answer 503.
    pub model_gw: Option<ModelGw>,
    /// Proxies whose `X-Forwarded-For` names the client (`--trusted-proxies`); from any
    /// other peer the peer is the client.
    pub trusted_proxies: Vec<ipnet::IpNet>,
}

/// The edge's routes, calling the runtime API over `runtime_api`.
pub fn router(runtime_api: GrpcChannel, config: EdgeConfig) -> Router {
    let openapi = serde_json::to_vec(&config.openapi)
        .unwrap_or_default()
        .into();
    let state = AppState::new(
        runtime_api,
        config.model_gw,
        openapi,
        config.body_limit,
        config.trusted_proxies,
    );
    let mut router = Router::new();
    for (path, route) in routes(config.gateway_body_limit) {
        router = router.route(&path, route);
    }
    router
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(config.body_limit))
        .layer(axum::middleware::from_fn(observe::observe))
        .with_state(state)
}

/// Every route of the edge: its path and what serves it. The OpenAPI document describes
/// each (`tests::every_route_is_documented`; catalog.rs checks the other way round).
fn routes(gateway_body_limit: usize) -> Vec<(String, MethodRouter<AppState>)> {
    let mut routes: Vec<(&str, MethodRouter<AppState>)> = vec![
        ("/health", get(health::health)),
        ("/openapi.json", get(health::openapi)),
        ("/api/v1/webhooks/conversations", post(webhook::receive)),
        (
            "/api/v1/webhooks/events/{conversation_id}",
            post(webhook::receive_events),
        ),
        ("/api/v1/conversations", get(conversations::list)),
        (
            "/api/v1/conversations/{id}",
            get(conversations::get).patch(conversations::update_tags),
        ),
        (
            "/api/v1/conversations/{id}/events",
            get(conversations::events),
        ),
        (
            "/api/v1/settings/profiles/{profile_name}",
            post(settings::save).get(settings::get),
        ),
        ("/api/admin/challenge", get(admin::challenge)),
        ("/api/admin/login", post(admin::login)),
        ("/api/admin/api-keys", get(admin::api_keys)),
        ("/api/warm-runtime-configs", get(admin::list_configs)),
        (
            "/api/admin/warm-runtime-configs/{name}",
            put(admin::put_config).delete(admin::delete_config),
        ),
        ("/api/warm-runtime-pools", get(sandboxes::pools)),
        ("/start", post(sandboxes::start)),
        ("/sessions/batch", get(sandboxes::batch)),
        ("/sessions/{session_id}", get(sandboxes::session)),
        ("/list", get(sandboxes::list)),
        ("/pause", post(sandboxes::pause)),
        ("/resume", post(sandboxes::resume)),
        ("/stop", post(sandboxes::stop)),
        ("/v1/models", get(models::list)),
        ("/models", get(models::list)),
        ("/v1/models/{*id}", get(models::get)),
        ("/model/new", post(models::add)),
        ("/v1/model/info", get(models::model_info)),
        ("/model/info", get(models::model_info)),
        ("/model_group/info", get(models::model_group_info)),
        ("/health/liveliness", get(health::liveliness)),
        ("/health/liveness", get(health::liveliness)),
        ("/health/readiness", get(health::readiness)),
        ("/spend/logs", get(models::spend_logs)),
        ("/key/generate", post(keys::generate)),
        ("/key/info", get(keys::info)),
        ("/key/update", post(keys::update)),
        ("/key/delete", post(keys::delete)),
        ("/key/list", get(keys::list)),
    ];
    // The model gateway's LLM APIs, each also without `/v1` (as LiteLLM's proxy serves
    // them), with their own body limit: closer to the handler than the edge's, so it is
    // the one in effect there.
    use models::call;
    const CHAT: i32 = Api::ChatCompletions as i32;
    const RESPONSES: i32 = Api::Responses as i32;
    const MESSAGES: i32 = Api::Messages as i32;
    const COUNT_TOKENS: i32 = Api::MessagesCountTokens as i32;
    const EMBEDDINGS: i32 = Api::Embeddings as i32;
    const COMPLETIONS: i32 = Api::Completions as i32;
    let limit = || DefaultBodyLimit::max(gateway_body_limit);
    let mut llm = Vec::new();
    for prefix in ["/v1", ""] {
        llm.extend([
            (
                format!("{prefix}/chat/completions"),
                post(call::<CHAT>).layer(limit()),
            ),
            (
                format!("{prefix}/responses"),
                post(call::<RESPONSES>).layer(limit()),
            ),
            (
                format!("{prefix}/messages"),
                post(call::<MESSAGES>).layer(limit()),
            ),
            (
                format!("{prefix}/messages/count_tokens"),
                post(call::<COUNT_TOKENS>).layer(limit()),
            ),
            (
                format!("{prefix}/embeddings"),
                post(call::<EMBEDDINGS>).layer(limit()),
            ),
            (
                format!("{prefix}/completions"),
                post(call::<COMPLETIONS>).layer(limit()),
            ),
        ]);
    }
    routes
        .drain(..)
        .map(|(path, route)| (path.to_owned(), route))
        .chain(llm)
        .collect()
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

#[cfg(test)]
mod tests {
    /// A route cannot be added without its entry in the OpenAPI document.
    #[test]
    fn every_route_is_documented() {
        let document: serde_json::Value =
            serde_json::from_str(crate::openapi::DOCUMENT).expect("the document is JSON");
        let paths = document["paths"].as_object().expect("paths");
        let routes = super::routes(1);
        assert!(routes.len() > 40);
        for (path, _) in routes {
            // The router's catch-all segment is a plain parameter in the document.
            let documented = path.replace("{*", "{");
            assert!(
                paths.contains_key(&documented),
                "{path} is routed but not in openapi.json"
            );
        }
    }
}
