//! Where sandboxes run. A driver turns the store's records into workloads on a platform
//! and reports what the platform says of them; the store stays the source of truth for
//! what should exist, so any replica can drive any sandbox.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::ambient::Clock;
use sandgate_store::{Restarts, SandboxSpec, SandboxState, StoredSandbox};

/// Why a platform call failed; the message is safe to show (it names no secret).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DriverError(pub String);

/// What the platform says of one sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub state: SandboxState,
    /// Why it is not running, when it is not: image pull failure, unschedulable…
    pub detail: Option<String>,
    /// Its workload's restarts, where the platform restarts workloads.
    pub restarts: Restarts,
    /// The address its connections come from, where the platform says (a pod's IP):
    /// written to the record's `source_address`, by which the model gateway knows its
    /// calls.
    pub source_address: Option<String>,
}

impl Observed {
    /// `state`, for `detail`, with no restarts.
    pub fn new(state: SandboxState, detail: Option<String>) -> Self {
        Self {
            state,
            detail,
            restarts: Restarts::default(),
            source_address: None,
        }
    }
}

/// The keys a sandbox's agent-server is started with: its current session key
/// (`SESSION_API_KEY`, rotated by every resume) and its secret key (`OH_SECRET_KEY`, what
/// it encrypts the secrets it saves with: the same for the sandbox's whole life, so that a
/// resumed conversation reads back what it saved). Never logged.
#[derive(Clone, PartialEq, Eq)]
pub struct SandboxKeys {
    pub session: String,
    pub secret: String,
}

/// Whether `name` is a variable an agent-server reads its session keys from that Sandgate
/// does not set: the list `OH_SESSION_API_KEYS_<n>`, which every release reads *instead
/// of* `SESSION_API_KEY` when its first item is set. A spec's are dropped on every driver:
/// the session key is Sandgate's to give and to rotate, and with one of them set, the
/// agent-server would refuse the key Sandgate issued (its sandbox never identified, its
/// conversation unreachable with the key the platform holds).
pub fn is_foreign_session_key(name: &str) -> bool {
    name.strip_prefix("OH_SESSION_API_KEYS_")
        .is_some_and(|index| !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()))
}

impl std::fmt::Debug for SandboxKeys {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("SandboxKeys(..)")
    }
}

/// The environment variable that carries the secret key, on every platform.
pub const SECRET_KEY_ENV: &str = "OH_SECRET_KEY";

/// Why a platform refuses a sandbox's spec outright: the field at fault, its value as
/// sent, and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub field: &'static str,
    pub input: serde_json::Value,
    pub message: String,
}

#[async_trait]
pub trait SandboxDriver: Send + Sync + 'static {
    /// Refuses a spec the platform would never run (a root user where pods may not run as
    /// root), before anything is recorded.
    fn admit(&self, _spec: &SandboxSpec) -> Result<(), Refusal> {
        Ok(())
    }

    /// Creates the sandbox's workload and starts it with its keys in its environment
    /// (`SESSION_API_KEY`, `OH_SECRET_KEY`).
    async fn create(&self, sandbox: &StoredSandbox, keys: &SandboxKeys) -> Result<(), DriverError>;

    /// Stops the workload and keeps its storage.
    async fn pause(&self, sandbox: &StoredSandbox) -> Result<(), DriverError>;

    /// Starts a paused workload again, on the image it was created with, with a new
    /// session key (and its one secret key).
    async fn resume(&self, sandbox: &StoredSandbox, keys: &SandboxKeys) -> Result<(), DriverError>;

    /// Starts a failed sandbox again with a new session key: makes what is missing of it
    /// (a create that failed half-way left nothing, someone deleted a part), keeps what is
    /// there (its workspace), and starts a new workload. By default, a resume.
    async fn recover(
        &self,
        sandbox: &StoredSandbox,
        keys: &SandboxKeys,
    ) -> Result<(), DriverError> {
        self.resume(sandbox, keys).await
    }

    /// Removes everything the sandbox `runtime_id` has on the platform; nothing left is
    /// not an error.
    async fn delete(&self, runtime_id: &str) -> Result<(), DriverError>;

    /// What the platform says of `sandboxes` that are starting or running, by runtime id.
    /// A sandbox missing from the answer keeps its stored state.
    async fn observe(
        &self,
        sandboxes: &[StoredSandbox],
    ) -> Result<HashMap<String, Observed>, DriverError>;

    /// Every sandbox the platform has something of, by runtime id, with when the oldest
    /// of it was made (milliseconds since the epoch): what the orphan sweep holds against
    /// the store. A platform with nothing of its own to leave behind has none.
    async fn workloads(&self) -> Result<HashMap<String, i64>, DriverError> {
        Ok(HashMap::new())
    }

    /// Before a claimed warm sandbox is personalised with `spec` (a start's own): what
    /// the platform changes for it (the process driver: its network reaches the webhooks
    /// `spec` names). By default, nothing.
    async fn claiming(
        &self,
        _sandbox: &StoredSandbox,
        _spec: &sandgate_store::SandboxSpec,
    ) -> Result<(), DriverError> {
        Ok(())
    }

    /// Where Sandgate reaches the sandbox's agent-server to personalise it at claim
    /// (`init.rs`); `None`: the platform runs no agent-server, and a claim delivers
    /// nothing.
    fn init_url(&self, _sandbox: &StoredSandbox) -> Option<String> {
        None
    }

    /// Where the sandbox is reached, when the platform decides it; `None`: at
    /// `{scheme}://{runtime_id}{separator}{base_url}`, the host its ingress routes.
    fn url(&self, _sandbox: &StoredSandbox) -> Option<String> {
        None
    }
}

/// The embedded driver: runs no containers. A sandbox exists as its record, and goes from
/// starting to running once `start_delay` has passed on the service clock, so that
/// `sandgate serve` shows pools, claims and pauses without a cluster.
pub struct LocalDriver {
    start_delay: Duration,
    clock: Arc<dyn Clock>,
}

impl LocalDriver {
    pub fn new(start_delay: Duration, clock: Arc<dyn Clock>) -> Self {
        Self { start_delay, clock }
    }
}

#[async_trait]
impl SandboxDriver for LocalDriver {
    async fn create(&self, _: &StoredSandbox, _: &SandboxKeys) -> Result<(), DriverError> {
        Ok(())
    }

    async fn pause(&self, _: &StoredSandbox) -> Result<(), DriverError> {
        Ok(())
    }

    async fn resume(&self, _: &StoredSandbox, _: &SandboxKeys) -> Result<(), DriverError> {
        Ok(())
    }

    async fn delete(&self, _: &str) -> Result<(), DriverError> {
        Ok(())
    }

    async fn observe(
        &self,
        sandboxes: &[StoredSandbox],
    ) -> Result<HashMap<String, Observed>, DriverError> {
        let now = self.clock.now_ms();
        let delay = self.start_delay.as_millis() as i64;
        Ok(sandboxes
            .iter()
            .filter(|sandbox| {
                sandbox.state == SandboxState::Starting && sandbox.changed_at_ms + delay <= now
            })
            .map(|sandbox| {
                (
                    sandbox.runtime_id.clone(),
                    Observed::new(SandboxState::Running, None),
                )
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::is_foreign_session_key;

    #[test]
    fn the_agent_server_s_list_of_session_keys_is_foreign_and_nothing_else() {
        for name in [
            "OH_SESSION_API_KEYS_0",
            "OH_SESSION_API_KEYS_1",
            "OH_SESSION_API_KEYS_12",
        ] {
            assert!(is_foreign_session_key(name), "{name}");
        }
        for name in [
            "SESSION_API_KEY",
            "OH_SESSION_API_KEYS_",
            "OH_SESSION_API_KEYS_x",
            "OH_SECRET_KEY",
            "OH_SESSION_API_KEYS",
        ] {
            assert!(!is_foreign_session_key(name), "{name}");
        }
    }
}
