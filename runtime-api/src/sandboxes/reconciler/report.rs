//! What the reconciler reports as metrics: each acting pass's duration and actions, and the
//! warm pools' counts by state (at 0 on a replica without the lease, so that only the
//! acting reconciler's add up).

use std::collections::HashMap;
use std::sync::PoisonError;
use std::time::Instant;

use super::{Pass, Reconciler};
use crate::sandboxes::{PoolCounts, SandboxResult};

/// The states a warm pool's gauge is labelled with.
const POOL_STATES: [&str; 3] = ["ready", "starting", "failed"];

/// The actions a pass counts, as `sandgate_reconcile_actions_total` labels them.
const ACTIONS: [&str; 6] = [
    "created", "culled", "retired", "orphans", "replaced", "paused",
];

/// Registers the reconciler's metrics with their help text (after the recorder is
/// installed).
pub fn describe_metrics() {
    metrics::describe_histogram!(
        "sandgate_reconcile_duration_seconds",
        metrics::Unit::Seconds,
        "duration of the warm-pool reconciler's passes (those that held the lease)"
    );
    metrics::describe_counter!(
        "sandgate_reconcile_actions_total",
        "sandboxes the reconciler created, culled (warm, off spec or surplus), replaced (warm, failed), paused (claimed, idle) or retired (claimed, dead)"
    );
    metrics::describe_gauge!(
        "sandgate_warm_pool_sandboxes",
        "warm sandboxes of each pool by state after the last pass (0 on replicas without the lease)"
    );
}

/// The action counters at 0, so that they exist from the start.
pub(super) fn zero_counters() {
    for action in ACTIONS {
        metrics::counter!("sandgate_reconcile_actions_total", "action" => action).increment(0);
    }
}

impl Reconciler {
    /// Records the metrics of a pass begun at `started` that ended with `result`.
    pub(super) fn record(
        &self,
        started: Instant,
        result: &SandboxResult<(Pass, HashMap<String, PoolCounts>)>,
    ) {
        match &result {
            Ok((pass, _)) if !pass.acted => self.report_pools(&HashMap::new()),
            Ok((pass, pools)) => {
                let counts = [
                    pass.created,
                    pass.culled,
                    pass.retired,
                    pass.orphans,
                    pass.replaced,
                    pass.paused,
                ];
                for (action, count) in ACTIONS.into_iter().zip(counts) {
                    metrics::counter!("sandgate_reconcile_actions_total", "action" => action)
                        .increment(count as u64);
                }
                self.report_pools(pools);
                metrics::histogram!("sandgate_reconcile_duration_seconds")
                    .record(started.elapsed());
            }
            Err(_) => {
                metrics::histogram!("sandgate_reconcile_duration_seconds")
                    .record(started.elapsed());
            }
        }
    }

    /// Sets each pool's gauges, and those of pools no longer reported to 0.
    fn report_pools(&self, pools: &HashMap<String, PoolCounts>) {
        let mut reported = self.reported.lock().unwrap_or_else(PoisonError::into_inner);
        for gone in reported.iter().filter(|pool| !pools.contains_key(*pool)) {
            for state in POOL_STATES {
                metrics::gauge!("sandgate_warm_pool_sandboxes", "pool" => gone.clone(), "state" => state)
                    .set(0.0);
            }
        }
        for (pool, counts) in pools {
            for (state, count) in
                POOL_STATES
                    .into_iter()
                    .zip([counts.ready, counts.starting, counts.failed])
            {
                metrics::gauge!("sandgate_warm_pool_sandboxes", "pool" => pool.clone(), "state" => state)
                    .set(count as f64);
            }
        }
        *reported = pools.keys().cloned().collect();
    }
}
