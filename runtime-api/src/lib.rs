//! Sandgate's runtime API: the RuntimeAdmin, Conversations and Settings gRPC services, the
//! stores behind them, and gRPC health.

pub mod admin;
pub mod ambient;
pub mod auth;
pub mod conversations;
mod health;
mod ledger;
pub mod sandboxes;
pub mod settings;
mod validation;

use sandgate_store::ledger::coalescing::Coalescing;
use std::sync::Arc;

use sandgate_proto::MAX_MESSAGE_BYTES;
use sandgate_proto::admin::v1::runtime_admin_server::RuntimeAdminServer;
use sandgate_proto::conversations::v1::conversations_server::ConversationsServer;
use sandgate_proto::sandboxes::v1::sandboxes_server::SandboxesServer;
use sandgate_proto::settings::v1::settings_server::SettingsServer;
use sandgate_store::Store;
use tonic::service::Routes;

pub use admin::{AdminConfig, RuntimeAdminService};
pub use auth::Authenticator;
pub use conversations::ConversationsService;
pub use health::StoreHealthService;
pub use settings::SettingsService;

/// Registers the runtime API's metrics with their help text (after the recorder is
/// installed).
pub fn describe_metrics() {
    sandboxes::reconciler::describe_metrics();
    sandboxes::describe_claim_metrics();
    conversations::describe_metrics();
}

/// Who may call the runtime API, beyond the keys the Sandboxes service issues.
#[derive(Clone, Debug, Default)]
pub struct AuthConfig {
    /// Session keys of external webhook senders (`SANDGATE_WEBHOOK_API_KEYS`).
    pub webhook_api_keys: Vec<String>,
    /// Keys that read the whole catalog as `X-API-Key` (`DEFAULT_API_KEY`).
    pub runtime_api_keys: Vec<String>,
}

/// How the conversation catalog keeps what it is sent.
#[derive(Clone, Copy, Debug, Default)]
pub struct CatalogConfig {
    /// How many agent-server events, and for how long, each conversation keeps.
    pub event_retention: sandgate_store::EventRetention,
    /// New conversations each sender may create per window; `None`, unbounded.
    pub creation_rate: Option<conversations::creation_rate::CreationRate>,
}

/// How sandboxes are run: the driver, and what the Sandboxes service needs beside it.
pub struct SandboxConfig {
    pub driver: Arc<dyn sandboxes::driver::SandboxDriver>,
    pub options: sandboxes::SandboxOptions,
    /// The key session keys are derived from (`SANDBOX_KEY_SECRET`); absent, one derived
    /// from the admin token key, else a random one per process.
    pub session_key_secret: Option<Vec<u8>>,
    pub clock: Arc<dyn ambient::Clock>,
}

/// The runtime API, ready to serve: its gRPC services, and the warm-pool reconciler to run
/// beside them. gRPC health is the caller's to add ([`StoreHealthService`]), naming every
/// service its process serves.
pub struct RuntimeApi {
    pub routes: Routes,
    pub reconciler: sandboxes::Reconciler,
    /// The RuntimeAdmin service its routes serve, for what checks an admin token outside
    /// gRPC (the support bundle's download).
    pub admin: Arc<RuntimeAdminService>,
    /// Its ledger writer: the counts of deliveries and sandbox time, written off their
    /// path; flushed once the server has stopped ([`Coalescing::flush`]).
    pub ledger: Arc<Coalescing>,
}

/// The key session keys derive from, when none is configured.
fn session_key_secret(admin: &AdminConfig) -> Vec<u8> {
    use hmac::Mac;
    match &admin.jwt_secret {
        Some(jwt_secret) => hmac::Hmac::<sha2::Sha256>::new_from_slice(jwt_secret)
            .map(|mut mac| {
                mac.update(b"sandgate session key secret");
                mac.finalize().into_bytes().to_vec()
            })
            .unwrap_or_default(),
        None => {
            tracing::warn!(
                "neither SANDBOX_KEY_SECRET nor JWT_SECRET is set: sandbox session keys are derived from a random key, valid only in this process; warm sandboxes are replaced after a restart"
            );
            rand::random::<[u8; 32]>().to_vec()
        }
    }
}

/// Every gRPC service of the runtime API, ready to serve. Fails, saying why, when the
/// installer's warm runtimes file cannot be read.
pub fn grpc_routes(
    mut store: Store,
    auth: &AuthConfig,
    catalog: CatalogConfig,
    admin: AdminConfig,
    sandbox: SandboxConfig,
) -> Result<RuntimeApi, String> {
    // The runtime API counts each delivery into the ledger: written off the delivery's
    // path, merged (the gateway batches its own with its spend log).
    let ledger = Arc::new(Coalescing::new(store.ledger.clone()));
    store.ledger = ledger.clone();
    let authenticator = Arc::new(Authenticator::new(
        &auth.webhook_api_keys,
        &auth.runtime_api_keys,
        store.session_keys.clone(),
    ));
    let configs = Arc::new(
        admin::source::WarmConfigSource::new(
            store.clone(),
            admin::installer::InstallerFile::open(admin.warm_runtimes_file.clone())?,
            admin.overlay,
        )
        .with_limits(admin.warm_limits),
    );
    let secret = sandbox
        .session_key_secret
        .clone()
        .unwrap_or_else(|| session_key_secret(&admin));
    // The webhook and the event store mark the sandbox that sent them active, so that
    // idle pause leaves it running.
    let activity = sandgate_store::Activity::new(&store, sandbox.options.idle_after);
    let prices = sandbox.options.prices;
    let pools = Arc::new(sandboxes::Sandboxes::new(
        store.clone(),
        sandbox.driver,
        &secret,
        sandbox.clock.clone(),
        sandbox.options,
        configs.clone(),
    ));
    let conversations = ConversationsServer::new(
        ConversationsService::new(
            store.clone(),
            authenticator.clone(),
            catalog.event_retention,
            activity,
        )
        .with_creation_rate(catalog.creation_rate),
    )
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    // One message-size limit on every service, the edge's clients' own: a body the edge
    // accepted is never refused by the hop behind it, nor an answer by the hop in front.
    let settings = SettingsServer::new(SettingsService::new(store.clone(), authenticator.clone()))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let sandboxes_service = SandboxesServer::new(sandboxes::SandboxesService::new(
        pools.clone(),
        authenticator.clone(),
    ))
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let admin_service = Arc::new(
        RuntimeAdminService::with_clock(
            store.clone(),
            authenticator,
            admin,
            configs,
            sandbox.clock,
        )
        .with_sandbox_prices(prices),
    );
    let runtime_admin = RuntimeAdminServer::from_arc(admin_service.clone())
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    Ok(RuntimeApi {
        routes: Routes::new(conversations)
            .add_service(settings)
            .add_service(runtime_admin)
            .add_service(sandboxes_service),
        reconciler: sandboxes::Reconciler::new(pools),
        admin: admin_service,
        ledger,
    })
}
