//! Sandgate's storage, shared by the runtime API and the model gateway: small traits, one
//! per concern, each with two backends: Redis (production, shared by replicas) and an
//! embedded redb database in a local data directory (the default; a restart loses
//! nothing). `tests/e2e/store_conformance/` at the repository root runs one suite
//! against both, over every Redis topology.
//!
//! Rules every backend keeps:
//! - conditional writes are atomic in the store, not in process memory, so replicas
//!   racing on one record cannot both win;
//! - a write is acknowledged only once it is durable (redb commits before it answers;
//!   Redis has answered the write);
//! - secondary indexes may hold stale members (readers re-check every hit against the
//!   record and skip it; the writer that left it drops it) but never miss a live one:
//!   entries are added before the record is written.

pub mod activity;
pub mod admin;
pub mod admission;
pub mod audit;
mod day_counts;
mod embedded;
pub mod events;
pub mod keys;
pub mod ledger;
pub mod models;
pub mod orgs;
mod records;
mod redis;
pub mod sandboxes;
pub mod session_owners;
pub mod timeline;

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use uuid::Uuid;

pub use self::redis::RedisStore;
pub use activity::Activity;
pub use admin::{
    ChallengeStore, PutWarmConfig, RateCount, RateLimitStore, StartAdmission, StartQuota,
    StoredChallenge, StoredWarmConfig, WarmConfigSnapshot, WarmConfigStore,
};
pub use audit::{AUDIT_RETENTION, AuditEntry, AuditStore};
pub use day_counts::DayCounts;
pub use embedded::EmbeddedStore;
pub use events::{
    AppendOutcome, DeadLetter, EventPage, EventRetention, EventStats, EventStore, NewEvent,
    StoredEvent,
};
pub use keys::{KeyOwner, KeyStore, SpendCounters, StoredKey};
pub use ledger::{LedgerCount, LedgerPage, LedgerRows, LedgerScope, LedgerStore, Measure};
pub use models::{ModelStore, SpendLogEntry, SpendLogStore, StoredModel};
pub use orgs::{
    BudgetPeriod, DaySpend, OrgStore, RateLimits, SpendCount, SpendScope, StoredTeam, StoredUser,
    TeamMember, day_of, member_id,
};
pub use records::{
    ConversationHead, IndexKey, LifecycleEvent, LifecycleKind, StoredConversation, StoredProfile,
};
pub use sandboxes::{
    Fence, Restarts, SandboxSpec, SandboxState, SandboxStore, StoredSandbox, SweepIndex,
};
pub use session_owners::SessionOwnerStore;
pub use timeline::{Launch, Phase, Timeline};

/// Why the store could not serve a call.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backend is unreachable or failed to persist; the caller may retry later.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A stored value could not be decoded: a bug or a foreign writer.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// A fenced write refused: the lease it was made under passed to another holder (this
    /// one was paused, or cut off, past its lease).
    #[error("the lease {0} passed to another holder; the write was refused")]
    Fenced(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Milliseconds since the epoch, for what the store keeps by age.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

/// What a caller is told when the store fails: 503, retry later. The cause is logged once
/// here and never sent (it may name hosts).
impl From<StoreError> for sandgate_proto::error::ErrorDetail {
    fn from(err: StoreError) -> Self {
        tracing::warn!(error = %err, "store call failed");
        Self::new(
            sandgate_proto::error::ErrorCode::Unavailable,
            "The store is unavailable; retry later",
        )
    }
}

/// The conversation catalog.
#[async_trait]
pub trait ConversationStore: Send + Sync + 'static {
    async fn get(&self, id: Uuid) -> StoreResult<Option<StoredConversation>>;

    /// Writes `next` when the stored version equals `expected` (0: nothing stored yet),
    /// together with its index entries. `Ok(false)`: another writer got there first.
    async fn compare_and_swap(&self, expected: u64, next: &StoredConversation)
    -> StoreResult<bool>;

    /// Before a delivery is acknowledged without a write (what it says is stored
    /// already): returns once what was read is as durable as a write would have been. A
    /// sender's retry of a write that reached the primary but not its replicas is
    /// acknowledged only once they have it. Nothing to wait for by default.
    async fn settled(&self) -> StoreResult<()> {
        Ok(())
    }

    /// The heads of up to `limit` records whose ids are members of `index` and greater
    /// than `after`, ordered by id; no record is decoded. Hits may be stale (see the
    /// module docs): callers re-check them.
    async fn scan(
        &self,
        index: &IndexKey,
        after: Option<Uuid>,
        limit: usize,
    ) -> StoreResult<Vec<ConversationHead>>;

    /// The records of `ids` that exist, in the order of `ids`.
    async fn get_many(&self, ids: &[Uuid]) -> StoreResult<Vec<StoredConversation>>;

    /// Drops `id` from indexes its record has left, after a write that moved it (a tag or
    /// parent changed). Readers never write: they skip stale members, and the writer that
    /// made them stale removes them. The embedded store moves index entries in the same
    /// transaction as the record, so there this has nothing left to do.
    async fn drop_stale_entries(&self, id: Uuid, stale: &[IndexKey]) -> StoreResult<()>;
}

/// Session API keys issued to sandboxes, kept as the sha256 hex of the key.
#[async_trait]
pub trait SessionKeyStore: Send + Sync + 'static {
    /// The sandbox a key (given as its sha256 hex) was issued to.
    async fn sandbox_for_key(&self, key_sha256: &str) -> StoreResult<Option<String>>;
    async fn put_session_key(&self, key_sha256: &str, sandbox_id: &str) -> StoreResult<()>;
    /// Revokes a key: a rotated one stops working.
    async fn delete_session_key(&self, key_sha256: &str) -> StoreResult<()>;
}

/// LLM profiles saved through the settings endpoint, per owner.
#[async_trait]
pub trait ProfileStore: Send + Sync + 'static {
    async fn put_profile(&self, owner: &str, profile: &StoredProfile) -> StoreResult<()>;
    async fn get_profile(&self, owner: &str, name: &str) -> StoreResult<Option<StoredProfile>>;
}

/// Reachability, for `/health` and gRPC health.
#[async_trait]
pub trait StoreHealth: Send + Sync + 'static {
    async fn ping(&self) -> StoreResult<()>;
}

/// Where the data lives.
#[derive(Clone, Debug)]
pub enum Backend {
    /// A redb database in this directory.
    Embedded { data_dir: PathBuf },
    /// A Redis server, by URL (`redis://…`, `rediss://…`, `redis+unix://…`), with the TLS
    /// material a `rediss://` server may need beyond the system's roots; with
    /// `min_replicas_ack`, a write is acknowledged only once that many replicas have it.
    Redis {
        url: String,
        tls: RedisTls,
        min_replicas_ack: u32,
    },
}

/// PEM material for a `rediss://` server: the CA that signed its certificate (instead of
/// the system's roots) and a client certificate for servers that ask for one. No `Debug`
/// of the contents: the key is a secret.
#[derive(Clone, Default)]
pub struct RedisTls {
    pub ca_cert: Option<Vec<u8>>,
    /// The client's certificate chain and private key, both PEM.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl RedisTls {
    fn is_empty(&self) -> bool {
        self.ca_cert.is_none() && self.client.is_none()
    }

    /// A client of `url` with this material: a plain one when there is none (the URL
    /// alone then decides on TLS, with the system's roots).
    pub fn client(&self, url: &str) -> ::redis::RedisResult<::redis::Client> {
        match self.certificates() {
            None => ::redis::Client::open(url),
            Some(certificates) => ::redis::Client::build_with_tls(url, certificates),
        }
    }

    /// The material as the redis crate takes it; `None` when there is none.
    pub(crate) fn certificates(&self) -> Option<::redis::TlsCertificates> {
        (!self.is_empty()).then(|| ::redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| ::redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.ca_cert.clone(),
        })
    }
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTls")
            .field("ca_cert", &self.ca_cert.is_some())
            .field("client", &self.client.is_some())
            .finish()
    }
}

/// The URL forms the Redis backend connects with, as `scheme://`.
pub const REDIS_URL_SCHEMES: [&str; 8] = [
    "redis",
    "rediss",
    "redis+unix",
    "unix",
    "redis+sentinel",
    "rediss+sentinel",
    "redis+cluster",
    "rediss+cluster",
];

/// Why the Redis backend cannot use `url`, if it cannot: a scheme it does not speak, or a
/// URL the client does not parse. Never echoes a password.
pub fn redis_url_problem(url: &str) -> Option<String> {
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    if !REDIS_URL_SCHEMES.contains(&scheme) {
        return Some(format!(
            "{} is not a URL form Sandgate connects with (use {})",
            redact_url(url),
            REDIS_URL_SCHEMES
                .map(|scheme| format!("{scheme}://"))
                .join(", ")
        ));
    }
    if let Some(sentinel) = redis::sentinel::parse(url) {
        return sentinel
            .err()
            .map(|err| format!("{} does not parse: {err}", redact_url(url)));
    }
    if let Some(cluster) = redis::cluster::parse(url) {
        return cluster
            .err()
            .map(|err| format!("{} does not parse: {err}", redact_url(url)));
    }
    ::redis::IntoConnectionInfo::into_connection_info(url)
        .err()
        .map(|err| format!("{} does not parse: {err}", redact_url(url)))
}

/// One handle per concern, all served by the same backend.
#[derive(Clone)]
pub struct Store {
    pub conversations: Arc<dyn ConversationStore>,
    pub events: Arc<dyn EventStore>,
    pub session_keys: Arc<dyn SessionKeyStore>,
    pub profiles: Arc<dyn ProfileStore>,
    pub challenges: Arc<dyn ChallengeStore>,
    pub rate_limits: Arc<dyn RateLimitStore>,
    pub warm_configs: Arc<dyn WarmConfigStore>,
    pub models: Arc<dyn ModelStore>,
    pub spend_log: Arc<dyn SpendLogStore>,
    pub keys: Arc<dyn KeyStore>,
    /// Teams, users and the spend counters of everything a call counts towards.
    pub orgs: Arc<dyn OrgStore>,
    pub sandboxes: Arc<dyn SandboxStore>,
    pub session_owners: Arc<dyn SessionOwnerStore>,
    /// The operators' changes.
    pub audit: Arc<dyn AuditStore>,
    /// What conversations, teams, users, keys and models cost, per day.
    pub ledger: Arc<dyn LedgerStore>,
    pub health: Arc<dyn StoreHealth>,
}

impl Store {
    /// Opens the backend: creates the data directory and database, or connects to Redis.
    pub async fn open(backend: &Backend) -> StoreResult<Self> {
        match backend {
            Backend::Embedded { data_dir } => Ok(Self::from_backend(Arc::new(
                EmbeddedStore::open(data_dir.clone()).await?,
            ))),
            Backend::Redis {
                url,
                tls,
                min_replicas_ack,
            } => Ok(Self::from_backend(Arc::new(
                RedisStore::connect(url, tls, *min_replicas_ack).await?,
            ))),
        }
    }

    fn from_backend<B>(backend: Arc<B>) -> Self
    where
        B: ConversationStore
            + EventStore
            + SessionKeyStore
            + ProfileStore
            + ChallengeStore
            + RateLimitStore
            + WarmConfigStore
            + ModelStore
            + SpendLogStore
            + KeyStore
            + OrgStore
            + SandboxStore
            + SessionOwnerStore
            + AuditStore
            + LedgerStore
            + StoreHealth,
    {
        Self {
            conversations: backend.clone(),
            events: backend.clone(),
            session_keys: backend.clone(),
            profiles: backend.clone(),
            challenges: backend.clone(),
            rate_limits: backend.clone(),
            warm_configs: backend.clone(),
            models: backend.clone(),
            spend_log: backend.clone(),
            keys: backend.clone(),
            orgs: backend.clone(),
            sandboxes: backend.clone(),
            session_owners: backend.clone(),
            audit: backend.clone(),
            ledger: backend.clone(),
            health: backend,
        }
    }
}

/// A Redis URL with its password hidden, for logs and error messages.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}://***@{}", &url[..scheme_end], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn redis_passwords_are_hidden() {
        assert_eq!(
            redact_url("redis://:hunter2@db:6379/0"),
            "redis://***@db:6379/0"
        );
        assert_eq!(
            redact_url("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
    }
}
