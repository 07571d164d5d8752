//! What every route of the edge shares: the gRPC clients of the services behind it, the
//! model gateway, and the few settings the handlers read. Its own module so that handlers
//! depend on it, not on the crate root that assembles the router.

use std::sync::{Arc, Mutex};

use bytes::Bytes;

use sandgate_proto::MAX_MESSAGE_BYTES;
use sandgate_proto::admin::v1::runtime_admin_client::RuntimeAdminClient;
use sandgate_proto::conversations::v1::conversations_client::ConversationsClient;
use sandgate_proto::sandboxes::v1::sandboxes_client::SandboxesClient;
use sandgate_proto::settings::v1::settings_client::SettingsClient;
use tonic_health::pb::health_client::HealthClient;

use crate::channel::GrpcChannel;
use crate::model_gw::ModelGw;

/// What every route shares; cloned for each request, so one `Arc`.
#[derive(Clone)]
pub(crate) struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

pub(crate) struct Shared {
    pub(crate) conversations: ConversationsClient<GrpcChannel>,
    pub(crate) settings: SettingsClient<GrpcChannel>,
    pub(crate) admin: RuntimeAdminClient<GrpcChannel>,
    pub(crate) sandboxes: SandboxesClient<GrpcChannel>,
    pub(crate) models: Option<ModelGw>,
    /// The warm runtime configuration list last rendered.
    pub(crate) config_list: Arc<ListCache>,
    pub(crate) health: HealthClient<GrpcChannel>,
    /// The OpenAPI document, serialized once.
    pub(crate) openapi: bytes::Bytes,
    /// Bodies past this many bytes are answered 413.
    pub(crate) body_limit: usize,
    /// Proxies whose `X-Forwarded-For` names the client.
    pub(crate) trusted_proxies: Arc<[ipnet::IpNet]>,
}

impl AppState {
    /// Clients of the runtime API's services over `runtime_api`, each allowed the
    /// project's largest message.
    pub(crate) fn new(
        runtime_api: GrpcChannel,
        models: Option<ModelGw>,
        openapi: bytes::Bytes,
        body_limit: usize,
        trusted_proxies: Vec<ipnet::IpNet>,
    ) -> Self {
        Self(Arc::new(Shared {
            conversations: ConversationsClient::new(runtime_api.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            settings: SettingsClient::new(runtime_api.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            admin: RuntimeAdminClient::new(runtime_api.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            sandboxes: SandboxesClient::new(runtime_api.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            models,
            config_list: Default::default(),
            health: HealthClient::new(runtime_api),
            openapi,
            body_limit,
            trusted_proxies: trusted_proxies.into(),
        }))
    }
}

/// The last configuration list rendered, by the service's tag for its contents: while
/// the tag is current the service sends no list and the edge answers these bytes.
#[derive(Default)]
pub(crate) struct ListCache(Mutex<Option<Arc<RenderedList>>>);

pub(crate) struct RenderedList {
    pub(crate) etag: String,
    pub(crate) body: Bytes,
}

impl ListCache {
    pub(crate) fn get(&self) -> Option<Arc<RenderedList>> {
        self.0.lock().ok().and_then(|cached| cached.clone())
    }

    pub(crate) fn put(&self, rendered: Arc<RenderedList>) {
        if let Ok(mut cached) = self.0.lock() {
            *cached = Some(rendered);
        }
    }
}
