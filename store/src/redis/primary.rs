//! The connection to Redis: one server's (the primary's) or a whole cluster's, with the
//! write lanes the writes that wait for replicas take, and the clients Pub/Sub subscribes
//! through. A Sentinel deployment replaces it when the sentinels name another primary.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::Cmd;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use thread_local::ThreadLocal;

use super::cluster;
use crate::RedisTls;

/// A connection to one Redis (the primary), or to a whole cluster, which routes each
/// command to the master of its key's slot. Both multiplex: every call shares it (on one
/// Redis, every call of a thread: see [`PerThread`]).
#[derive(Clone)]
pub(crate) enum Connection {
    Single(ConnectionManager),
    PerThread(Arc<PerThread>),
    Cluster(ClusterConnection),
}

/// One Redis's connection for each thread that calls it, opened beside its first call.
///
/// A multiplexed connection's I/O is driven by a task on the runtime that opened it. The
/// HTTP server serves each client connection on one thread from start to end
/// (`sandgate::http_server`); a call that used a connection driven by another runtime
/// would wake that runtime's thread for each command and be woken back by it (measured:
/// a tenth of the webhook's deliveries a second). Opened on the caller's thread, its
/// connection is driven there.
pub(crate) struct PerThread {
    client: redis::Client,
    config: ConnectionManagerConfig,
    /// Opened at start, so that an unreachable server fails the start; a thread uses it
    /// until its own is open (never waiting for that), or for good when its own cannot be.
    first: ConnectionManager,
    mine: ThreadLocal<Arc<OnceLock<ConnectionManager>>>,
}

impl PerThread {
    /// This thread's connection, once open; until then the first. Its opening starts at
    /// the thread's first command, on the thread's runtime, without that command waiting
    /// (a settlement must not wait for a connect: the next call may be judged on it).
    fn connection(&self) -> ConnectionManager {
        let mine = self.mine.get_or(|| {
            let slot = Arc::new(OnceLock::new());
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let (client, config, opened) =
                    (self.client.clone(), self.config.clone(), slot.clone());
                runtime.spawn(async move {
                    match ConnectionManager::new_with_config(client, config).await {
                        Ok(connection) => drop(opened.set(connection)),
                        Err(err) => {
                            tracing::debug!(error = %err, "sharing the first Redis connection");
                        }
                    }
                });
            }
            slot
        });
        mine.get().unwrap_or(&self.first).clone()
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Self::Single(connection) => connection.req_packed_command(cmd),
            Self::PerThread(shared) => {
                let mut connection = shared.connection();
                Box::pin(async move { connection.req_packed_command(cmd).await })
            }
            Self::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Self::Single(connection) => connection.req_packed_commands(pipeline, offset, count),
            Self::PerThread(shared) => {
                let mut connection = shared.connection();
                Box::pin(async move {
                    connection
                        .req_packed_commands(pipeline, offset, count)
                        .await
                })
            }
            Self::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(connection) => connection.get_db(),
            Self::PerThread(shared) => shared.first.get_db(),
            Self::Cluster(connection) => connection.get_db(),
        }
    }
}

/// The primary's connection (or the cluster's), its write lanes, and clients of its
/// server(s) for the connections opened later (the Pub/Sub one): fixed for one Redis or a
/// cluster, replaced when the sentinels name another primary.
#[derive(Clone)]
pub(crate) struct Primary {
    pub(super) connection: Connection,
    /// With `--redis-min-replicas-ack`: connections of their own for the writes that
    /// `WAIT` for replicas (a `WAIT` blocks its connection until the replicas answer; on
    /// a cluster, each lane is a cluster connection of its own). Empty without.
    pub(super) lanes: Vec<Connection>,
    /// Where Pub/Sub subscribes: the server, or each seed node of a cluster (tried in
    /// turn: a message published on any node reaches every node's subscribers).
    pub(super) subscribers: Vec<redis::Client>,
}

impl Primary {
    /// Connects to `client`'s server, with `lanes` write lanes, failing fast when it
    /// cannot be reached. Later outages make calls fail with [`StoreError::Unavailable`]
    /// until the connection manager reconnects.
    pub(super) async fn open(client: redis::Client, lanes: usize) -> redis::RedisResult<Self> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let connection = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
        let lanes = futures::future::try_join_all(
            (0..lanes).map(|_| ConnectionManager::new_with_config(client.clone(), config.clone())),
        )
        .await?;
        Ok(Self {
            connection: Connection::PerThread(Arc::new(PerThread {
                client: client.clone(),
                config,
                first: connection,
                mine: ThreadLocal::new(),
            })),
            lanes: lanes.into_iter().map(Connection::Single).collect(),
            subscribers: vec![client],
        })
    }

    /// Connects to the cluster `url` names, with `lanes` write lanes, failing fast when no
    /// seed node answers.
    pub(super) async fn open_cluster(
        url: &cluster::ClusterUrl,
        tls: &RedisTls,
        lanes: usize,
    ) -> redis::RedisResult<Self> {
        let client = url.client(tls)?;
        let connection = client.get_async_connection().await?;
        let lanes =
            futures::future::try_join_all((0..lanes).map(|_| client.get_async_connection()))
                .await?;
        Ok(Self {
            connection: Connection::Cluster(connection),
            lanes: lanes.into_iter().map(Connection::Cluster).collect(),
            subscribers: url.node_clients(tls)?,
        })
    }

    /// The server's address, for the log (never credentials).
    pub(super) fn address(&self) -> String {
        self.subscribers
            .first()
            .map(|client| client.get_connection_info().addr().to_string())
            .unwrap_or_default()
    }
}
