//! What a caller does to a sandbox: start it (claiming a warm one when one matches, else
//! cold-starting it; starting again one that failed), pause, resume (a failed one made
//! again where it is missing), stop; and the reconciler's retirements and culls.

use super::matching::personal;
use super::spec::claim_key;
use super::{CAS_ATTEMPTS, SandboxError, SandboxResult, Sandboxes, state_name};
use crate::ambient::random_hex;
use crate::auth::session_key_digest;
use sandgate_store::{
    Fence, Launch, Restarts, SandboxSpec, SandboxState, StoredSandbox, SweepIndex, Timeline,
};

impl Sandboxes {
    /// Claims a warm sandbox matching `spec`, else cold-starts one; answers the session's
    /// sandbox when it has one, started again when it failed. `true`: claimed. A claim or
    /// a cold start begins the sandbox's timeline (`timeline.rs`); starting a failed one
    /// again, like a resume, keeps the timeline of the start that made it.
    pub async fn start(
        &self,
        spec: SandboxSpec,
        session_id: String,
    ) -> SandboxResult<(StoredSandbox, bool)> {
        let spec = personal(spec);
        if let Some(existing) = self.session(&session_id).await? {
            match existing.state {
                SandboxState::Stopped => {}
                // A failed start (or a sandbox that failed since) is started again, on
                // what it was made with; another spec would silently not be what was
                // asked for.
                SandboxState::Error if existing.claim_key == claim_key(&spec) => {
                    return Ok((self.restart(existing).await?, false));
                }
                SandboxState::Error => {
                    return Err(SandboxError::Conflict(format!(
                        "Session {session_id} has runtime {} in error ({}), made with another \
                         image, command, working directory or environment: start it again with \
                         its own spec, resume it (/resume), or stop it (/stop) before starting \
                         this one",
                        existing.runtime_id,
                        existing
                            .status_detail
                            .as_deref()
                            .unwrap_or("no reason recorded")
                    )));
                }
                _ => return Ok((existing, false)),
            }
        }
        let admitted = self.admit_start(&session_id).await?;
        let started = match self.claim(&spec, &session_id).await? {
            Ok(claimed) => {
                self.claimed.notify_one();
                (claimed, true)
            }
            Err(reason) => {
                self.cold_start(&reason);
                (self.launch(spec, session_id, reason.reason).await?, false)
            }
        };
        if let Some(admitted) = admitted {
            admitted.started();
        }
        self.probe_alive(&started.0);
        Ok(started)
    }

    /// Cold-starts a sandbox for `session`, for `reason` (no warm sandbox matched): a
    /// new record, its key, and the platform asked for it; its timeline starts now. A
    /// platform failure leaves the record in error, saying why.
    pub(super) async fn launch(
        &self,
        spec: SandboxSpec,
        session: String,
        reason: &str,
    ) -> SandboxResult<StoredSandbox> {
        let mut record = self.record(spec, None, Some(session));
        record.timeline = Some(Timeline::new(
            Launch::Cold,
            Some(reason.to_owned()),
            record.created_at_ms,
        ));
        match self.launch_record(record, None).await? {
            Ok(record) => Ok(record),
            Err((_, err)) => Err(err.into()),
        }
    }

    pub async fn pause(&self, runtime_id: &str) -> SandboxResult<StoredSandbox> {
        let record = self.by_id(runtime_id).await?;
        match record.state {
            SandboxState::Paused => return Ok(record),
            SandboxState::Stopped => {
                return Err(SandboxError::Conflict(format!(
                    "Runtime {runtime_id} is stopped"
                )));
            }
            _ => {}
        }
        self.driver.pause(&record).await?;
        let session = record.session_id.clone();
        let paused = self
            .update(
                record,
                |record| {
                    record.state = SandboxState::Paused;
                    record.status_detail = None;
                    record.restarts = Restarts::default();
                },
                None,
            )
            .await?
            .ok_or_else(|| SandboxError::NotFound(format!("Runtime {runtime_id} not found")))?;
        self.quotas.release(session.as_deref()).await;
        Ok(paused)
    }

    /// Pauses a claimed sandbox idle since `idle_since` (the idle sweep), as `/pause`
    /// does. Read again first: activity marked since the sweep read it keeps it running.
    /// `false`: not idle after all, or gone.
    pub(super) async fn pause_idle(
        &self,
        record: StoredSandbox,
        idle_since: i64,
        fence: Option<&Fence>,
    ) -> SandboxResult<bool> {
        let Some(current) = self.store.sandboxes.sandbox(&record.runtime_id).await? else {
            return Ok(false);
        };
        let idle = current
            .sweep_index()
            .is_some_and(|(index, at)| index == SweepIndex::Running && at <= idle_since);
        if !idle {
            return Ok(false);
        }
        self.driver.pause(&current).await?;
        let session = current.session_id.clone();
        let paused = self
            .update(
                current,
                |record| {
                    record.state = SandboxState::Paused;
                    record.status_detail = None;
                    record.restarts = Restarts::default();
                },
                fence,
            )
            .await?;
        self.quotas.release(session.as_deref()).await;
        Ok(paused.is_some())
    }

    /// Starts a paused (or failed) sandbox again, on its original image, with a new
    /// session key; the old key stops working.
    pub async fn resume(&self, runtime_id: &str) -> SandboxResult<StoredSandbox> {
        let record = self.by_id(runtime_id).await?;
        self.restart(record).await
    }

    /// [`Self::resume`] of `record`. A failed one has what is missing of it made again
    /// (a create that failed half-way left nothing), keeping what is there (its
    /// workspace).
    pub(super) async fn restart(&self, record: StoredSandbox) -> SandboxResult<StoredSandbox> {
        let runtime_id = record.runtime_id.clone();
        let runtime_id = runtime_id.as_str();
        if !matches!(record.state, SandboxState::Paused | SandboxState::Error) {
            return Err(SandboxError::Conflict(format!(
                "Runtime {runtime_id} is {}, not paused or in error",
                state_name(record.state)
            )));
        }
        let session = record.session_id.clone().unwrap_or_default();
        let admitted = self.admit_start(&session).await?;
        let nonce = random_hex(16);
        let keys = self.keys.keys(runtime_id, &nonce);
        let key_sha256 = session_key_digest(&keys.session);
        self.store
            .session_keys
            .put_session_key(&key_sha256, runtime_id)
            .await?;
        let mut resumed = record.clone();
        resumed.key_nonce.clone_from(&nonce);
        resumed.key_sha256.clone_from(&key_sha256);
        if record.state == SandboxState::Error {
            self.driver.recover(&resumed, &keys).await?;
        } else {
            self.driver.resume(&resumed, &keys).await?;
        }
        let old_key = record.key_sha256.clone();
        let updated = self
            .update(
                record,
                |record| {
                    record.state = SandboxState::Starting;
                    record.status_detail = None;
                    record.restarts = Restarts::default();
                    record.key_nonce.clone_from(&nonce);
                    record.key_sha256.clone_from(&key_sha256);
                },
                None,
            )
            .await?
            .ok_or_else(|| SandboxError::NotFound(format!("Runtime {runtime_id} not found")))?;
        if let Some(admitted) = admitted {
            admitted.started();
        }
        self.store.session_keys.delete_session_key(&old_key).await?;
        Ok(updated)
    }

    pub async fn stop(&self, runtime_id: &str) -> SandboxResult<StoredSandbox> {
        let record = self.by_id(runtime_id).await?;
        if record.state == SandboxState::Stopped {
            return Ok(record);
        }
        let session = record.session_id.clone();
        let stopped = self
            .retire(record, None)
            .await?
            .ok_or_else(|| SandboxError::NotFound(format!("Runtime {runtime_id} not found")))?;
        self.quotas.release(session.as_deref()).await;
        Ok(stopped)
    }

    /// Deletes a claimed sandbox from the platform and marks it stopped; its key stops
    /// working. The record stays listed for the stopped retention.
    pub(super) async fn retire(
        &self,
        record: StoredSandbox,
        fence: Option<&Fence>,
    ) -> SandboxResult<Option<StoredSandbox>> {
        self.driver.delete(&record.runtime_id).await?;
        let key = record.key_sha256.clone();
        let stopped = self
            .update(
                record,
                |record| {
                    record.state = SandboxState::Stopped;
                    record.status_detail = None;
                    record.restarts = Restarts::default();
                },
                fence,
            )
            .await?;
        self.store.session_keys.delete_session_key(&key).await?;
        Ok(stopped)
    }

    /// Deletes a warm sandbox: marked stopped first, which takes it out of the claim index
    /// atomically, so a claim racing with the cull either won (and the sandbox is left
    /// alone) or can no longer take it; then the platform's workload goes, then the
    /// record. A platform failure leaves the record stopped, culled again next pass.
    /// `false`: a claim took it first, or it is gone.
    pub(super) async fn cull(
        &self,
        record: StoredSandbox,
        fence: Option<&Fence>,
    ) -> SandboxResult<bool> {
        let mut current = record;
        for _ in 0..CAS_ATTEMPTS {
            if current.session_id.is_some() {
                return Ok(false);
            }
            if current.state != SandboxState::Stopped {
                let mut next = current.clone();
                next.state = SandboxState::Stopped;
                next.changed_at_ms = self.clock.now_ms();
                next.version += 1;
                if self
                    .store
                    .sandboxes
                    .put_sandbox(Some(&current), &next, fence)
                    .await?
                {
                    current = next;
                } else {
                    match self.store.sandboxes.sandbox(&current.runtime_id).await? {
                        Some(fresh) => current = fresh,
                        None => return Ok(false),
                    }
                    continue;
                }
            }
            self.driver.delete(&current.runtime_id).await?;
            if self.store.sandboxes.delete_sandbox(&current, fence).await? {
                self.store
                    .session_keys
                    .delete_session_key(&current.key_sha256)
                    .await?;
                return Ok(true);
            }
            match self.store.sandboxes.sandbox(&current.runtime_id).await? {
                Some(fresh) => current = fresh,
                None => return Ok(false),
            }
        }
        Err(SandboxError::Contention)
    }
}
