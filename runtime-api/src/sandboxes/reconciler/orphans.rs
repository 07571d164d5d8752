//! The reconciler's repairs, made when it takes the lease and hourly while it holds it:
//! the store's sweep indexes put back where a release without them left records, and the
//! orphan sweep, which deletes Sandgate's workloads that no record names (a crash between
//! two steps, a store restored from an older backup) once they are old enough.

use std::sync::PoisonError;

use super::Reconciler;
use crate::sandboxes::SandboxResult;

/// How often the lease's holder repairs the sweep indexes, besides when it takes the lease.
const REINDEX_EVERY_MS: i64 = 3_600_000;

/// How old a workload without a record must be before the sweep deletes it. A record is
/// written before its workload is made, so this only covers clocks that disagree and
/// calls still under way.
pub const ORPHAN_GRACE_MS: i64 = 600_000;

/// The most orphans one sweep deletes when they are half or more of what the platform runs:
/// past that, it deletes nothing and says why. A Sandgate pointed at an empty or another
/// installation's store would otherwise delete every sandbox in the namespace.
pub const ORPHAN_SWEEP_GUARD: usize = 10;

impl Reconciler {
    pub(super) fn lock_reindexed_at(&self) -> std::sync::MutexGuard<'_, Option<i64>> {
        self.reindexed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Repairs the sweep indexes and sweeps the platform for orphans when this reconciler
    /// has just taken the lease, or last did an hour ago; the orphans deleted.
    pub(super) async fn reindex_when_due(&self) -> SandboxResult<usize> {
        let now = self.sandboxes.now_ms();
        let due = self
            .lock_reindexed_at()
            .is_none_or(|at| now.saturating_sub(at) >= REINDEX_EVERY_MS);
        if !due {
            return Ok(0);
        }
        let repaired = self.sandboxes.store.sandboxes.reindex_sandboxes().await?;
        if repaired > 0 {
            tracing::info!(entries = repaired, "sandbox sweep indexes repaired");
        }
        let orphans = self.sweep_orphans(now).await?;
        *self.lock_reindexed_at() = Some(now);
        Ok(orphans)
    }

    /// Deletes Sandgate's workloads that no record names, once older than
    /// [`ORPHAN_GRACE_MS`]. The platform failing is logged, not the pass's failure: the
    /// next sweep tries again.
    async fn sweep_orphans(&self, now: i64) -> SandboxResult<usize> {
        let workloads = match self.sandboxes.driver.workloads().await {
            Ok(workloads) => workloads,
            Err(err) => {
                tracing::warn!(error = %err, "cannot list the platform's sandboxes for the orphan sweep");
                return Ok(0);
            }
        };
        let mut orphans = Vec::new();
        for (runtime_id, made_at) in &workloads {
            if now.saturating_sub(*made_at) >= ORPHAN_GRACE_MS
                && self
                    .sandboxes
                    .store
                    .sandboxes
                    .sandbox(runtime_id)
                    .await?
                    .is_none()
            {
                orphans.push(runtime_id);
            }
        }
        if orphans.len() > ORPHAN_SWEEP_GUARD && orphans.len() * 2 >= workloads.len() {
            tracing::error!(
                orphans = orphans.len(),
                workloads = workloads.len(),
                "the orphan sweep deletes nothing: most of the platform's sandboxes have no record here; is this the store of the installation that made them? (one installation per sandbox namespace)"
            );
            return Ok(0);
        }
        let mut swept = 0;
        for runtime_id in orphans {
            match self.sandboxes.driver.delete(runtime_id).await {
                Ok(()) => {
                    tracing::info!(%runtime_id, "deleted a sandbox workload no record names (an orphan)");
                    swept += 1;
                }
                Err(err) => {
                    tracing::warn!(%runtime_id, error = %err, "cannot delete an orphaned sandbox workload");
                }
            }
        }
        Ok(swept)
    }
}
