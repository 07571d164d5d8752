//! The claimed sandboxes kept too long: those paused for longer than
//! `RUNTIME_DEAD_SECONDS` are deleted (sandbox and record), and the records of those
//! stopped for longer than their retention are dropped. Both are read from their sweep
//! indexes, [`SWEEP_BATCH`] of each kind per pass.

use super::{Reconciler, SWEEP_BATCH};
use crate::sandboxes::SandboxResult;
use sandgate_store::{Fence, SweepIndex};

impl Reconciler {
    /// Retires the sandboxes kept too long at `now`; how many.
    pub(super) async fn retire_expired(
        &self,
        now: i64,
        fence: Option<&Fence>,
    ) -> SandboxResult<usize> {
        let options = self.sandboxes.options();
        let mut retired = 0;
        let dead_since = now.saturating_sub(options.dead_after.as_millis() as i64);
        for record in self
            .sandboxes
            .swept(SweepIndex::Paused, dead_since, SWEEP_BATCH)
            .await?
        {
            tracing::info!(runtime_id = %record.runtime_id, "deleting a sandbox paused for too long");
            self.sandboxes.retire(record, fence).await?;
            retired += 1;
        }
        let kept_since = now.saturating_sub(options.stopped_retention.as_millis() as i64);
        for record in self
            .sandboxes
            .swept(SweepIndex::Stopped, kept_since, SWEEP_BATCH)
            .await?
        {
            if self
                .sandboxes
                .store
                .sandboxes
                .delete_sandbox(&record, fence)
                .await?
            {
                retired += 1;
            }
        }
        Ok(retired)
    }
}
