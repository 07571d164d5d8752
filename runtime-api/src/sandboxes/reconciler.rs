//! The warm-pool reconciler: for each configuration in effect it keeps `count` unclaimed
//! sandboxes on the configuration's current spec, replaces those on an old one, culls
//! pools whose configuration is gone, and deletes claimed sandboxes paused for longer than
//! `RUNTIME_DEAD_SECONDS`. Claimed sandboxes are otherwise never touched. One reconciler
//! acts at a time across replicas: each pass holds a lease in the store.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::spec::pool_spec;
use super::{SandboxResult, Sandboxes};
use crate::admin::login::random_hex;
use crate::store::{SandboxState, StoredSandbox};

/// The lease's name in the store.
const LEASE: &str = "reconciler";

/// How often a waiting reconciler checks whether the configurations changed through
/// another replica (one read of a version key).
const CHANGE_POLL: Duration = Duration::from_secs(1);

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    /// `false`: another replica holds the lease; nothing was done.
    pub acted: bool,
    pub created: usize,
    /// Warm sandboxes deleted: spec changed, pool removed or shrunk.
    pub culled: usize,
    /// Claimed sandboxes deleted after idling paused, or forgotten after stopping.
    pub retired: usize,
}

pub struct Reconciler {
    sandboxes: Arc<Sandboxes>,
    /// Who this reconciler is, in the lease.
    holder: String,
}

impl Reconciler {
    pub fn new(sandboxes: Arc<Sandboxes>) -> Self {
        Self {
            sandboxes,
            holder: random_hex(8),
        }
    }

    fn lease_ttl(&self) -> Duration {
        // Long enough to outlive one pass and the wait to the next, short enough that
        // another replica takes over soon after this one dies.
        (self.sandboxes.options().reconcile_interval * 2)
            .clamp(Duration::from_secs(10), Duration::from_secs(300))
    }

    /// Runs passes until `stop` is cancelled: every interval, and at once when a
    /// configuration changes or a claim empties a slot.
    pub async fn run(self, stop: CancellationToken) {
        let interval = self.sandboxes.options().reconcile_interval;
        let mut seen = None;
        loop {
            let generation = self.sandboxes.configs.generation().await.ok();
            match self.pass().await {
                Ok(pass) if pass.created + pass.culled + pass.retired > 0 => {
                    tracing::info!(
                        created = pass.created,
                        culled = pass.culled,
                        retired = pass.retired,
                        "warm pools reconciled"
                    );
                }
                Ok(_) => {}
                Err(err) => tracing::warn!(error = %err, "warm pool reconciliation failed"),
            }
            seen = generation.or(seen);
            let deadline = tokio::time::Instant::now() + interval;
            loop {
                tokio::select! {
                    () = stop.cancelled() => {
                        drop(self.sandboxes.store.sandboxes.release_lease(LEASE, &self.holder).await);
                        return;
                    }
                    () = tokio::time::sleep_until(deadline) => break,
                    () = self.sandboxes.configs.changed() => break,
                    () = self.sandboxes.claimed() => break,
                    () = tokio::time::sleep(CHANGE_POLL) => {
                        let now = self.sandboxes.configs.generation().await.ok();
                        if now.is_some() && now != seen {
                            break;
                        }
                    }
                }
            }
        }
    }

    /// One pass, when this reconciler holds (or can take) the lease.
    pub async fn pass(&self) -> SandboxResult<Pass> {
        let store = &self.sandboxes.store;
        if !store
            .sandboxes
            .acquire_lease(LEASE, &self.holder, self.lease_ttl())
            .await?
        {
            return Ok(Pass::default());
        }
        let mut pass = Pass {
            acted: true,
            ..Pass::default()
        };
        let (configs, _) = self.sandboxes.configs.effective().await?;
        let records = store.sandboxes.sandboxes().await?;
        let records = self.sandboxes.refresh(records).await?;
        let now = self.sandboxes.now_ms();
        let options = self.sandboxes.options();
        let specs: HashMap<_, _> = configs
            .iter()
            .map(|config| (config.name.as_str(), (pool_spec(config), config.count)))
            .collect();

        let mut warm: HashMap<&str, Vec<StoredSandbox>> = HashMap::new();
        for record in records {
            if record.session_id.is_some() {
                let idle_ms = now - record.changed_at_ms;
                match record.state {
                    SandboxState::Paused if idle_ms >= options.dead_after.as_millis() as i64 => {
                        tracing::info!(runtime_id = %record.runtime_id, "deleting a sandbox paused for too long");
                        self.sandboxes.retire(record).await?;
                        pass.retired += 1;
                    }
                    SandboxState::Stopped
                        if idle_ms >= options.stopped_retention.as_millis() as i64 =>
                    {
                        store.sandboxes.delete_sandbox(&record).await?;
                        pass.retired += 1;
                    }
                    _ => {}
                }
                continue;
            }
            let current = record
                .pool
                .as_deref()
                .and_then(|pool| specs.get_key_value(pool))
                .filter(|(_, (spec, _))| {
                    *spec == record.spec
                        && record.state != SandboxState::Stopped
                        // A key that no longer derives could not be handed to a claimer.
                        && self.sandboxes.current_key(&record).is_some()
                });
            match current {
                Some((pool, _)) => warm.entry(pool).or_default().push(record),
                None => {
                    self.sandboxes.cull(&record).await?;
                    pass.culled += 1;
                }
            }
        }

        for (name, (spec, count)) in &specs {
            let mut pool = warm.remove(name).unwrap_or_default();
            let target = usize::try_from(*count).unwrap_or(0);
            if pool.len() > target {
                // Keep the ready ones: drop failed, then starting, newest first.
                pool.sort_by_key(|record| {
                    (
                        record.state != SandboxState::Running,
                        record.state == SandboxState::Error,
                        record.created_at_ms,
                    )
                });
                for record in pool.drain(target..) {
                    self.sandboxes.cull(&record).await?;
                    pass.culled += 1;
                }
            }
            for _ in pool.len()..target {
                match self
                    .sandboxes
                    .launch(spec.clone(), Some((*name).to_owned()), None)
                    .await
                {
                    Ok(_) => pass.created += 1,
                    // The record stays, in error with the reason, for the pool status.
                    Err(super::SandboxError::Driver(err)) => {
                        tracing::warn!(pool = %name, error = %err, "cannot start a warm sandbox");
                        pass.created += 1;
                    }
                    Err(err) => return Err(err),
                }
            }
        }
        Ok(pass)
    }
}
