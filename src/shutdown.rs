//! One signal handler per process, and a bounded drain.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Resolves on the first SIGTERM or SIGINT (Ctrl-C).
pub async fn signal() {
    let interrupt = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %err, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut terminate) => drop(terminate.recv().await),
            Err(err) => {
                tracing::error!(error = %err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => tracing::info!("SIGINT received; draining"),
        () = terminate => tracing::info!("SIGTERM received; draining"),
    }
}

/// Serves until `shutdown`, then stops accepting and lets in-flight requests finish for
/// at most `grace` (shorter than a pod's termination grace period, so the process exits
/// on its own terms). A streamed answer (a chat completion's events) is in flight until
/// its body ends: each connection's graceful shutdown waits for its response to finish,
/// and only idle connections close at once. What still runs when `grace` ends is cut.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let stopping = CancellationToken::new();
    let trigger = stopping.clone();
    tokio::spawn(async move {
        shutdown.await;
        trigger.cancel();
    });
    // No Nagle: a streamed answer (an LLM's server-sent events) leaves in several writes,
    // and Nagle would hold each after the first until the client's delayed ACK (≈ 40 ms).
    let listener = axum::serve::ListenerExt::tap_io(listener, |stream| {
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "cannot set TCP_NODELAY");
        }
    });
    // Each request carries its TCP peer (`ConnectInfo`): per-client limits are keyed by it.
    let server = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(stopping.clone().cancelled_owned());
    tokio::select! {
        result = server => result,
        () = async {
            stopping.cancelled().await;
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!(grace_seconds = grace.as_secs(), "grace period over; exiting with requests in flight");
            Ok(())
        }
    }
}
