//! The Redis backend, for production and for several replicas sharing one store: one
//! Redis, a Sentinel group's primary ([`sentinel`]) or a Redis Cluster ([`cluster`]).
//!
//! Layout (every key a script or pipeline touches shares one hash tag, so that on a
//! cluster each stays on one slot; the keys a kind of record shares are in buckets on a
//! cluster, see [`cluster::Layout`]):
//! - `sandgate:conv:{<id>}`: a hash, `v` the version, `d` the record's JSON and `h` its
//!   head's (what index scans read; a record an older writer left without one is read
//!   whole instead);
//! - `sandgate:idx:<index>` (a cluster: `sandgate:idx:{<bucket>:<index>}`): a sorted set
//!   of ids, all with score 0, read in lexical order;
//! - `sandgate:session-key:<sha256>`: the sandbox a session key was issued to;
//! - `sandgate:profile:{<owner>}:<name>`: an LLM profile's JSON;
//! - runtime management's keys: see [`admin`]; the model gateway's: see [`models`], [`keys`] and [`orgs`];
//!   sandboxes and the reconciler's lease: see [`sandboxes`].

mod admin;
mod admission;
mod audit;
mod catalog;
pub(super) mod cluster;
mod conversations;
mod events;
mod key_owners;
mod keys;
mod ledger;
mod models;
mod nodes;
mod orgs;
mod primary;
mod quota;
mod sandboxes;
pub(super) mod sentinel;
mod session_owners;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use redis::{AsyncCommands, Cmd, FromRedisValue, Script};

use self::cluster::Layout;
use self::primary::{Connection, Primary};
use super::{
    ProfileStore, RedisTls, SessionKeyStore, StoreError, StoreHealth, StoreResult, StoredProfile,
    redact_url, redis_url_problem,
};

/// Compare-and-swap of a conversation: writes only when the stored version is ARGV[1].
const SWAP_SCRIPT: &str = r"
local current = redis.call('HGET', KEYS[1], 'v')
if (current or '0') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'd', ARGV[3], 'h', ARGV[4])
return 1
";

/// How long a write waits for its replicas (`WAIT`) before it is refused as unavailable:
/// less than the connection's response timeout, so that the wait is the one that ends.
const REPLICA_ACK_TIMEOUT: Duration = Duration::from_millis(1500);

/// With replica acknowledgements, the connections writes take turns on (see
/// [`RedisStore::write_connection`]).
const WRITE_LANES: usize = 8;

pub struct RedisStore {
    primary: Arc<RwLock<Primary>>,
    /// The primary is the one the sentinels name (and `/health` checks that it still is).
    sentinel: bool,
    /// Where records' keys live: one place on one Redis, buckets on a cluster.
    layout: Layout,
    /// Replicas that must have a write before it is acknowledged (`WAIT`); 0: none.
    min_replicas_ack: u32,
    /// The write lane the next write takes.
    next_lane: AtomicUsize,
    swap: Script,
    /// Model additions, followed once someone asks (`ModelStore::model_changes`), until the
    /// store is dropped with this receiver.
    model_changes: std::sync::OnceLock<tokio::sync::watch::Receiver<Option<u64>>>,
    /// Changes of the gateway's key records, likewise (`KeyStore::key_changes`).
    key_changes: std::sync::OnceLock<tokio::sync::watch::Receiver<Option<u64>>>,
    /// Changes of team and user records, likewise (`OrgStore::org_changes`).
    org_changes: std::sync::OnceLock<tokio::sync::watch::Receiver<Option<u64>>>,
    /// Changes of what the sandboxes' address index answers, likewise
    /// (`SandboxStore::address_changes`).
    address_changes: std::sync::OnceLock<tokio::sync::watch::Receiver<Option<u64>>>,
    /// What this process's ledger writes indexed and set to expire today.
    ledger_written: std::sync::Mutex<ledger::Written>,
}

fn unavailable(err: redis::RedisError) -> StoreError {
    StoreError::Unavailable(err.to_string())
}

fn corrupt(err: serde_json::Error) -> StoreError {
    StoreError::Corrupt(err.to_string())
}

fn conversation_key(id: impl std::fmt::Display) -> String {
    format!("sandgate:conv:{{{id}}}")
}

fn profile_key(owner: &str, name: &str) -> String {
    format!("sandgate:profile:{{{owner}}}:{name}")
}

impl RedisStore {
    /// Connects, failing fast when the server cannot be reached. Later outages make calls
    /// fail with [`StoreError::Unavailable`] until the connection manager reconnects.
    /// With a Sentinel URL, the primary is the one the sentinels name, followed from then
    /// on (see [`sentinel`]); with a Cluster URL, the cluster's nodes are learnt from the
    /// ones it names (see [`cluster`]).
    pub async fn connect(url: &str, tls: &RedisTls, min_replicas_ack: u32) -> StoreResult<Self> {
        if let Some(problem) = redis_url_problem(url) {
            return Err(StoreError::Unavailable(problem));
        }
        let invalid = |err: redis::RedisError| {
            StoreError::Unavailable(format!("invalid Redis URL {}: {err}", redact_url(url)))
        };
        let unreachable = |err: redis::RedisError| {
            StoreError::Unavailable(format!("cannot reach Redis at {}: {err}", redact_url(url)))
        };
        let lanes = if min_replicas_ack > 0 { WRITE_LANES } else { 0 };
        let mut sentinels = None;
        let mut layout = Layout::SINGLE;
        let primary = if let Some(parsed) = cluster::parse(url) {
            let parsed = parsed.map_err(StoreError::Unavailable)?;
            layout = Layout::CLUSTER;
            Primary::open_cluster(&parsed, tls, lanes)
                .await
                .map_err(unreachable)?
        } else if let Some(parsed) = sentinel::parse(url) {
            let parsed = parsed.map_err(StoreError::Unavailable)?;
            let mut client = parsed.client(tls).map_err(invalid)?;
            let primary = client.async_get_client().await.map_err(unreachable)?;
            sentinels = Some(client);
            Primary::open(primary, lanes).await.map_err(unreachable)?
        } else {
            let client = tls.client(url).map_err(invalid)?;
            Primary::open(client, lanes).await.map_err(unreachable)?
        };
        let swap = Script::new(SWAP_SCRIPT);
        let mut loader = primary.connection.clone();
        swap.prepare_invoke()
            .load_async(&mut loader)
            .await
            .map_err(|err| {
                StoreError::Unavailable(format!("cannot load the Lua scripts into Redis: {err}"))
            })?;
        let primary = Arc::new(RwLock::new(primary));
        let followed = sentinels.is_some();
        if let Some(sentinels) = sentinels {
            tokio::spawn(sentinel::follow_primary(
                Arc::downgrade(&primary),
                sentinels,
            ));
        }
        let store = Self {
            primary,
            sentinel: followed,
            layout,
            min_replicas_ack,
            next_lane: AtomicUsize::new(0),
            swap,
            model_changes: std::sync::OnceLock::new(),
            key_changes: std::sync::OnceLock::new(),
            org_changes: std::sync::OnceLock::new(),
            address_changes: std::sync::OnceLock::new(),
            ledger_written: std::sync::Mutex::default(),
        };
        store.upgrade_catalog().await?;
        store.index_key_owners().await?;
        Ok(store)
    }

    /// The primary's (or the cluster's) connection, for one call.
    fn connection(&self) -> Connection {
        self.primary
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .connection
            .clone()
    }

    /// The connection for one call that writes and then waits for its replicas
    /// ([`Self::replicated`]). With replica acknowledgements: the primary's write lanes in
    /// turn, so that a write's `WAIT`, which blocks its connection until the replicas
    /// answer, holds the writes of its lane only, and the reads none. Without: the shared
    /// connection.
    fn write_connection(&self) -> Connection {
        let primary = self.primary.read().unwrap_or_else(PoisonError::into_inner);
        if primary.lanes.is_empty() {
            return primary.connection.clone();
        }
        let lane = self.next_lane.fetch_add(1, Ordering::Relaxed) % primary.lanes.len();
        primary.lanes[lane].clone()
    }

    /// Sends `commands` (each with its key first, which places it) on `connection`, in as
    /// few round trips as the topology allows: one pipeline on one Redis; on a cluster one
    /// per slot, concurrently (a pipeline must stay on one slot there). Answers in the
    /// commands' order.
    async fn spread_on<T: FromRedisValue>(
        &self,
        connection: &Connection,
        commands: Vec<Cmd>,
    ) -> StoreResult<Vec<T>> {
        if commands.is_empty() {
            return Ok(Vec::new());
        }
        let mut connection = connection.clone();
        if !self.layout.is_cluster() {
            let mut pipe = redis::pipe();
            for command in commands {
                pipe.add_command(command);
            }
            return pipe.query_async(&mut connection).await.map_err(unavailable);
        }
        let mut slots: std::collections::HashMap<_, (Vec<usize>, redis::Pipeline)> =
            std::collections::HashMap::new();
        let count = commands.len();
        for (position, command) in commands.into_iter().enumerate() {
            let key = match command.args_iter().nth(1) {
                Some(redis::Arg::Simple(key)) => key.to_vec(),
                _ => Vec::new(),
            };
            let (positions, pipe) = slots
                .entry(redis::cluster_routing::Slot::for_key(key))
                .or_insert_with(|| (Vec::new(), redis::pipe()));
            positions.push(position);
            pipe.add_command(command);
        }
        let answers =
            futures::future::try_join_all(slots.into_values().map(|(positions, pipe)| {
                let mut connection = connection.clone();
                async move {
                    let values: Vec<redis::Value> = pipe.query_async(&mut connection).await?;
                    Ok::<_, redis::RedisError>(positions.into_iter().zip(values))
                }
            }))
            .await
            .map_err(unavailable)?;
        let mut ordered: Vec<Option<redis::Value>> = vec![None; count];
        for (position, value) in answers.into_iter().flatten() {
            ordered[position] = Some(value);
        }
        ordered
            .into_iter()
            .map(|value| {
                redis::from_redis_value(value.unwrap_or(redis::Value::Nil))
                    .map_err(|err| StoreError::Corrupt(err.to_string()))
            })
            .collect()
    }

    /// [`Self::spread_on`] the shared connection: reads, and writes that wait for no
    /// replica.
    async fn spread<T: FromRedisValue>(&self, commands: Vec<Cmd>) -> StoreResult<Vec<T>> {
        self.spread_on(&self.connection(), commands).await
    }
}

/// `name key args…`, a command for [`RedisStore::spread`].
fn keyed(name: &str, key: impl redis::ToRedisArgs, args: impl redis::ToRedisArgs) -> Cmd {
    let mut command = redis::cmd(name);
    command.arg(key).arg(args);
    command
}

impl RedisStore {
    /// Once a write has succeeded on the primary: with `--redis-min-replicas-ack N`, waits
    /// until N replicas have every write made so far on this connection (`WAIT`), and
    /// refuses it as unavailable when they do not within [`REPLICA_ACK_TIMEOUT`]. The
    /// caller then answers 503 and the sender sends again (every write is idempotent); a
    /// write answered success survives the primary's loss. `WAIT` blocks the connection it
    /// runs on for one replication round trip: `connection` is a write lane
    /// ([`Self::write_connection`]), so that only the writes of that lane wait behind it.
    /// On a cluster the crate sends the `WAIT` to every master and answers the fewest
    /// replicas any of them counts: each master's replicas have this lane's writes to it.
    async fn replicated(&self, connection: &mut Connection) -> StoreResult<()> {
        if self.min_replicas_ack == 0 {
            return Ok(());
        }
        let acked: i64 = redis::cmd("WAIT")
            .arg(self.min_replicas_ack)
            .arg(REPLICA_ACK_TIMEOUT.as_millis() as u64)
            .query_async(connection)
            .await
            .map_err(unavailable)?;
        if acked < i64::from(self.min_replicas_ack) {
            return Err(StoreError::Unavailable(format!(
                "the write reached {acked} of the {} replicas --redis-min-replicas-ack asks for",
                self.min_replicas_ack
            )));
        }
        Ok(())
    }
}

#[async_trait]
impl SessionKeyStore for RedisStore {
    async fn sandbox_for_key(&self, key_sha256: &str) -> StoreResult<Option<String>> {
        let mut connection = self.connection();
        connection
            .get(format!("sandgate:session-key:{key_sha256}"))
            .await
            .map_err(unavailable)
    }

    async fn put_session_key(&self, key_sha256: &str, sandbox_id: &str) -> StoreResult<()> {
        let mut connection = self.write_connection();
        connection
            .set::<_, _, ()>(format!("sandgate:session-key:{key_sha256}"), sandbox_id)
            .await
            .map_err(unavailable)?;
        self.replicated(&mut connection).await
    }

    async fn delete_session_key(&self, key_sha256: &str) -> StoreResult<()> {
        let mut connection = self.connection();
        connection
            .del::<_, ()>(format!("sandgate:session-key:{key_sha256}"))
            .await
            .map_err(unavailable)
    }
}

#[async_trait]
impl ProfileStore for RedisStore {
    async fn put_profile(&self, owner: &str, profile: &StoredProfile) -> StoreResult<()> {
        let data = serde_json::to_vec(profile).map_err(corrupt)?;
        let mut connection = self.write_connection();
        connection
            .set::<_, _, ()>(profile_key(owner, &profile.name), data)
            .await
            .map_err(unavailable)?;
        self.replicated(&mut connection).await
    }

    async fn get_profile(&self, owner: &str, name: &str) -> StoreResult<Option<StoredProfile>> {
        let mut connection = self.connection();
        let data: Option<Vec<u8>> = connection
            .get(profile_key(owner, name))
            .await
            .map_err(unavailable)?;
        data.map(|data| serde_json::from_slice(&data).map_err(corrupt))
            .transpose()
    }
}

#[async_trait]
impl StoreHealth for RedisStore {
    async fn ping(&self) -> StoreResult<()> {
        let mut connection = self.connection();
        if self.layout.is_cluster() {
            // A node that answers is not enough: the cluster serves every slot until its
            // nodes judge a master failed (`cluster-node-timeout`), and then none.
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query_async(&mut connection)
                .await
                .map_err(unavailable)?;
            return if info.lines().any(|line| line.trim() == "cluster_state:ok") {
                Ok(())
            } else {
                Err(StoreError::Unavailable(
                    "the Redis cluster's state is not ok (a master's slots are unserved)"
                        .to_owned(),
                ))
            };
        }
        if self.sentinel {
            // Reachable is not enough: a demoted primary answers, and refuses every write.
            return if sentinel::is_primary(&mut connection).await {
                Ok(())
            } else {
                Err(StoreError::Unavailable(
                    "no writable Redis primary (the sentinels' primary is gone or demoted)"
                        .to_owned(),
                ))
            };
        }
        redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await
            .map(drop)
            .map_err(unavailable)
    }
}

/// A stream entry as XRANGE reads it: its id and its fields.
type StreamEntry = (String, Vec<(String, Vec<u8>)>);

impl RedisStore {
    /// Up to `limit` entries of the stream `key` (their ids and `d` fields) from `end` (a
    /// stream id, `(` before it for an exclusive one, or `+`), newest first.
    pub(crate) async fn newest_of_stream(
        &self,
        key: &str,
        end: &str,
        limit: usize,
    ) -> StoreResult<Vec<(String, Vec<u8>)>> {
        let mut connection = self.connection();
        let entries: Vec<StreamEntry> = redis::cmd("XREVRANGE")
            .arg(key)
            .arg(end)
            .arg("-")
            .arg("COUNT")
            .arg(limit)
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        Ok(entries
            .into_iter()
            .filter_map(|(id, fields)| {
                let (_, data) = fields.into_iter().find(|(name, _)| name == "d")?;
                Some((id, data))
            })
            .collect())
    }
}
