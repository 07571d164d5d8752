//! The warm runtime configurations in effect, read by the admin service, the Sandboxes
//! service and the reconciler alike: the installer's file merged with the saved ones.

use std::sync::Arc;

use tokio::sync::Notify;

use super::configs::{Effective, WarmLimits};
use super::installer::{Installer, InstallerFile};
use sandgate_store::{Store, StoreResult};

/// Identifies one state of the effective set: it changes when a configuration is saved
/// or deleted (by any replica) or the installer's file changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generation {
    pub saved: u64,
    pub file: u64,
}

pub struct WarmConfigSource {
    store: Store,
    installer: InstallerFile,
    /// `WARM_RUNTIME_CONFIG_OVERLAY`.
    overlay: bool,
    /// Woken when this process saves or deletes a configuration, so the reconciler acts
    /// at once rather than at its next interval.
    changed: Notify,
    /// How many warm sandboxes a pool, and all pools together, may hold.
    limits: WarmLimits,
}

impl WarmConfigSource {
    pub fn new(store: Store, installer: InstallerFile, overlay: bool) -> Self {
        Self {
            store,
            installer,
            overlay,
            changed: Notify::new(),
            limits: WarmLimits::default(),
        }
    }

    /// The same source with other pool size limits.
    #[must_use]
    pub fn with_limits(mut self, limits: WarmLimits) -> Self {
        self.limits = limits;
        self
    }

    pub fn limits(&self) -> WarmLimits {
        self.limits
    }

    pub fn overlay(&self) -> bool {
        self.overlay
    }

    /// The installer's entries in effect, re-reading a changed file, and its generation.
    pub fn installer(&self) -> (Arc<Installer>, u64) {
        self.installer.current()
    }

    /// The current generation: one store read (a version key) and a `stat`.
    pub async fn generation(&self) -> StoreResult<Generation> {
        let (_, file) = self.installer.current();
        let saved = self.store.warm_configs.warm_config_version().await?;
        Ok(Generation { saved, file })
    }

    /// The effective configurations, ordered by name, and the generation they are of.
    pub async fn effective(&self) -> StoreResult<(Vec<Effective>, Generation)> {
        let (installer, file) = self.installer.current();
        let snapshot = self.store.warm_configs.warm_configs().await?;
        let generation = Generation {
            saved: snapshot.version,
            file,
        };
        Ok((installer.merge(&snapshot.configs, self.overlay), generation))
    }

    /// Says that a configuration changed. The one waiter (the reconciler) is woken, or
    /// finds the wake-up waiting if it was busy: a change during a pass is not lost.
    pub fn notify_changed(&self) {
        self.changed.notify_one();
    }

    /// Resolves at the next [`Self::notify_changed`], or at once for one made since the
    /// last call.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }
}
