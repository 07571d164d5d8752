//! Stopping a `process` sandbox: every process of its namespace (or group) asked to end,
//! then killed past a grace period; all of them at once when Sandgate stops; and what a
//! previous run of Sandgate left running.

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Child;

use super::{PID_FILE, Process, ProcessDriver};
use crate::sandboxes::process_isolation::{
    detached_members, only_deaf_init, signal_namespace, start_time,
};

/// How often a stop looks whether the sandbox's processes have gone.
pub(super) const EXIT_POLL: Duration = Duration::from_millis(20);

/// Stops `child` and everything it started: SIGTERM, then SIGKILL when it has not exited
/// after `grace`. What the command started gets its SIGTERM first, and up to half the
/// grace period to end, while the command keeps the namespace alive (its exit would have
/// the kernel kill them at once); then the command. Killing bubblewrap (the group's
/// leader) and the namespace's first process with it ends the namespace.
pub(super) async fn terminate(mut child: Child, grace: Duration) {
    let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) else {
        return; // exited and reaped already
    };
    let group = Pid::from_raw(pid);
    let started = tokio::time::Instant::now();
    if let Some(detached) = detached_members(pid).filter(|members| !members.is_empty()) {
        for member in &detached {
            let _ = nix::sys::signal::kill(Pid::from_raw(*member), Signal::SIGTERM);
        }
        let _ = tokio::time::timeout(grace / 2, async {
            while detached.iter().any(|member| running(*member)) {
                tokio::time::sleep(EXIT_POLL).await;
            }
        })
        .await;
    }
    let grace = grace.saturating_sub(started.elapsed());
    // Every process of its namespace, detached ones included; where no namespace could be
    // made, its group.
    if !signal_namespace(pid, Signal::SIGTERM) {
        let _ = killpg(group, Signal::SIGTERM);
    }
    let exited = async {
        loop {
            if only_deaf_init(pid) {
                // Outside a namespace the SIGTERM would have ended it.
                let _ = killpg(group, Signal::SIGKILL);
            }
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            tokio::time::sleep(EXIT_POLL).await;
        }
    };
    if tokio::time::timeout(grace, exited).await.is_err() {
        let _ = killpg(group, Signal::SIGKILL);
        let _ = child.wait().await;
    } else {
        // What the process started may outlive it.
        let _ = killpg(group, Signal::SIGKILL);
    }
}

/// Whether `pid` still runs (a zombie has ended: only its parent's wait is left).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// Stops the process a previous run started in `dir`, if it is still there, with its
/// namespace: the pid file names it and its start time, which tells it from a process
/// that took its pid since (its working directory would not: a sandbox may change it).
pub(super) fn stop_leftover(dir: &Path) {
    let recorded = std::fs::read_to_string(dir.join(PID_FILE)).unwrap_or_default();
    let mut fields = recorded.split_whitespace();
    let pid = fields.next().and_then(|pid| pid.parse::<i32>().ok());
    let started = fields
        .next()
        .and_then(|started| started.parse::<u64>().ok());
    if let (Some(pid), Some(started)) = (pid, started)
        && start_time(pid) == Some(started)
    {
        tracing::info!(pid, dir = %dir.display(), "ending a sandbox a previous run left running");
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let _ = std::fs::remove_file(dir.join(PID_FILE));
}

impl Drop for ProcessDriver {
    /// Sandgate is stopping: its sandboxes go with it, as a stop ends them (SIGTERM to
    /// every process, the grace period, then SIGKILL of each namespace or group), all at
    /// once. It blocks, once, at shutdown: there is no runtime left to wait on. The next
    /// run reports them in error.
    fn drop(&mut self) {
        let grace = self.options.stop_grace;
        let mut sandboxes = self.sandboxes();
        let mut running: Vec<(i32, &mut Child)> = sandboxes
            .values_mut()
            .filter_map(|sandbox| match &mut sandbox.process {
                Process::Running(child) => {
                    let pid = child.id().and_then(|pid| i32::try_from(pid).ok())?;
                    Some((pid, child))
                }
                _ => None,
            })
            .collect();
        for (pid, _) in &running {
            if !signal_namespace(*pid, Signal::SIGTERM) {
                let _ = killpg(Pid::from_raw(*pid), Signal::SIGTERM);
            }
        }
        let deadline = std::time::Instant::now() + grace;
        while std::time::Instant::now() < deadline
            && running.iter_mut().any(|(pid, child)| {
                if only_deaf_init(*pid) {
                    let _ = killpg(Pid::from_raw(*pid), Signal::SIGKILL);
                }
                matches!(child.try_wait(), Ok(None))
            })
        {
            std::thread::sleep(EXIT_POLL);
        }
        for (pid, _) in &running {
            // Those that exited too: what they started may not have.
            let _ = killpg(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        // Their networks: each pasta ends with its namespace's name.
        if let Some(tools) = &self.isolation.network {
            for id in sandboxes.keys() {
                super::network::detach(tools, id, &self.state_dir(id));
            }
        }
    }
}
