//! The `sandgate` binary's library: each subcommand as a function that takes an already
//! bound listener and a shutdown future, so tests run the real thing on port 0. Each
//! service first checks its settings (`check_config`) and refuses to start on a fatal
//! finding.

pub mod admin_client;
pub mod check_config;
pub mod cli;
mod doors;
pub mod gen_secrets;
mod grpc_peer;
pub mod health_check;
mod http_server;
pub mod ledger_client;
mod services;
mod shutdown;
pub mod support_bundle;
pub mod telemetry;

use std::future::Future;

use anyhow::Context;
use axum::Router;
use check_config::{Settings, refuse_on_fatal};
use sandgate_edge::{GrpcChannel, ModelGw};
use sandgate_runtime_api::sandboxes::process::Doors;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;

use cli::{EdgeArgs, ModelGwArgs, RuntimeApiArgs, ServeArgs};
pub use shutdown::signal;

pub(crate) use services::open_store;
use services::{
    HEALTH, MODEL_GATEWAY, RUNTIME_API_SERVICES, bundle_sources, edge_config, health,
    model_gateway, runtime_api_services, with_reconciler,
};

async fn run_http(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    server: http_server::Config,
) -> anyhow::Result<()> {
    let address = listener.local_addr()?;
    tracing::info!("listening on http://{address}");
    http_server::serve(listener, app, shutdown, server).await?;
    tracing::info!("stopped");
    Ok(())
}

/// Everything a process serves over gRPC, each call in a server span that continues the
/// caller's trace, and with the caller's TCP address (`Request::remote_addr`). The client
/// address an edge names in the metadata is trusted: these ports are internal, the edge's
/// callers.
fn grpc_router(routes: Routes) -> Router {
    sandgate_proto::trace::traced(routes)
        .into_axum_router()
        .layer(axum::middleware::from_fn(grpc_peer::trusted))
}

/// Runs `serve_until_stopped` (handed the shutdown signal) with, when `metrics` is given,
/// `/metrics` (and `beside_metrics`) served on that listener beside it and stopped with it.
async fn with_metrics_listener<F>(
    metrics: Option<TcpListener>,
    metrics_key: Option<String>,
    beside_metrics: Option<Router>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    server: http_server::Config,
    serve_until_stopped: impl FnOnce(tokio_util::sync::WaitForCancellationFutureOwned) -> F,
) -> anyhow::Result<()>
where
    F: Future<Output = anyhow::Result<()>>,
{
    let stopping = CancellationToken::new();
    let trigger = stopping.clone();
    tokio::spawn(async move {
        shutdown.await;
        trigger.cancel();
    });
    let metrics = match metrics {
        Some(listener) => {
            let address = listener.local_addr()?;
            tracing::info!("metrics at http://{address}/metrics");
            let mut routes =
                telemetry::metrics::routes(telemetry::metrics::recorder(), metrics_key);
            if let Some(beside) = beside_metrics {
                routes = routes.merge(beside);
            }
            let stopped = stopping.clone().cancelled_owned();
            Some(tokio::spawn(http_server::serve(
                listener, routes, stopped, server,
            )))
        }
        None => None,
    };
    let served = serve_until_stopped(stopping.clone().cancelled_owned()).await;
    // The main server may also end on its own (an error): the metrics server with it.
    stopping.cancel();
    if let Some(metrics) = metrics
        && let Ok(Err(err)) = metrics.await
    {
        tracing::warn!(error = %err, "the metrics listener failed");
    }
    served
}

/// `sandgate serve`: the edge and every gRPC service in one process. REST and gRPC share
/// the listener; the edge calls the runtime API's services in-process through their gRPC
/// routes, and the model gateway (its hottest path) directly.
pub async fn serve(
    mut args: ServeArgs,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let settings = Settings::serve(&args);
    refuse_on_fatal(&settings)?;
    // Process sandboxes with a network of their own reach Sandgate's port through a
    // listener each (`doors.rs`): the edge without `/metrics`, the support bundle or the
    // public gRPC routes, knowing which sandbox calls.
    let doors = match args.sandboxes.sandbox_driver {
        cli::SandboxDriverKind::Process => {
            let doors = doors::EdgeDoors::new(args.server.config());
            args.sandboxes.sandbox_doors = Some(Doors {
                inside: listener.local_addr()?.port(),
                opener: doors.clone(),
            });
            Some(doors)
        }
        _ => None,
    };
    // First: what the services record from their start is kept.
    let metrics = telemetry::metrics::recorder();
    let store = open_store(&args.store).await?;
    let gateway = model_gateway(
        store.clone(),
        &args.gateway,
        args.sandboxes.idle.runtime_idle_seconds,
    )?;
    let runtime_api = runtime_api_services(
        store.clone(),
        &args.auth,
        &args.catalog,
        &args.admin,
        &args.sandboxes,
        &args.store.data_dir,
    )
    .await?;
    let ledger = runtime_api.ledger.clone();
    let services: Vec<&str> = RUNTIME_API_SERVICES
        .iter()
        .copied()
        .chain([MODEL_GATEWAY])
        .collect();
    // Traced once, for both ways in: the edge's in-process calls and gRPC callers.
    let grpc = sandgate_proto::trace::traced(
        runtime_api
            .routes
            .add_service(sandgate_model_gw::grpc_service(gateway.clone()))
            .add_service(health(store.clone(), &services)),
    );
    let channel = GrpcChannel::in_process(grpc.clone());
    let model_gw = ModelGw::Local(std::sync::Arc::new(gateway.clone()));
    let bundle = bundle_sources(
        "serve",
        settings,
        &store,
        (&args.store, &args.admin),
        Some(&args.gateway),
        Some(metrics.clone()),
    )?;
    let edge = sandgate_edge::router(channel, edge_config(&args.edge, Some(model_gw)));
    if let Some(doors) = &doors {
        doors.serve_with(edge.clone());
    }
    let mut app = edge
        .merge(telemetry::metrics::routes(
            metrics,
            args.edge.metrics_api_key.clone(),
        ))
        .merge(support_bundle::http::routes(
            runtime_api.admin.clone(),
            bundle,
        ));
    let mut direct_grpc = Router::new();
    for service in &services {
        direct_grpc = direct_grpc.route_service(&format!("/{service}/{{*rpc}}"), grpc.clone());
    }
    // Direct gRPC callers share the public port: they are known by their TCP address,
    // never by a client address they name themselves (only the edge, in-process, names
    // one).
    app = app.merge(direct_grpc.layer(axum::middleware::from_fn(grpc_peer::untrusted)));
    let served = with_reconciler(
        runtime_api.reconciler,
        run_http(listener, app, shutdown, args.server.config()),
    )
    .await;
    if let Some(doors) = &doors {
        doors.close().await;
    }
    gateway.flush_spend_log().await;
    ledger.flush().await;
    served
}

/// `sandgate runtime-api`: the runtime API's gRPC services alone, and `/metrics` on
/// `metrics` when given.
pub async fn runtime_api(
    args: RuntimeApiArgs,
    listener: TcpListener,
    metrics: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let settings = Settings::runtime_api(&args);
    refuse_on_fatal(&settings)?;
    if metrics.is_some() {
        // Before the services exist: what they record from their start is kept.
        telemetry::metrics::recorder();
    }
    let store = open_store(&args.store).await?;
    let bundle = bundle_sources(
        "runtime-api",
        settings,
        &store,
        (&args.store, &args.admin),
        None,
        metrics.is_some().then(telemetry::metrics::recorder),
    )?;
    let runtime_api = runtime_api_services(
        store.clone(),
        &args.auth,
        &args.catalog,
        &args.admin,
        &args.sandboxes,
        &args.store.data_dir,
    )
    .await?;
    let ledger = runtime_api.ledger.clone();
    let routes = runtime_api
        .routes
        .add_service(health(store, RUNTIME_API_SERVICES));
    let server = args.server.config();
    // The support bundle beside the metrics: an internal port, like the gRPC one.
    let beside_metrics = support_bundle::http::routes(runtime_api.admin.clone(), bundle);
    let served = with_metrics_listener(
        metrics,
        args.metrics.metrics_api_key.clone(),
        Some(beside_metrics),
        shutdown,
        server,
        |stopped| {
            with_reconciler(
                runtime_api.reconciler,
                run_http(listener, grpc_router(routes), stopped, server),
            )
        },
    )
    .await;
    ledger.flush().await;
    served
}

/// `sandgate model-gw`: the model gateway's gRPC service alone (with gRPC health), and
/// `/metrics` on `metrics` when given.
pub async fn model_gw(
    args: ModelGwArgs,
    listener: TcpListener,
    metrics: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    refuse_on_fatal(&Settings::model_gw(&args))?;
    if metrics.is_some() {
        // Before the services exist: what they record from their start is kept.
        telemetry::metrics::recorder();
    }
    let store = open_store(&args.store).await?;
    let gateway = model_gateway(store.clone(), &args.gateway, args.idle.runtime_idle_seconds)?;
    let grpc = Routes::new(sandgate_model_gw::grpc_service(gateway.clone()))
        .add_service(health(store, &[MODEL_GATEWAY, HEALTH]));
    let server = args.server.config();
    let served = with_metrics_listener(
        metrics,
        args.metrics.metrics_api_key.clone(),
        None,
        shutdown,
        server,
        |stopped| run_http(listener, grpc_router(grpc), stopped, server),
    )
    .await;
    gateway.flush_spend_log().await;
    served
}

/// `sandgate edge`: the REST edge alone, calling the services over the network.
pub async fn edge(
    args: EdgeArgs,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    refuse_on_fatal(&Settings::edge(&args))?;
    let runtime_api = GrpcChannel::remote(&args.runtime_api)
        .with_context(|| format!("invalid --runtime-api URL {}", args.runtime_api))?;
    let model_gw = args
        .model_gw
        .as_deref()
        .map(|url| {
            GrpcChannel::remote(url)
                .map(ModelGw::grpc)
                .with_context(|| format!("invalid --model-gw URL {url}"))
        })
        .transpose()?;
    let metrics = telemetry::metrics::recorder();
    let app = sandgate_edge::router(runtime_api, edge_config(&args.edge, model_gw)).merge(
        telemetry::metrics::routes(metrics, args.edge.metrics_api_key.clone()),
    );
    run_http(listener, app, shutdown, args.server.config()).await
}
