//! The idle sweep (`RUNTIME_IDLE_SECONDS`): claimed sandboxes that run and whose
//! conversation showed no activity for the idle period are paused, as a `/pause` would;
//! they resume as any paused sandbox does. Activity is what Sandgate's own jobs mark on
//! the record (`sandgate_store::activity`), read from the running sweep index, so a pass
//! costs the idle sandboxes, not all of them.

use super::{Reconciler, SWEEP_BATCH};
use crate::sandboxes::SandboxResult;
use sandgate_store::{Fence, SweepIndex};

impl Reconciler {
    /// Pauses the sandboxes idle at `now`; how many it paused. One the platform fails to
    /// pause is said and left for the next pass: it does not hold the others.
    pub(super) async fn pause_idle(&self, now: i64, fence: Option<&Fence>) -> SandboxResult<usize> {
        let idle_after = self.sandboxes.options().idle_after;
        if idle_after.is_zero() {
            return Ok(0);
        }
        let idle_since =
            now.saturating_sub(i64::try_from(idle_after.as_millis()).unwrap_or(i64::MAX));
        let mut paused = 0;
        for record in self
            .sandboxes
            .swept(SweepIndex::Running, idle_since, SWEEP_BATCH)
            .await?
        {
            let runtime_id = record.runtime_id.clone();
            match self.sandboxes.pause_idle(record, idle_since, fence).await {
                Ok(true) => {
                    tracing::info!(%runtime_id, "paused a sandbox idle for too long");
                    paused += 1;
                }
                Ok(false) => {}
                Err(err) => {
                    tracing::warn!(%runtime_id, error = %err, "cannot pause an idle sandbox");
                }
            }
        }
        Ok(paused)
    }
}
