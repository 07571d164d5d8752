//! The embedded backend: one redb database file in the data directory.
//!
//! Writes go through one writer thread that commits whatever has queued up in a single
//! transaction (group commit): under concurrency many deliveries share one fsync, and each
//! caller is answered only after the commit that holds its write is durable. Operations in
//! one batch apply in arrival order, so a compare-and-swap sees the writes queued before it
//! (generic transaction writes, which touch tables of their own, run first).

mod admin;
mod admission;
mod audit;
mod catalog;
mod conversations;
mod events;
mod key_owners;
mod keys;
mod ledger;
mod models;
mod orgs;
mod quota;
mod sandboxes;
mod session_owners;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use redb::{Database, ReadableDatabase, TableDefinition, WriteTransaction};
use tokio::sync::{mpsc, oneshot};

use self::conversations::{CONVERSATIONS, INDEX, swap};
use super::admin::StoredChallenge;
use super::{
    ProfileStore, SessionKeyStore, StoreError, StoreHealth, StoreResult, StoredConversation,
    StoredProfile,
};

const SESSION_KEYS: TableDefinition<&str, &str> = TableDefinition::new("session_keys");
/// `<owner>\0<name>` → the profile's JSON.
const PROFILES: TableDefinition<&str, &[u8]> = TableDefinition::new("llm_profiles");

/// How many queued writes one transaction takes at most.
const MAX_BATCH: usize = 512;

pub struct EmbeddedStore {
    db: Arc<Database>,
    writes: mpsc::UnboundedSender<Write>,
    /// Challenges live in memory: the embedded store serves one process, so a mutex makes
    /// taking one atomic, and a restart only voids challenges that expire in minutes.
    challenges: Mutex<HashMap<String, (StoredChallenge, Instant)>>,
    /// Bumped after every committed change of the saved warm configurations.
    warm_version: AtomicU64,
    /// Rate limit counters, in memory for the same reason as challenges: key → the count
    /// and when its window ends.
    rate_limits: Mutex<HashMap<String, (u64, Instant)>>,
    /// Moved on by every added model (`ModelStore::model_changes`).
    model_changes: tokio::sync::watch::Sender<Option<u64>>,
    /// The virtual keys' spend counters read or written so far.
    key_spend_memory: Arc<keys::SpendMemory>,
    /// The gateway's calls in flight and the minutes' counts (`KeyStore::admit`).
    holds: admission::Holds,
    /// Moved on by every change of a key's record (`KeyStore::key_changes`).
    key_changes: tokio::sync::watch::Sender<Option<u64>>,
    /// Moved on by every change of a team or user record (`OrgStore::org_changes`).
    org_changes: tokio::sync::watch::Sender<Option<u64>>,
    /// Moved on by every write that changes what the address index answers
    /// (`SandboxStore::address_changes`).
    address_changes: tokio::sync::watch::Sender<Option<u64>>,
    /// The runtime API key's admitted starts, in memory as the rate limits are.
    quotas: quota::Quotas,
}

/// Moves a generation this process keeps on (a change the gateway follows): this
/// process is the store's only writer, so every change passes here. A generation that is
/// `None` stays so.
fn move_on(generation: &tokio::sync::watch::Sender<Option<u64>>) {
    generation.send_modify(|generation| *generation = generation.map(|at| at + 1));
}

/// A write run inside a batch's transaction. It returns what to answer its caller once the
/// transaction has committed (or failed to).
type TxnWrite =
    Box<dyn FnOnce(&WriteTransaction) -> Box<dyn FnOnce(StoreResult<()>) + Send> + Send>;

enum Write {
    Swap {
        expected: u64,
        next: StoredConversation,
        reply: oneshot::Sender<StoreResult<bool>>,
    },
    SessionKey {
        key_sha256: String,
        sandbox_id: String,
        reply: oneshot::Sender<StoreResult<()>>,
    },
    Profile {
        key: String,
        json: Vec<u8>,
        reply: oneshot::Sender<StoreResult<()>>,
    },
    Txn(Option<TxnWrite>),
}

impl EmbeddedStore {
    /// Opens (or creates) `data_dir/sandgate.redb`.
    pub async fn open(data_dir: PathBuf) -> StoreResult<Self> {
        let db = tokio::task::spawn_blocking(move || -> StoreResult<Database> {
            std::fs::create_dir_all(&data_dir).map_err(|err| {
                StoreError::Unavailable(format!(
                    "cannot create data directory {}: {err}",
                    data_dir.display()
                ))
            })?;
            let path = data_dir.join("sandgate.redb");
            let db = Database::create(&path).map_err(|err| {
                StoreError::Unavailable(format!("cannot open {}: {err}", path.display()))
            })?;
            let txn = db.begin_write().map_err(unavailable)?;
            txn.open_table(CONVERSATIONS).map_err(unavailable)?;
            txn.open_table(INDEX).map_err(unavailable)?;
            txn.open_table(SESSION_KEYS).map_err(unavailable)?;
            txn.open_table(PROFILES).map_err(unavailable)?;
            txn.open_table(admin::WARM_CONFIGS).map_err(unavailable)?;
            txn.open_table(admin::WARM_IMAGES).map_err(unavailable)?;
            txn.open_table(models::MODELS).map_err(unavailable)?;
            txn.open_table(models::SPEND_LOG).map_err(unavailable)?;
            txn.open_table(audit::AUDIT).map_err(unavailable)?;
            txn.open_table(ledger::LEDGER).map_err(unavailable)?;
            txn.open_table(ledger::LEDGER_MODELS).map_err(unavailable)?;
            txn.open_table(ledger::LEDGER_IDS).map_err(unavailable)?;
            txn.open_table(ledger::LEDGER_LINKS).map_err(unavailable)?;
            txn.open_table(ledger::LEDGER_LAST).map_err(unavailable)?;
            txn.open_table(keys::KEYS).map_err(unavailable)?;
            txn.open_table(keys::KEY_SPEND).map_err(unavailable)?;
            key_owners::upgrade(&txn)?;
            txn.open_table(orgs::TEAMS).map_err(unavailable)?;
            txn.open_table(orgs::USERS).map_err(unavailable)?;
            txn.open_table(orgs::SPEND).map_err(unavailable)?;
            sandboxes::create_tables(&txn)?;
            session_owners::create_tables(&txn)?;
            events::create_tables(&txn)?;
            catalog::upgrade(&txn)?;
            txn.commit().map_err(unavailable)?;
            Ok(db)
        })
        .await
        .map_err(|err| StoreError::Unavailable(err.to_string()))??;
        let db = Arc::new(db);
        let (writes, queue) = mpsc::unbounded_channel();
        let writer_db = db.clone();
        std::thread::Builder::new()
            .name("sandgate-redb-writer".into())
            .spawn(move || run_writer(&writer_db, queue))
            .map_err(|err| {
                StoreError::Unavailable(format!("cannot start the writer thread: {err}"))
            })?;
        Ok(Self {
            db,
            writes,
            challenges: Mutex::new(HashMap::new()),
            warm_version: AtomicU64::new(1),
            rate_limits: Mutex::new(HashMap::new()),
            model_changes: tokio::sync::watch::Sender::new(Some(0)),
            key_spend_memory: Arc::default(),
            holds: admission::Holds::default(),
            key_changes: tokio::sync::watch::Sender::new(Some(0)),
            org_changes: tokio::sync::watch::Sender::new(Some(0)),
            address_changes: tokio::sync::watch::Sender::new(Some(0)),
            quotas: quota::Quotas::default(),
        })
    }

    /// Tells the gateway's replicas (here: this process) that the added models changed.
    /// This process is the store's only writer: every addition passes here.
    fn gateway_changed(&self) {
        move_on(&self.model_changes);
    }

    /// Runs `write` in the writer's next transaction and answers once that has committed.
    async fn transact<T: Send + 'static>(
        &self,
        write: impl FnOnce(&WriteTransaction) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let (reply, answer) = oneshot::channel();
        let write: TxnWrite = Box::new(move |txn| {
            let outcome = write(txn);
            Box::new(move |committed: StoreResult<()>| {
                // A caller that went away no longer needs its answer.
                drop(reply.send(committed.and(outcome)));
            })
        });
        self.writes
            .send(Write::Txn(Some(write)))
            .map_err(|_| StoreError::Unavailable("the writer thread has stopped".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("the write was not applied".into()))?
    }

    async fn submit<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<StoreResult<T>>) -> Write,
    ) -> StoreResult<T> {
        let (reply, answer) = oneshot::channel();
        self.writes
            .send(make(reply))
            .map_err(|_| StoreError::Unavailable("the writer thread has stopped".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("the writer thread has stopped".into()))?
    }

    async fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Database) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || read(&db))
            .await
            .map_err(|err| StoreError::Unavailable(err.to_string()))?
    }
}

fn unavailable(err: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(err.to_string())
}

/// Runs until every [`EmbeddedStore`] handle is dropped.
fn run_writer(db: &Database, mut queue: mpsc::UnboundedReceiver<Write>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = queue.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(write) => batch.push(write),
                Err(_) => break,
            }
        }
        commit_batch(db, &mut batch);
    }
}

/// Applies a batch in one transaction and answers every caller once the commit is done.
fn commit_batch(db: &Database, batch: &mut Vec<Write>) {
    let mut outcomes: Vec<StoreResult<bool>> = Vec::with_capacity(batch.len());
    let mut finishers = Vec::new();
    let committed = (|| -> StoreResult<()> {
        let txn = db.begin_write().map_err(unavailable)?;
        // Transaction writes touch tables of their own, so they run before the tables
        // below are opened; each is answered after the commit by the finisher it returns.
        for write in batch.iter_mut() {
            if let Write::Txn(apply) = write
                && let Some(apply) = apply.take()
            {
                finishers.push(apply(&txn));
            }
        }
        {
            let mut conversations = txn.open_table(CONVERSATIONS).map_err(unavailable)?;
            let mut index = txn.open_table(INDEX).map_err(unavailable)?;
            let mut heads = txn.open_table(catalog::HEADS).map_err(unavailable)?;
            let mut session_keys = txn.open_table(SESSION_KEYS).map_err(unavailable)?;
            let mut profiles = txn.open_table(PROFILES).map_err(unavailable)?;
            for write in batch.iter() {
                let outcome = match write {
                    Write::Swap { expected, next, .. } => {
                        swap(&mut conversations, &mut index, &mut heads, *expected, next)
                    }
                    Write::SessionKey {
                        key_sha256,
                        sandbox_id,
                        ..
                    } => session_keys
                        .insert(key_sha256.as_str(), sandbox_id.as_str())
                        .map(|_| true)
                        .map_err(unavailable),
                    Write::Profile { key, json, .. } => profiles
                        .insert(key.as_str(), json.as_slice())
                        .map(|_| true)
                        .map_err(unavailable),
                    Write::Txn(_) => Ok(true),
                };
                outcomes.push(outcome);
            }
        }
        txn.commit().map_err(unavailable)
    })();
    for finish in finishers {
        finish(
            committed
                .as_ref()
                .copied()
                .map_err(|err| StoreError::Unavailable(err.to_string())),
        );
    }
    for (write, outcome) in batch.drain(..).zip(
        outcomes
            .into_iter()
            .map(Some)
            .chain(std::iter::repeat_with(|| None)),
    ) {
        // A failed commit fails every write of the batch, whatever its own outcome was.
        let outcome = match (&committed, outcome) {
            (Ok(()), Some(outcome)) => outcome,
            (Err(err), _) => Err(StoreError::Unavailable(err.to_string())),
            (Ok(()), None) => Err(StoreError::Unavailable("write was not applied".into())),
        };
        // A caller that went away no longer needs its answer.
        match write {
            Write::Swap { reply, .. } => drop(reply.send(outcome)),
            Write::SessionKey { reply, .. } | Write::Profile { reply, .. } => {
                drop(reply.send(outcome.map(|_| ())));
            }
            // Answered by its finisher; one that never ran drops its reply, which its
            // caller reads as "not applied".
            Write::Txn(_) => {}
        }
    }
}

#[async_trait]
impl SessionKeyStore for EmbeddedStore {
    async fn sandbox_for_key(&self, key_sha256: &str) -> StoreResult<Option<String>> {
        let key = key_sha256.to_owned();
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(SESSION_KEYS).map_err(unavailable)?;
            Ok(table
                .get(key.as_str())
                .map_err(unavailable)?
                .map(|sandbox| sandbox.value().to_owned()))
        })
        .await
    }

    async fn put_session_key(&self, key_sha256: &str, sandbox_id: &str) -> StoreResult<()> {
        let (key_sha256, sandbox_id) = (key_sha256.to_owned(), sandbox_id.to_owned());
        self.submit(|reply| Write::SessionKey {
            key_sha256,
            sandbox_id,
            reply,
        })
        .await
    }

    async fn delete_session_key(&self, key_sha256: &str) -> StoreResult<()> {
        let key = key_sha256.to_owned();
        self.transact(move |txn| {
            let mut table = txn.open_table(SESSION_KEYS).map_err(unavailable)?;
            table.remove(key.as_str()).map(drop).map_err(unavailable)
        })
        .await
    }
}

#[async_trait]
impl ProfileStore for EmbeddedStore {
    async fn put_profile(&self, owner: &str, profile: &StoredProfile) -> StoreResult<()> {
        let key = format!("{owner}\0{}", profile.name);
        let json =
            serde_json::to_vec(profile).map_err(|err| StoreError::Corrupt(err.to_string()))?;
        self.submit(|reply| Write::Profile { key, json, reply })
            .await
    }

    async fn get_profile(&self, owner: &str, name: &str) -> StoreResult<Option<StoredProfile>> {
        let key = format!("{owner}\0{name}");
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(PROFILES).map_err(unavailable)?;
            let entry = table.get(key.as_str()).map_err(unavailable)?;
            entry
                .map(|entry| {
                    serde_json::from_slice(entry.value())
                        .map_err(|err| StoreError::Corrupt(err.to_string()))
                })
                .transpose()
        })
        .await
    }
}

#[async_trait]
impl StoreHealth for EmbeddedStore {
    async fn ping(&self) -> StoreResult<()> {
        self.read(|db| db.begin_read().map(drop).map_err(unavailable))
            .await
    }
}
