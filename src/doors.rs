//! `serve`'s doors for `process` sandboxes (runtime-api's `process/door.rs`): each a
//! listener of its own on this machine's `127.0.0.1`, served by the edge without
//! `/metrics`, the support bundle or the public gRPC routes, every request as coming from
//! the door's peer address, whatever TCP peer pasta connected from.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use sandgate_runtime_api::sandboxes::process::{Door, OpenDoor, door_peer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::http_server::{self, Config, Threads};

/// The connections one sandbox may hold open to its door at once: an agent-server holds
/// a few (its webhooks, its LLM calls); past it, new ones wait in the listen backlog. A
/// sandbox cannot take Sandgate's descriptors (nor, as with one listener for all, the
/// others' connections).
const DOOR_MAX_CONNECTIONS: usize = 256;

/// Opens doors once the edge exists ([`EdgeDoors::serve_with`]).
pub(crate) struct EdgeDoors {
    /// The edge, from [`EdgeDoors::serve_with`] until [`EdgeDoors::close`]: the edge holds
    /// the services, which hold the sandbox driver, which holds these doors, so the
    /// driver (whose drop stops the sandboxes) is dropped only once this is let go of.
    edge: Mutex<Option<Router>>,
    config: Config,
    runtime: tokio::runtime::Handle,
    /// Every door's server, and what closes them all at shutdown.
    served: TaskTracker,
    stopping: CancellationToken,
}

impl EdgeDoors {
    /// Doors served with `config`, on the calling runtime.
    pub fn new(mut config: Config) -> Arc<Self> {
        config.limits.max_connections = config.limits.max_connections.min(DOOR_MAX_CONNECTIONS);
        // A door ends with its sandbox while the process lives on: on threads that stay.
        config.threads = Threads::Shared;
        Arc::new(Self {
            edge: Mutex::new(None),
            config,
            runtime: tokio::runtime::Handle::current(),
            served: TaskTracker::new(),
            stopping: CancellationToken::new(),
        })
    }

    /// Closes every door and waits for their requests in flight (each for at most the
    /// servers' grace): what they count is then counted before Sandgate stops. No door
    /// opens after.
    pub async fn close(&self) {
        self.edge
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        self.stopping.cancel();
        self.served.close();
        self.served.wait().await;
    }

    /// From now on, doors serve `edge`.
    pub fn serve_with(&self, edge: Router) {
        *self.edge.lock().unwrap_or_else(PoisonError::into_inner) = Some(edge);
    }
}

impl OpenDoor for EdgeDoors {
    fn open(&self) -> io::Result<Door> {
        let edge = self
            .edge
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| io::Error::other("Sandgate's edge is not serving"))?;
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let listener = {
            let _entered = self.runtime.enter();
            TcpListener::from_std(listener)?
        };
        let peer = door_peer(rand::random());
        // Over the TCP peer the server recorded: every request of this door is the
        // sandbox's.
        let app = edge.layer(tower::util::MapRequestLayer::new(
            move |mut request: http::Request<Body>| {
                request
                    .extensions_mut()
                    .insert(ConnectInfo(SocketAddr::new(peer, 0)));
                request
            },
        ));
        let (close, closed) = tokio::sync::oneshot::channel::<()>();
        let stopping = self.stopping.clone();
        self.served.spawn_on(
            http_server::serve(
                listener,
                app,
                async move {
                    tokio::select! {
                        _ = closed => {}
                        () = stopping.cancelled() => {}
                    }
                },
                self.config,
            ),
            &self.runtime,
        );
        Ok(Door::new(port, peer, close))
    }
}
