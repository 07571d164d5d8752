//! Sandgate's runtime API: the RuntimeAdmin, Conversations and Settings gRPC services, the
//! stores behind them, and gRPC health.

pub mod admin;
pub mod auth;
pub mod conversations;
mod health;
pub mod model;
pub mod settings;
pub mod store;
mod validation;

use std::sync::Arc;

use sandgate_proto::MAX_MESSAGE_BYTES;
use sandgate_proto::admin::v1::runtime_admin_server::RuntimeAdminServer;
use sandgate_proto::conversations::v1::conversations_server::ConversationsServer;
use sandgate_proto::settings::v1::settings_server::SettingsServer;
use tonic::service::Routes;
use tonic_health::pb::health_server::HealthServer;

pub use admin::{AdminConfig, RuntimeAdminService};
pub use auth::Authenticator;
pub use conversations::ConversationsService;
pub use health::StoreHealthService;
pub use settings::SettingsService;
pub use store::Store;

/// Who may call the runtime API, beyond the keys the Sandboxes service issues.
#[derive(Clone, Debug, Default)]
pub struct AuthConfig {
    /// Session keys of external webhook senders (`SANDGATE_WEBHOOK_API_KEYS`).
    pub webhook_api_keys: Vec<String>,
    /// Keys that read the whole catalog as `X-API-Key` (`DEFAULT_API_KEY`).
    pub runtime_api_keys: Vec<String>,
}

/// Every gRPC service of the runtime API, ready to serve. Fails, saying why, when the
/// installer's warm runtimes file cannot be read.
pub fn grpc_routes(store: Store, auth: &AuthConfig, admin: AdminConfig) -> Result<Routes, String> {
    let authenticator = Arc::new(Authenticator::new(
        &auth.webhook_api_keys,
        &auth.runtime_api_keys,
        store.session_keys.clone(),
    ));
    let conversations = ConversationsServer::new(ConversationsService::new(
        store.clone(),
        authenticator.clone(),
    ))
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let settings = SettingsServer::new(SettingsService::new(store.clone(), authenticator.clone()));
    let runtime_admin = RuntimeAdminServer::new(RuntimeAdminService::new(
        store.clone(),
        authenticator,
        admin,
    )?);
    let health = HealthServer::new(StoreHealthService::new(store));
    Ok(Routes::new(conversations)
        .add_service(settings)
        .add_service(runtime_admin)
        .add_service(health))
}
