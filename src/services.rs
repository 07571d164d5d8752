//! Each service of the `sandgate` binary configured from its command line: the store, the
//! runtime API's services with their sandbox driver, the model gateway, the edge, the
//! support bundle's sources and gRPC health. `lib.rs` runs them.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use crate::check_config::Settings;
use anyhow::Context;
use sandgate_edge::{EdgeConfig, ModelGw};
use sandgate_model_gw::{AnswerLimits, ConfigFile, GatewayOptions, ModelGatewayService};
use sandgate_proto::admin::v1::runtime_admin_server::RuntimeAdminServer;
use sandgate_proto::conversations::v1::conversations_server::ConversationsServer;
use sandgate_proto::models::v1::model_gateway_server::ModelGatewayServer;
use sandgate_proto::sandboxes::v1::sandboxes_server::SandboxesServer;
use sandgate_proto::settings::v1::settings_server::SettingsServer;
use sandgate_runtime_api::admin::configs::WarmLimits;
use sandgate_runtime_api::admin::rate_limit::LoginRate;
use sandgate_runtime_api::ambient::SystemClock;
use sandgate_runtime_api::conversations::creation_rate::CreationRate;
use sandgate_runtime_api::sandboxes::driver::{LocalDriver, SandboxDriver};
use sandgate_runtime_api::sandboxes::kubernetes::{KubernetesDriver, KubernetesOptions};
use sandgate_runtime_api::sandboxes::process::{NetworkOptions, ProcessDriver, ProcessOptions};
use sandgate_runtime_api::sandboxes::{SandboxOptions, SandboxPrices, SandboxesService};
use sandgate_runtime_api::{
    AdminConfig, AuthConfig, CatalogConfig, ConversationsService, RuntimeAdminService, RuntimeApi,
    SandboxConfig, SettingsService, StoreHealthService,
};
use sandgate_store::models::SpendLogRetention;
use sandgate_store::{Backend, EventRetention, RedisTls, Store, redact_url};
use tonic::server::NamedService;

use crate::cli::{
    AdminArgs, AuthArgs, CatalogArgs, EdgeLimits, GatewayArgs, SandboxArgs, SandboxDriverKind,
    StoreArgs,
};
use crate::support_bundle;

pub(crate) const HEALTH: &str = "grpc.health.v1.Health";
pub(crate) const MODEL_GATEWAY: &str =
    <ModelGatewayServer<ModelGatewayService> as NamedService>::NAME;

/// The gRPC services of the runtime API, by their full names.
pub(crate) const RUNTIME_API_SERVICES: &[&str] = &[
    <ConversationsServer<ConversationsService> as NamedService>::NAME,
    <SettingsServer<SettingsService> as NamedService>::NAME,
    <RuntimeAdminServer<RuntimeAdminService> as NamedService>::NAME,
    <SandboxesServer<SandboxesService> as NamedService>::NAME,
    HEALTH,
];

/// gRPC health for a process serving `services`.
pub(crate) fn health(
    store: Store,
    services: &[&str],
) -> tonic_health::pb::health_server::HealthServer<StoreHealthService> {
    tonic_health::pb::health_server::HealthServer::new(StoreHealthService::new(store, services))
}

/// The TLS material `args` names, read from its files.
fn redis_tls(args: &StoreArgs) -> anyhow::Result<RedisTls> {
    let read = |path: &std::path::Path, flag: &str| {
        std::fs::read(path).with_context(|| format!("cannot read {flag} {}", path.display()))
    };
    Ok(RedisTls {
        ca_cert: args
            .redis_ca_cert
            .as_deref()
            .map(|path| read(path, "--redis-ca-cert"))
            .transpose()?,
        client: match (&args.redis_client_cert, &args.redis_client_key) {
            (Some(cert), Some(key)) => Some((
                read(cert, "--redis-client-cert")?,
                read(key, "--redis-client-key")?,
            )),
            _ => None,
        },
    })
}

pub(crate) async fn open_store(args: &StoreArgs) -> anyhow::Result<Store> {
    let backend = match &args.redis {
        Some(url) => Backend::Redis {
            url: url.clone(),
            tls: redis_tls(args)?,
            min_replicas_ack: args.redis_min_replicas_ack,
        },
        None => Backend::Embedded {
            data_dir: args.data_dir.clone(),
        },
    };
    let mut store = Store::open(&backend).await?;
    if args.ledger == "off" {
        store.ledger = std::sync::Arc::new(sandgate_store::ledger::Unkept);
        tracing::info!("ledger: off");
    } else {
        // A conversation's counts are counted again under each of its tags.
        store.ledger = std::sync::Arc::new(sandgate_store::ledger::tagging::Tagging::new(
            store.ledger.clone(),
            store.conversations.clone(),
        ));
    }
    match &args.redis {
        Some(url) => tracing::info!(redis = %redact_url(url), "store: Redis"),
        None => tracing::info!(data_dir = %args.data_dir.display(), "store: embedded"),
    }
    Ok(store)
}

fn auth_config(args: &AuthArgs) -> AuthConfig {
    AuthConfig {
        webhook_api_keys: args.webhook_api_keys.clone(),
        runtime_api_keys: args.default_api_key.iter().cloned().collect(),
    }
}

/// How long a `process` sandbox may take to exit on SIGTERM (pause, delete) before it is
/// killed: the agent-server saves its conversations as it stops.
const PROCESS_STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// The sandbox driver and options, configured from the command line; `process` sandboxes
/// live under `data_dir`.
async fn sandbox_config(args: &SandboxArgs, data_dir: &Path) -> anyhow::Result<SandboxConfig> {
    let clock = Arc::new(SystemClock);
    let driver: Arc<dyn SandboxDriver> = match args.sandbox_driver {
        SandboxDriverKind::Local => {
            tracing::info!("sandbox driver: local (no containers run)");
            Arc::new(LocalDriver::new(
                args.local_sandbox_start_seconds,
                clock.clone(),
            ))
        }
        SandboxDriverKind::Kubernetes => {
            let options = KubernetesOptions {
                namespace: args.sandbox_namespace.clone(),
                storage_class: args.storage_class.clone(),
                ephemeral_storage: args.ephemeral_storage_size.clone(),
                port: args.sandbox_port,
                ingress_class: args.sandbox_ingress_class.clone(),
                tls_secret: args.sandbox_tls_secret.clone(),
                base_url: args.runtime_base_url.clone(),
                separator: args.runtime_url_separator.clone(),
                pod_security: args.sandbox_pod_security,
            };
            tracing::info!(namespace = %options.namespace, "sandbox driver: kubernetes");
            Arc::new(
                KubernetesDriver::connect(options)
                    .await
                    .map_err(|err| anyhow::anyhow!("--sandbox-driver kubernetes: {err}"))?,
            )
        }
        SandboxDriverKind::Process => {
            let options = ProcessOptions {
                root: data_dir.join("sandboxes"),
                state: data_dir.join("sandbox-state"),
                read_only: args.sandbox_read_only_paths.clone(),
                port: args.sandbox_port,
                stop_grace: PROCESS_STOP_GRACE,
                network: NetworkOptions {
                    forwards: args.sandbox_forward_ports.clone(),
                    egress: args.sandbox_egress,
                },
                doors: args.sandbox_doors.clone(),
                isolation: args.sandbox_isolation,
            };
            tracing::info!(root = %options.root.display(), "sandbox driver: process (local processes)");
            tracing::warn!(
                "sandbox driver: process runs each sandbox's command on this machine: whoever holds the runtime API key runs programs here, kept from Sandgate, from each other and from this machine's network as far as this machine allows (the gaps are said next), with no cgroup (for one machine; for many tenants, the kubernetes driver)"
            );
            Arc::new(
                ProcessDriver::open(options, clock.as_ref())
                    .map_err(|err| anyhow::anyhow!("--sandbox-driver process: {err}"))?,
            )
        }
    };
    Ok(SandboxConfig {
        driver,
        options: SandboxOptions {
            base_url: args.runtime_base_url.clone(),
            separator: args.runtime_url_separator.clone(),
            disable_ssl: args.runtime_disable_ssl,
            dead_after: args.runtime_dead_seconds,
            idle_after: args.idle.runtime_idle_seconds,
            reconcile_interval: args.reconcile_interval,
            start_timeout: args.sandbox_start_timeout,
            max_runtimes: args.max_runtimes,
            start_rate: args.sandbox_start_rate,
            prices: SandboxPrices {
                running_hour: args.sandbox_hour_price.unwrap_or(0.0),
                paused_hour: args.sandbox_paused_hour_price.unwrap_or(0.0),
            },
            ..SandboxOptions::default()
        },
        session_key_secret: args
            .sandbox_key_secret
            .as_ref()
            .map(|secret| secret.as_bytes().to_vec()),
        clock,
    })
}

/// The runtime API's services, configured from the command line.
pub(crate) async fn runtime_api_services(
    store: Store,
    auth: &AuthArgs,
    catalog: &CatalogArgs,
    admin: &AdminArgs,
    sandboxes: &SandboxArgs,
    data_dir: &Path,
) -> anyhow::Result<RuntimeApi> {
    let admin = AdminConfig {
        admin_password: admin
            .admin_password
            .clone()
            .filter(|password| !password.is_empty()),
        jwt_secret: admin
            .jwt_secret
            .as_ref()
            .map(|secret| secret.as_bytes().to_vec()),
        default_api_key: auth.default_api_key.clone(),
        max_runtimes: sandboxes.max_runtimes,
        warm_runtimes_file: admin.warm_runtimes_file.clone(),
        overlay: admin.warm_runtime_config_overlay,
        pbkdf2_iterations: admin.pbkdf2_iterations,
        login_rate: (admin.admin_login_rate > 0).then_some(LoginRate {
            attempts: admin.admin_login_rate,
            window: admin.admin_login_rate_window,
        }),
        account_login_rate: (admin.admin_login_account_rate > 0).then_some(LoginRate {
            attempts: admin.admin_login_account_rate,
            window: admin.admin_login_rate_window,
        }),
        warm_limits: WarmLimits {
            max_per_pool: admin.warm_pool_max_size,
            max_total: admin.warm_pools_max_total,
        },
    };
    let sandboxes = sandbox_config(sandboxes, data_dir).await?;
    let catalog = CatalogConfig {
        event_retention: EventRetention {
            max_per_conversation: catalog.events_per_conversation as usize,
            max_age_seconds: catalog.events_max_age_seconds,
        },
        creation_rate: (catalog.webhook_new_conversations_rate > 0).then_some(CreationRate {
            conversations: catalog.webhook_new_conversations_rate,
            window: catalog.webhook_new_conversations_window,
        }),
    };
    sandgate_runtime_api::grpc_routes(store, &auth_config(auth), catalog, admin, sandboxes)
        .map_err(|err| anyhow::anyhow!("invalid --warm-runtimes-file: {err}"))
}

/// What the support bundle of a process running the runtime API reads: `gateway` when it
/// runs the model gateway too.
pub(crate) fn bundle_sources(
    service: &'static str,
    settings: Settings,
    store: &Store,
    args: (&StoreArgs, &AdminArgs),
    gateway: Option<&GatewayArgs>,
    metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
) -> anyhow::Result<support_bundle::Sources> {
    let (store_args, admin) = args;
    let installer = sandgate_runtime_api::admin::installer::InstallerFile::open(
        admin.warm_runtimes_file.clone(),
    )
    .map_err(|err| anyhow::anyhow!("invalid --warm-runtimes-file: {err}"))?;
    let gateway = gateway
        .map(|gateway| ConfigFile::open(gateway.gateway_config.clone()).map(Arc::new))
        .transpose()
        .map_err(|err| anyhow::anyhow!("invalid --gateway-config: {err}"))?;
    Ok(support_bundle::Sources {
        service,
        settings,
        store: Some(store.clone()),
        data_dir: store_args
            .redis
            .is_none()
            .then(|| store_args.data_dir.display().to_string()),
        warm_configs: Some(sandgate_runtime_api::admin::source::WarmConfigSource::new(
            store.clone(),
            installer,
            admin.warm_runtime_config_overlay,
        )),
        gateway,
        metrics,
    })
}

/// Runs `serve_until_stopped` with the reconciler beside it, stopping the reconciler after.
pub(crate) async fn with_reconciler(
    reconciler: sandgate_runtime_api::sandboxes::Reconciler,
    serve_until_stopped: impl Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    let stop = tokio_util::sync::CancellationToken::new();
    let reconciling = tokio::spawn(reconciler.run(stop.clone()));
    let served = serve_until_stopped.await;
    stop.cancel();
    drop(reconciling.await);
    served
}

/// The model gateway, configured from the command line; `idle_after`: `RUNTIME_IDLE_SECONDS`.
pub(crate) fn model_gateway(
    store: Store,
    args: &GatewayArgs,
    idle_after: std::time::Duration,
) -> anyhow::Result<ModelGatewayService> {
    let config = ConfigFile::open(args.gateway_config.clone())
        .map_err(|err| anyhow::anyhow!("invalid --gateway-config: {err}"))?;
    ModelGatewayService::new(
        store,
        GatewayOptions {
            config,
            master_key: args.proxy_master_key.clone(),
            connect_timeout: args.gateway_connect_timeout,
            read_timeout: args.gateway_read_timeout,
            retries: args.gateway_retries,
            allowed_upstream_hosts: args.gateway_allowed_upstream_hosts.clone(),
            limits: AnswerLimits {
                max_answer_bytes: usize::try_from(args.gateway_max_answer_bytes)
                    .unwrap_or(usize::MAX),
                max_event_bytes: usize::try_from(args.gateway_max_event_bytes)
                    .unwrap_or(usize::MAX),
                call_deadline: args.gateway_call_deadline,
            },
            spend_log: SpendLogRetention {
                max_entries: usize::try_from(args.spend_log_max_entries).unwrap_or(usize::MAX),
                max_age_ms: i64::try_from(args.spend_log_max_age.as_millis()).unwrap_or(i64::MAX),
            },
            idle_after,
            max_added_models: usize::try_from(args.gateway_max_added_models).unwrap_or(usize::MAX),
        },
    )
    .map_err(|err| anyhow::anyhow!("model gateway: {err}"))
}

pub(crate) fn edge_config(limits: &EdgeLimits, model_gw: Option<ModelGw>) -> EdgeConfig {
    EdgeConfig {
        model_gw,
        body_limit: limits.body_limit,
        gateway_body_limit: limits.gateway_body_limit,
        trusted_proxies: limits.trusted_proxies.clone(),
        console: limits.console,
        conversation_schemas: sandgate_conversation::openapi_schemas(),
    }
}
