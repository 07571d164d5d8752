//! The runtime API key's quotas (issue 40): `MAX_RUNTIMES`, the sandboxes it may hold at
//! once (starting or running: a paused sandbox holds no process), and
//! `SANDBOX_START_RATE`, the starts it may make per minute. Both are checked at `/start`
//! and `/resume` (a resume starts a sandbox again) and refused with 429, which the app
//! server's runtime client takes as a failed start (`SandboxError`) or a failed resume.
//!
//! Sandgate has one runtime API key (`DEFAULT_API_KEY`), so its quotas are the
//! deployment's. They are counted in the store, atomically (a Redis script; a mutex in
//! the embedded store's one process), so that replicas behind one store admit together
//! exactly `MAX_RUNTIMES`, and `SANDBOX_START_RATE` starts in any minute: a start counts
//! the sessions the sandbox records show held plus the starts admitted lately that they
//! do not show yet (a record is stored after its start is admitted).

use std::collections::HashSet;
use std::time::Duration;

use super::SandboxError;
use sandgate_store::{SandboxState, StartAdmission, StartQuota, Store, StoredSandbox};

/// The window `SANDBOX_START_RATE` counts starts over.
const RATE_WINDOW: Duration = Duration::from_secs(60);
/// How long an admitted start counts as held whatever the store shows (unless paused or
/// stopped): longer than a start takes to be stored.
const PENDING_FOR: Duration = Duration::from_secs(30);
/// The key the quotas are kept under in the store: the runtime API key's name.
const KEY: &str = "default";

pub struct Quotas {
    store: Store,
    max_runtimes: Option<usize>,
    /// Starts per [`RATE_WINDOW`].
    start_rate: Option<u32>,
}

/// An admitted start. Dropped before [`Admission::started`], the start failed and holds
/// nothing; after, it counts as held until a read of the store shows it so.
pub struct Admission<'a> {
    quotas: &'a Quotas,
    session: String,
    started: bool,
}

impl Admission<'_> {
    /// The sandbox was started (its record stored as starting or running).
    pub fn started(mut self) {
        self.started = true;
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        if self.started {
            return;
        }
        // A failed start gives its place back; left alone it would expire in PENDING_FOR.
        let store = self.quotas.store.clone();
        let session = std::mem::take(&mut self.session);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(err) = store.rate_limits.release_start(KEY, &session).await {
                    tracing::warn!(error = %err, "cannot release a failed start's quota");
                }
            });
        }
    }
}

/// The sessions of the key's sandboxes that `records` shows held: claimed ones (a warm
/// sandbox is the pool's) that are starting or running.
pub fn held(records: &[StoredSandbox]) -> HashSet<String> {
    records
        .iter()
        .filter(|record| matches!(record.state, SandboxState::Starting | SandboxState::Running))
        .filter_map(|record| record.session_id.clone())
        .collect()
}

impl Quotas {
    pub fn new(store: Store, max_runtimes: Option<usize>, start_rate: Option<u32>) -> Self {
        Self {
            store,
            max_runtimes,
            start_rate: start_rate.filter(|rate| *rate > 0),
        }
    }

    pub fn max_runtimes(&self) -> Option<usize> {
        self.max_runtimes
    }

    /// Whether a quota applies at all: without one, admission reads nothing.
    pub fn any(&self) -> bool {
        self.max_runtimes.is_some() || self.start_rate.is_some()
    }

    /// `session` was paused or stopped: it holds nothing, whatever it was admitted as.
    pub async fn release(&self, session: Option<&str>) {
        if let Some(session) = session
            && self.any()
            && let Err(err) = self.store.rate_limits.release_start(KEY, session).await
        {
            tracing::warn!(error = %err, "cannot release a sandbox's quota");
        }
    }

    /// Admits a start of `session` given the sessions the store showed held (see
    /// [`held`]), or says which quota refuses it. A refused start takes no place in the
    /// rate.
    pub async fn admit(
        &self,
        held: &HashSet<String>,
        session: &str,
    ) -> Result<Admission<'_>, SandboxError> {
        let held: Vec<String> = held.iter().cloned().collect();
        let decision = self
            .store
            .rate_limits
            .admit_start(&StartQuota {
                key: KEY,
                session,
                held: &held,
                max_runtimes: self.max_runtimes.map(|max| max as u64),
                start_rate: self.start_rate.map(|rate| (rate, RATE_WINDOW)),
                pending_for: PENDING_FOR,
            })
            .await?;
        match decision {
            StartAdmission::Admitted => Ok(Admission {
                quotas: self,
                session: session.to_owned(),
                started: false,
            }),
            StartAdmission::MaxRuntimes { holding } => Err(SandboxError::Quota(format!(
                "The runtime API key holds {holding} sandboxes, its max_runtimes ({}): pause \
                 or stop one before starting another",
                self.max_runtimes.unwrap_or_default()
            ))),
            StartAdmission::StartRate => Err(SandboxError::Quota(format!(
                "The runtime API key started {} sandboxes in the last minute, its start rate \
                 (SANDBOX_START_RATE): retry in a few seconds",
                self.start_rate.unwrap_or_default()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions(names: &[&str]) -> HashSet<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    async fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(&sandgate_store::Backend::Embedded {
            data_dir: dir.path().to_owned(),
        })
        .await
        .expect("store");
        (dir, store)
    }

    fn refused(result: Result<Admission<'_>, SandboxError>) -> bool {
        matches!(result, Err(SandboxError::Quota(_)))
    }

    #[tokio::test]
    async fn max_runtimes_counts_held_sessions_and_admitted_starts() {
        let (_dir, store) = store().await;
        let quotas = Quotas::new(store, Some(2), None);
        let held = sessions(&["a"]);
        quotas
            .admit(&held, "b")
            .await
            .expect("one held, one free")
            .started();
        // Started, but the store read before it was stored: it still counts.
        assert!(refused(quotas.admit(&held, "c").await));
        // A read that shows it held counts it once.
        assert!(refused(quotas.admit(&sessions(&["a", "b"]), "c").await));
        // Paused: it holds nothing.
        quotas.release(Some("b")).await;
        assert!(!refused(quotas.admit(&held, "c").await));
    }

    #[tokio::test]
    async fn the_start_rate_refuses_a_burst_past_it() {
        let (_dir, store) = store().await;
        let quotas = Quotas::new(store, None, Some(3));
        for session in ["a", "b", "c"] {
            quotas
                .admit(&HashSet::new(), session)
                .await
                .expect("within the rate")
                .started();
        }
        assert!(refused(quotas.admit(&HashSet::new(), "d").await));
    }
}
