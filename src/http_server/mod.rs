//! The HTTP server every process runs: HTTP/1.1 and HTTP/2 on one port, with the limits
//! a production ingress puts on its clients, and a bounded drain.
//!
//! What a client may hold, and for how long:
//! - a connection that has not finished a request's headers `header_read_timeout` after
//!   its first byte is cut (a client trickling a header every few seconds included);
//! - a connection with no request in flight is closed after `idle_timeout` (longer than
//!   the upstream keep-alive of the usual ingresses, 60 s, so that they close first);
//! - a request body that sends nothing for `body_idle_timeout` fails (nginx's
//!   `client_body_timeout`);
//! - at most `max_connections` are open. A new one at the cap displaces the connection
//!   that has waited longest without a request in flight, so that clients which hold
//!   connections open without using them cannot lock out those that do (`/health`
//!   included); when every connection is busy, new ones wait in the listen backlog.
//!
//! On shutdown, connections with no request in flight close at once; the others finish
//! their requests (a streamed answer until its body ends) for at most the grace period.
//!
//! Connections are accepted here and served on the process's serving threads (`workers`):
//! a runtime per core, each serving a connection from start to end, with what its calls
//! open (their upstream and Redis connections) on the same thread.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

mod activity;
mod workers;

use activity::{Activity, Busy, Verdict, Watched, millis};

/// How long clients may take, and how many may be connected at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub body_idle_timeout: Duration,
}

impl Default for Limits {
    /// nginx's and Go's customary values.
    fn default() -> Self {
        Limits {
            max_connections: 4096,
            header_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(75),
            body_idle_timeout: Duration::from_secs(60),
        }
    }
}

/// How often, at the cap with every connection busy, to look again for one to close.
const EVICTION_RETRY: Duration = Duration::from_millis(100);

/// How a server treats its clients, and how long it drains.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub grace: Duration,
    pub limits: Limits,
    pub threads: Threads,
}

/// Which serving threads a server's connections are served on (`workers`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Threads {
    /// Its own, started with it and ended with it: for a server that lives as long as
    /// what it serves (the API's, the metrics listener's; a test's whole `serve`).
    #[default]
    Own,
    /// The process's shared ones, which never end: for servers that come and go while
    /// the process's store and gateway live on (process sandboxes' doors). Threads that
    /// ended would leave their per-thread Redis connections and upstream pools, driven by
    /// runtimes gone, to whichever new thread is given their id.
    Shared,
}

/// Descriptors kept free beyond the connections: the store's, the upstreams', logs.
const SPARE_DESCRIPTORS: u64 = 256;

/// Raises this process's soft limit on open files to its hard limit (as Go does at start)
/// and returns `max_connections`, lowered if the descriptors would not suffice.
pub fn fit_connections_to_descriptors(max_connections: usize) -> usize {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if let Err(err) = setrlimit(Resource::Nofile, limit) {
            tracing::debug!(error = %err, "cannot raise the open-file limit");
            limit = getrlimit(Resource::Nofile);
        }
    }
    let Some(descriptors) = limit.current else {
        return max_connections;
    };
    let room = usize::try_from(descriptors.saturating_sub(SPARE_DESCRIPTORS))
        .unwrap_or(usize::MAX)
        .max(1);
    if room < max_connections {
        tracing::warn!(
            max_connections,
            open_file_limit = descriptors,
            lowered_to = room,
            "too few file descriptors for --max-connections; lowered (raise `ulimit -n`)"
        );
        return room;
    }
    max_connections
}

/// Serves until `shutdown`, then stops accepting and lets in-flight requests finish for
/// at most `grace` (shorter than a pod's termination grace period, so the process exits
/// on its own terms). What still runs when `grace` ends is cut.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    Config {
        grace,
        limits,
        threads,
    }: Config,
) -> io::Result<()> {
    let stopping = CancellationToken::new();
    let trigger = stopping.clone();
    tokio::spawn(async move {
        shutdown.await;
        trigger.cancel();
    });
    let server = Server::new(limits, stopping.clone());
    let tracker = TaskTracker::new();
    let workers = match threads {
        Threads::Own => workers::pool(),
        Threads::Shared => workers::shared(),
    };
    // What this server still serves when it returns (the grace period over) or is
    // dropped ends then, as its tasks would with its runtime.
    let _cut = server.cut.clone().drop_guard();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of descriptors, or a connection reset before it was accepted:
                    // neither ends the server. Back off a little on the first kind.
                    tracing::debug!(error = %err, "accept failed");
                    if is_resource_exhaustion(&err) {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    continue;
                }
            },
            () = stopping.cancelled() => break,
        };
        let Some(permit) = server.admit(&stopping).await else {
            break;
        };
        // No Nagle: a streamed answer (an LLM's server-sent events) leaves in several
        // writes, and Nagle would hold each after the first until the client's delayed
        // ACK (≈ 40 ms).
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "cannot set TCP_NODELAY");
        }
        // Registered before its task runs: a connection that holds a permit can always
        // be found to make room, however busy the runtime.
        let (id, activity) = server.register();
        // Out of this runtime, to be taken in by the serving thread's.
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(err) => {
                tracing::debug!(error = %err, "cannot hand the connection over");
                server.open().remove(&id);
                continue;
            }
        };
        let server = server.clone();
        let app = app.clone();
        let tracked = tracker.token();
        workers.spawn_pinned(move || async move {
            match TcpStream::from_std(stream) {
                Ok(stream) => server.connection(id, activity, stream, peer, app).await,
                Err(err) => {
                    tracing::debug!(error = %err, "cannot serve the connection");
                    server.open().remove(&id);
                }
            }
            drop((permit, tracked));
        });
    }
    tracker.close();
    if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
        tracing::warn!(
            grace_seconds = grace.as_secs(),
            "grace period over; exiting with requests in flight"
        );
    }
    Ok(())
}

fn is_resource_exhaustion(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(code) if code == rustix::io::Errno::MFILE.raw_os_error()
            || code == rustix::io::Errno::NFILE.raw_os_error()
            || code == rustix::io::Errno::NOBUFS.raw_os_error()
            || code == rustix::io::Errno::NOMEM.raw_os_error()
    )
}

/// What every connection of one server shares.
#[derive(Clone)]
struct Server {
    limits: Limits,
    builder: Arc<auto::Builder<TokioExecutor>>,
    permits: Arc<Semaphore>,
    stopping: CancellationToken,
    /// Cancelled when the server ends: every connection still open ends at once.
    cut: CancellationToken,
    open: Arc<Mutex<HashMap<u64, Arc<Activity>>>>,
    next_id: Arc<AtomicU64>,
}

impl Server {
    fn new(limits: Limits, stopping: CancellationToken) -> Server {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        // The header deadline is this module's (it must not also bound idle keep-alive,
        // as hyper's would).
        builder.http1().timer(TokioTimer::new());
        // A peer that stops answering pings is gone: its streams are freed.
        builder
            .http2()
            .timer(TokioTimer::new())
            .keep_alive_interval(limits.idle_timeout / 2)
            .keep_alive_timeout(Duration::from_secs(20));
        Server {
            limits,
            builder: Arc::new(builder),
            permits: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            stopping,
            cut: CancellationToken::new(),
            open: Arc::default(),
            next_id: Arc::default(),
        }
    }

    /// The open connections. Nothing panics while holding them; were it, the map is
    /// still whole.
    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Activity>>> {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A slot for a new connection: at once below the cap; at the cap, once the
    /// connection that has waited longest with nothing in flight has made room (looked for
    /// again while every connection is busy). `None` when the server stops first.
    async fn admit(&self, stopping: &CancellationToken) -> Option<OwnedSemaphorePermit> {
        loop {
            if let Ok(permit) = self.permits.clone().try_acquire_owned() {
                return Some(permit);
            }
            self.evict_longest_waiting();
            tokio::select! {
                // The semaphore is never closed; were it, there would be nothing to serve.
                permit = self.permits.clone().acquire_owned() => return permit.ok(),
                () = tokio::time::sleep(EVICTION_RETRY) => {}
                () = stopping.cancelled() => return None,
            }
        }
    }

    fn register(&self) -> (u64, Arc<Activity>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let activity = Arc::new(Activity::new());
        self.open().insert(id, activity.clone());
        (id, activity)
    }

    async fn connection(
        &self,
        id: u64,
        activity: Arc<Activity>,
        stream: TcpStream,
        peer: SocketAddr,
        app: Router,
    ) {
        metrics::gauge!("sandgate_http_connections").increment(1.0);
        let reason = self.run(stream, peer, app, &activity).await;
        self.open().remove(&id);
        metrics::gauge!("sandgate_http_connections").decrement(1.0);
        if let Some(reason) = reason {
            tracing::debug!(%peer, reason, "connection closed by the server");
            metrics::counter!("sandgate_http_connections_closed_total", "reason" => reason)
                .increment(1);
        }
    }

    /// Serves one connection until it ends; returns why the server ended it, if it did.
    async fn run(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        app: Router,
        activity: &Arc<Activity>,
    ) -> Option<&'static str> {
        let io = TokioIo::new(Watched {
            io: stream,
            activity: activity.clone(),
        });
        let service = {
            let activity = activity.clone();
            let body_idle_timeout = self.limits.body_idle_timeout;
            hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let busy = Busy::begin(&activity);
                let mut request = request.map(|body| {
                    Body::new(tower_http::timeout::TimeoutBody::new(
                        body_idle_timeout,
                        body,
                    ))
                });
                request.extensions_mut().insert(ConnectInfo(peer));
                let app = app.clone();
                async move {
                    let response = app.oneshot(request).await?;
                    // In flight until the answer's body ends (a stream's last event).
                    Ok::<_, std::convert::Infallible>(
                        response.map(|body| sandgate_edge::holding(body, busy)),
                    )
                }
            })
        };
        let connection = self.builder.serve_connection(io, service);
        tokio::pin!(connection);
        let mut closing = false;
        // Nothing wakes the connection when a request begins to arrive or ends: it looks
        // at its deadlines at least once a period (the shorter timeout). A deadline set
        // after a look is at least a period from it, so no look comes after it and one
        // comes at it: each is met to the millisecond, and a request costs no wake-up.
        let period = millis(
            self.limits
                .header_read_timeout
                .min(self.limits.idle_timeout),
        )
        .max(1);
        loop {
            let check = activity
                .next_check(&self.limits)
                .unwrap_or(u64::MAX)
                .min(activity.now().saturating_add(period));
            let check = activity.epoch + Duration::from_millis(check);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(err) = result {
                        tracing::debug!(%peer, error = %err, "connection ended with an error");
                    }
                    return None;
                }
                () = activity.evicted.cancelled() => return Some("evicted"),
                () = self.cut.cancelled() => return Some("grace_over"),
                () = self.stopping.cancelled(), if !closing => {
                    if !activity.is_busy() {
                        return Some("shutdown");
                    }
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                }
                () = tokio::time::sleep_until(check), if !closing => {
                    match activity.verdict(&self.limits, activity.now()) {
                        Verdict::Keep => {}
                        Verdict::HeaderTimeout => return Some("header_timeout"),
                        Verdict::Idle => {
                            connection.as_mut().graceful_shutdown();
                            closing = true;
                            metrics::counter!(
                                "sandgate_http_connections_closed_total", "reason" => "idle"
                            )
                            .increment(1);
                        }
                    }
                }
            }
        }
    }

    /// At the cap: ends the connection that has waited longest with no request in flight.
    fn evict_longest_waiting(&self) {
        let open = self.open();
        // One on its way out already makes the room asked for.
        if open
            .values()
            .any(|activity| activity.evicted.is_cancelled())
        {
            return;
        }
        let longest = open
            .values()
            .filter(|activity| !activity.is_busy() && !activity.evicted.is_cancelled())
            .min_by_key(|activity| activity.waiting_since());
        if let Some(activity) = longest {
            activity.evicted.cancel();
        }
    }
}

#[cfg(test)]
mod tests;
