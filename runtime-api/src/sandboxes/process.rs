//! The `process` driver: each sandbox is a real process on this machine, so that one
//! machine shows the whole loop (a warm pool of agent-servers, a claim, a conversation
//! posting its webhooks back, pause and resume with a new key) without a cluster.
//!
//! - A sandbox runs its command (without one, its image as a program: there is no image
//!   to take an entrypoint from; a program named by an absolute path that this machine
//!   lacks, such as an image's `/usr/local/bin/openhands-agent-server`, runs by its file
//!   name from the sandbox's `PATH`) in a view of the filesystem of its own
//!   (`process/view.rs`): the system directories read-only, its folder
//!   `{data_dir}/sandboxes/{runtime_id}/` (its uid's, 0700; `process/layout.rs`), whose
//!   `workspace/` it sees at the top of its spec's working directory (`/workspace` for
//!   `/workspace/project`, and without one), `HOME` its `home/`, `TMPDIR` and `/tmp` its
//!   `tmp/`. Its port, pid and output (`sandbox.log`) are in
//!   `{data_dir}/sandbox-state/{runtime_id}/`, which no sandbox sees. Where this machine
//!   allows (as root, or without root where `/dev/net/tun` is open to Sandgate's user),
//!   it has a network of its own (`process/network.rs`): Sandgate's port through a door of
//!   its own (`process/door.rs`, by which the gateway knows its calls), its webhooks and
//!   the internet, never this machine's loopback services nor another sandbox.
//! - Its environment is the spec's, `SESSION_API_KEY`, `OH_SECRET_KEY`, `PORT`, `HOME` and
//!   `TMPDIR`, and of Sandgate's own only `PATH`, the locale and the time zone: Sandgate's
//!   secrets never reach a sandbox. It runs in PID and user namespaces of its own, as a
//!   uid of its own when Sandgate is root, under rlimits (`process_isolation.rs` says what
//!   this machine allows): it cannot read Sandgate's `/proc` nor another sandbox's. A
//!   start whose program its uid cannot reach fails, naming the path, its mode and the
//!   uid.
//! - Sandboxes of one image all name the agent-server's port (`SANDBOX_PORT`). Each gets a
//!   free port of its own: every argument of its command that is that port, or ends in
//!   `=port` or `:port`, is rewritten to it, `PORT` holds it too, and its URL is
//!   `http://127.0.0.1:{port}`. The port is kept in the sandbox's directory, so its URL
//!   stays the same across pauses and Sandgate's restarts.
//! - It is running once the server on its port is its own (`process/readiness.rs`): it
//!   takes the sandbox's session key and refuses another, which nothing else listening
//!   there can do; in error once its process exits.
//! - Pause stops every process of the sandbox (SIGTERM to each process of its namespace,
//!   then, after a grace period, SIGKILL of the namespace, which the kernel extends to
//!   all of them, detached or not) and keeps the directory; resume starts the command
//!   again with the new key; delete stops it and removes the directory.
//!
//! The processes are this Sandgate's children: they stop when it stops. A run killed
//! without a chance to stop them leaves them running; the next run ends them (it does
//! not adopt them: their session keys were the old run's to rotate) and reports their
//! sandboxes in error until resumed. One machine, one replica: the driver keeps its
//! processes in memory.

mod command_line;
mod door;
mod layout;
mod network;
mod readiness;
mod starting;
mod stopping;
mod view;

pub use door::{Door, Doors, OpenDoor, door_peer};
pub use layout::{Unreachable, check_reach};
pub use network::{Egress, Joining, NetworkOptions, NetworkTools};
pub(crate) use view::ROOTLESS_STAGE;
pub use view::ViewTools;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Child;

use super::driver::{DriverError, Observed, SandboxDriver, SandboxKeys};
use super::process_isolation::{Isolation, Requirement};
use crate::ambient::Clock;
use readiness::{PortOf, Probe};
use sandgate_store::{SandboxState, StoredSandbox};
use stopping::{stop_leftover, terminate};
const PORT_FILE: &str = "port";
pub(super) const PID_FILE: &str = "pid";
pub(super) const LOG_FILE: &str = "sandbox.log";
/// What a start's error says when its network namespace could not be set up.
const NAMESPACE_SETUP: &str = "its network namespace could not be set up";

/// Where and how sandboxes run on this machine.
#[derive(Clone, Debug)]
pub struct ProcessOptions {
    /// The sandboxes' folders, and nothing else: `{data_dir}/sandboxes`.
    pub root: PathBuf,
    /// Sandgate's files of each sandbox (port, pid, log): `{data_dir}/sandbox-state`.
    pub state: PathBuf,
    /// Directories every sandbox sees read-only at the same path, bound with Sandgate's
    /// rights (`SANDBOX_READ_ONLY_PATHS`).
    pub read_only: Vec<PathBuf>,
    /// `SANDBOX_PORT`: the port sandbox commands name, rewritten to each one's own.
    pub port: u16,
    /// How long a stopped process may take to exit on SIGTERM before it is killed.
    pub stop_grace: Duration,
    /// What a sandbox's network lets through, where it has one of its own.
    pub network: NetworkOptions,
    /// Where it has one, how it reaches Sandgate: through a door of its own (`door.rs`).
    pub doors: Option<Doors>,
    /// Whether it starts where sandboxes cannot get a view and a network of their own.
    pub isolation: Requirement,
}

/// What the driver knows of one sandbox's process.
enum Process {
    Running(Child),
    /// Exited by itself: why, for `status_detail`, and its process group, where what it
    /// started may still run.
    Exited {
        detail: String,
        group: Option<i32>,
    },
    /// Paused, or not started by this run of Sandgate.
    Stopped,
}

struct Sandbox {
    port: u16,
    process: Process,
    /// The loopback ports of the webhooks its network reaches (`network.rs`).
    webhook_ports: Vec<u16>,
    /// The keys its process was started with, until the server on its port has shown it
    /// holds them (`readiness.rs`); `None` once it has.
    unidentified: Option<SandboxKeys>,
    /// Its way to Sandgate while its process runs in a network of its own.
    door: Option<Door>,
}

impl Sandbox {
    /// How its port is probed now: `networked`, in a network of its own (where only its
    /// own processes may listen behind the port); else on the machine's loopback, where
    /// `first` (Sandgate's child) says which processes are its own.
    fn probe(&self, networked: bool, first: Option<i32>) -> Probe {
        match &self.unidentified {
            Some(keys) => Probe::Identify {
                keys: keys.clone(),
                port_of: match (networked, first) {
                    (true, _) => PortOf::OwnNetwork,
                    (false, Some(first)) => PortOf::Loopback(first),
                    (false, None) => PortOf::Unknown,
                },
            },
            None if networked => Probe::Answers,
            None => Probe::Accepts,
        }
    }
}

pub struct ProcessDriver {
    options: ProcessOptions,
    /// What this machine lets the driver do to keep sandboxes apart.
    isolation: Isolation,
    /// When this driver started (service clock): a live sandbox it has no process for and
    /// that changed before then was started by a previous run.
    started_ms: i64,
    sandboxes: Mutex<HashMap<String, Sandbox>>,
    /// What asks a sandbox's server who it is: never through a proxy, never redirected.
    client: reqwest::Client,
}

impl ProcessDriver {
    /// A driver on `options.root`, created if missing. Processes a previous run left
    /// behind are stopped; the ports of its sandboxes are read back.
    pub fn open(options: ProcessOptions, clock: &dyn Clock) -> Result<Self, DriverError> {
        super::process_isolation::protect_sandgate();
        Self::open_on(options, Isolation::detect(), clock)
    }

    /// [`Self::open`] with what this machine lets the driver do: refused where sandboxes
    /// would not be kept apart, unless `options.isolation` is best effort.
    pub fn open_on(
        options: ProcessOptions,
        isolation: Isolation,
        clock: &dyn Clock,
    ) -> Result<Self, DriverError> {
        if options.isolation == Requirement::Required
            && let Some(shortfall) = isolation.shortfall()
        {
            return Err(DriverError(shortfall));
        }
        for gap in isolation.gaps() {
            tracing::warn!("sandbox driver: process: {gap}");
        }
        for dir in [&options.root, &options.state] {
            std::fs::create_dir_all(dir)
                .and_then(|()| {
                    // Root's alone: a sandbox reaches its folder through its view only.
                    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                })
                .map_err(|err| {
                    DriverError(format!(
                        "cannot prepare the directory {}: {err}",
                        dir.display()
                    ))
                })?;
        }
        let mut sandboxes = HashMap::new();
        let entries = std::fs::read_dir(&options.state).map_err(|err| {
            DriverError(format!("cannot read {}: {err}", options.state.display()))
        })?;
        for entry in entries.flatten() {
            let dir = entry.path();
            let Some(runtime_id) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            stop_leftover(&dir);
            if let Some(tools) = &isolation.network {
                network::detach(tools, &runtime_id, &dir);
            }
            if let Some(port) = read_number::<u16>(&dir.join(PORT_FILE)) {
                sandboxes.insert(
                    runtime_id,
                    Sandbox {
                        port,
                        process: Process::Stopped,
                        webhook_ports: Vec::new(),
                        unidentified: None,
                        door: None,
                    },
                );
            }
        }
        Ok(Self {
            options,
            isolation,
            started_ms: clock.now_ms(),
            sandboxes: Mutex::new(sandboxes),
            client: super::init::client(),
        })
    }

    /// What sandboxes lack on this machine (empty when nothing), for `check-config`.
    pub fn isolation_gaps(&self) -> Vec<String> {
        self.isolation.gaps()
    }

    /// The sandbox's folder: its own.
    fn dir(&self, runtime_id: &str) -> PathBuf {
        self.options.root.join(runtime_id)
    }

    /// Sandgate's directory for the sandbox: its port, pid and log.
    fn state_dir(&self, runtime_id: &str) -> PathBuf {
        self.options.state.join(runtime_id)
    }

    /// The directory that holds the store and both of the above.
    fn data_dir(&self) -> &Path {
        self.options.root.parent().unwrap_or(&self.options.root)
    }

    fn sandboxes(&self) -> MutexGuard<'_, HashMap<String, Sandbox>> {
        // A panic while holding the lock leaves the map as it was between two statements,
        // which every reader copes with.
        self.sandboxes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The sandbox's port: its own when it has one, else a free one.
    fn port(&self, runtime_id: &str) -> Result<u16, DriverError> {
        if let Some(sandbox) = self.sandboxes().get(runtime_id) {
            return Ok(sandbox.port);
        }
        free_port()
    }

    /// Starts the sandbox's process, stopping one it still has.
    async fn start(&self, sandbox: &StoredSandbox, keys: &SandboxKeys) -> Result<(), DriverError> {
        // A namespace whose setup failed (its bubblewrap gone before the network was
        // joined, seen once in a few loaded runs) is made again, once. On a sandbox's
        // first start, with a port found free anew: another process may have taken the
        // first between Sandgate finding it free and pasta binding it (a fresh-clone CI
        // run saw it). A sandbox that ran before keeps its port, which its URL names.
        let first = !self.sandboxes().contains_key(&sandbox.runtime_id);
        match self.start_once(sandbox, keys).await {
            Err(err) if err.0.contains(NAMESPACE_SETUP) => {
                tracing::warn!(runtime_id = %sandbox.runtime_id, error = %err, "a sandbox's namespace could not be set up; trying once more");
                if first {
                    self.sandboxes().remove(&sandbox.runtime_id);
                }
                self.start_once(sandbox, keys).await
            }
            result => result,
        }
    }

    async fn start_once(
        &self,
        sandbox: &StoredSandbox,
        keys: &SandboxKeys,
    ) -> Result<(), DriverError> {
        let id = &sandbox.runtime_id;
        self.stop(id).await;
        let port = self.port(id)?;
        // Its way to Sandgate, where it may get a network of its own: opened before its
        // process, which waits for its network, and kept only if it gets one.
        let door = match (&self.options.doors, &self.isolation.network) {
            (Some(doors), Some(_)) => Some(doors.opener.open().map_err(|err| {
                DriverError(format!(
                    "cannot start sandbox {id}: {NAMESPACE_SETUP}: cannot open its way to Sandgate: {err}"
                ))
            })?),
            _ => None,
        };
        let (child, handshake) = self.spawn(sandbox, port, keys)?;
        let door = door.filter(|_| handshake.is_some());
        let webhook_ports = network::loopback_ports(
            super::init::webhook_urls(&sandbox.spec.environment)
                .iter()
                .map(String::as_str),
        );
        let door_port = door.as_ref().map(|door| door.port);
        self.sandboxes().insert(
            id.clone(),
            Sandbox {
                port,
                process: Process::Running(child),
                webhook_ports: webhook_ports.clone(),
                unidentified: Some(keys.clone()),
                door,
            },
        );
        if let (Some(handshake), Some(plan)) = (
            handshake,
            self.network_plan(id, port, webhook_ports, door_port),
        ) {
            let attached = tokio::time::timeout(
                network::SETUP_TIMEOUT,
                tokio::task::spawn_blocking(move || plan.attach(handshake)),
            )
            .await;
            let failure = match attached {
                Ok(Ok(Ok(()))) => None,
                Ok(Ok(Err(err))) => Some(err),
                Ok(Err(err)) => Some(err.to_string()),
                Err(_) => Some("its network took too long to set up".to_owned()),
            };
            if let Some(failure) = failure {
                self.stop(id).await;
                return Err(DriverError(format!(
                    "cannot start sandbox {id}: {NAMESPACE_SETUP}: {failure}"
                )));
            }
        }
        Ok(())
    }

    /// How `runtime_id`'s network is made, where sandboxes get one of their own.
    /// `door`: the port of its door, which Sandgate's port inside leads to.
    fn network_plan(
        &self,
        runtime_id: &str,
        port: u16,
        webhook_ports: Vec<u16>,
        door: Option<u16>,
    ) -> Option<network::Plan> {
        let mut options = self.options.network.clone();
        if let (Some(doors), Some(door)) = (&self.options.doors, door) {
            options.forwards.push((doors.inside, door));
        }
        Some(network::Plan {
            tools: self.isolation.network.clone()?,
            options,
            runtime_id: runtime_id.to_owned(),
            port,
            webhook_ports,
            state: self.state_dir(runtime_id),
        })
    }

    /// Ends `runtime_id`'s network, if it has one.
    async fn detach(&self, runtime_id: &str) {
        if let Some(tools) = self.isolation.network.clone() {
            let (id, state) = (runtime_id.to_owned(), self.state_dir(runtime_id));
            let _ = tokio::task::spawn_blocking(move || network::detach(&tools, &id, &state)).await;
        }
    }

    /// Stops the sandbox's process, if it has one running, and waits for it to go.
    async fn stop(&self, runtime_id: &str) {
        let (process, door) = self
            .sandboxes()
            .get_mut(runtime_id)
            .map(|sandbox| {
                (
                    std::mem::replace(&mut sandbox.process, Process::Stopped),
                    sandbox.door.take(),
                )
            })
            .unzip();
        match process {
            Some(Process::Running(child)) => {
                terminate(child, self.options.stop_grace).await;
                let _ = std::fs::remove_file(self.state_dir(runtime_id).join(PID_FILE));
            }
            Some(Process::Exited { group, .. }) => {
                // Its first process is gone; what it started may not be.
                if let Some(group) = group {
                    let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
                }
            }
            Some(Process::Stopped) | None => return,
        }
        // Closed once its processes are gone (a server told to stop may post its last
        // update on the way): nothing comes in as this sandbox any longer.
        drop(door);
        self.detach(runtime_id).await;
    }
}

#[async_trait]
impl SandboxDriver for ProcessDriver {
    async fn create(&self, sandbox: &StoredSandbox, keys: &SandboxKeys) -> Result<(), DriverError> {
        self.start(sandbox, keys).await
    }

    async fn claiming(
        &self,
        sandbox: &StoredSandbox,
        spec: &sandgate_store::SandboxSpec,
    ) -> Result<(), DriverError> {
        let id = &sandbox.runtime_id;
        let wanted = network::loopback_ports(
            super::init::webhook_urls(&spec.environment)
                .iter()
                .map(String::as_str),
        );
        let (port, ports, door, stage) = {
            let sandboxes = self.sandboxes();
            let Some(known) = sandboxes.get(id) else {
                return Ok(());
            };
            // The first process of its namespaces: the child of the bwrap Sandgate holds.
            let stage = match &known.process {
                Process::Running(child) => child
                    .id()
                    .and_then(|pid| i32::try_from(pid).ok())
                    .and_then(super::process_isolation::sandbox_init),
                _ => None,
            };
            if wanted.iter().all(|port| known.webhook_ports.contains(port)) {
                return Ok(());
            }
            let mut ports = known.webhook_ports.clone();
            ports.extend(wanted);
            ports.sort_unstable();
            ports.dedup();
            (
                known.port,
                ports,
                known.door.as_ref().map(|door| door.port),
                stage,
            )
        };
        let Some(plan) = self.network_plan(id, port, ports.clone(), door) else {
            return Ok(());
        };
        // pasta forwards what it was started with: a new one, for the claim's webhooks.
        tokio::task::spawn_blocking(move || plan.reattach(stage))
            .await
            .map_err(|err| DriverError(err.to_string()))?
            .map_err(|err| DriverError(format!("cannot reach the claim's webhooks: {err}")))?;
        if let Some(known) = self.sandboxes().get_mut(id) {
            known.webhook_ports = ports;
        }
        Ok(())
    }

    async fn pause(&self, sandbox: &StoredSandbox) -> Result<(), DriverError> {
        self.stop(&sandbox.runtime_id).await;
        Ok(())
    }

    async fn resume(&self, sandbox: &StoredSandbox, keys: &SandboxKeys) -> Result<(), DriverError> {
        self.start(sandbox, keys).await
    }

    async fn delete(&self, runtime_id: &str) -> Result<(), DriverError> {
        self.stop(runtime_id).await;
        self.sandboxes().remove(runtime_id);
        // Neither removal follows a link the sandbox left in its folder.
        for dir in [self.dir(runtime_id), self.state_dir(runtime_id)] {
            match tokio::fs::remove_dir_all(&dir).await {
                Ok(()) => {}
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => {
                    return Err(DriverError(format!(
                        "cannot remove {}: {err}",
                        dir.display()
                    )));
                }
            }
        }
        Ok(())
    }

    async fn observe(
        &self,
        sandboxes: &[StoredSandbox],
    ) -> Result<HashMap<String, Observed>, DriverError> {
        let mut observed = HashMap::new();
        let mut probes = Vec::new();
        let networked = self.isolation.network.is_some();
        {
            let mut processes = self.sandboxes();
            for record in sandboxes {
                let id = &record.runtime_id;
                let process = processes.get_mut(id).map(|sandbox| {
                    // Its first process: while it runs, what says which processes are the
                    // sandbox's (`readiness.rs`).
                    let mut first = None;
                    if let Process::Running(child) = &mut sandbox.process {
                        // Its pid is its group's id; read before the wait reaps it.
                        let group = child.id().and_then(|pid| i32::try_from(pid).ok());
                        first = group;
                        if let Ok(Some(status)) = child.try_wait() {
                            first = None;
                            sandbox.process = Process::Exited {
                                detail: format!(
                                    "the sandbox's process exited ({status}); its output is in {}",
                                    self.state_dir(id).join(LOG_FILE).display()
                                ),
                                group,
                            };
                        }
                    }
                    (
                        &sandbox.process,
                        sandbox.port,
                        sandbox.probe(networked, first),
                        sandbox.door.as_ref().map(|door| door.peer.to_string()),
                    )
                });
                match process {
                    Some((Process::Running(_), port, probe, peer)) => {
                        probes.push((id.clone(), port, probe, peer));
                    }
                    Some((Process::Exited { detail, .. }, ..)) => {
                        observed.insert(id.clone(), error(detail.clone()));
                    }
                    // Started by an earlier run of Sandgate, whose processes are gone.
                    Some((Process::Stopped, ..)) | None
                        if record.changed_at_ms < self.started_ms =>
                    {
                        observed.insert(
                            id.clone(),
                            error(
                                "the sandbox's process ended when Sandgate restarted; resume it to start it again"
                                    .into(),
                            ),
                        );
                    }
                    // Being created or resumed right now: its stored state stands.
                    Some((Process::Stopped, ..)) | None => {}
                }
            }
        }
        let ready = futures::future::join_all(
            probes
                .iter()
                .map(|(_, port, probe, _)| probe.passes(&self.client, *port)),
        )
        .await;
        for ((id, _, probe, peer), ready) in probes.into_iter().zip(ready) {
            if let (true, Probe::Identify { keys, .. }) = (ready, &probe) {
                // Its own: unless its process was started again since, with other keys.
                if let Some(sandbox) = self.sandboxes().get_mut(&id)
                    && sandbox.unidentified.as_ref() == Some(keys)
                {
                    sandbox.unidentified = None;
                }
            }
            let state = if ready {
                SandboxState::Running
            } else {
                SandboxState::Starting
            };
            // Its calls are known by its door's address, as a pod's by its IP.
            let mut seen = Observed::new(state, None);
            seen.source_address = peer;
            observed.insert(id, seen);
        }
        Ok(observed)
    }

    async fn workloads(&self) -> Result<HashMap<String, i64>, DriverError> {
        let mut workloads = HashMap::new();
        let mut entries = tokio::fs::read_dir(&self.options.state)
            .await
            .map_err(|err| {
                DriverError(format!(
                    "cannot read {}: {err}",
                    self.options.state.display()
                ))
            })?;
        while let Ok(Some(entry)) = entries.next_entry().await {
            let Some(id) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            // Last started when its port was last recorded.
            let made = tokio::fs::metadata(entry.path().join(PORT_FILE))
                .await
                .and_then(|meta| meta.modified())
                .ok()
                .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(i64::MAX, |since| {
                    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
                });
            workloads.insert(id, made);
        }
        Ok(workloads)
    }

    fn url(&self, sandbox: &StoredSandbox) -> Option<String> {
        let port = self.sandboxes().get(&sandbox.runtime_id)?.port;
        Some(format!("http://127.0.0.1:{port}"))
    }

    fn init_url(&self, sandbox: &StoredSandbox) -> Option<String> {
        self.url(sandbox)
    }
}

fn error(detail: String) -> Observed {
    Observed::new(SandboxState::Error, Some(detail))
}

/// A port nobody listens on now.
fn free_port() -> Result<u16, DriverError> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|err| DriverError(format!("cannot find a free port for a sandbox: {err}")))
}

fn read_number<T: std::str::FromStr>(path: &Path) -> Option<T> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// How many times the view's probe runs before Sandgate starts without a view: a machine
/// under load may fail one (a fresh-clone CI run saw it once, its reason unlogged then).
const PROBE_ATTEMPTS: u32 = 3;

/// Whether a sandbox's view can be made on this machine (`host`: the uid a sandbox runs
/// as, when Sandgate is root): a shell run in one, in a folder made for the probe. A
/// failure is tried again, and the last one's reason logged.
pub(crate) fn probe_view(
    tools: &ViewTools,
    system: &[super::process_isolation::SystemDir],
    host: Option<super::process_isolation::Ids>,
) -> bool {
    let mut reason = String::new();
    for attempt in 1..=PROBE_ATTEMPTS {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        let probe =
            std::env::temp_dir().join(format!("sandgate-probe-{}-{nanos}", std::process::id()));
        let ran = run_probe(&probe, tools, system, host);
        let _ = std::fs::remove_dir_all(&probe);
        match ran {
            Ok(()) => return true,
            Err(why) => reason = why,
        }
        if attempt < PROBE_ATTEMPTS {
            std::thread::sleep(std::time::Duration::from_millis(100 * u64::from(attempt)));
        }
    }
    tracing::warn!(reason = %reason, attempts = PROBE_ATTEMPTS, "sandbox driver: process: a sandbox's view could not be made");
    false
}

/// The probe of [`probe_view`] in `probe`: why the shell did not run and exit 0.
fn run_probe(
    probe: &Path,
    tools: &ViewTools,
    system: &[super::process_isolation::SystemDir],
    host: Option<super::process_isolation::Ids>,
) -> Result<(), String> {
    use command_fds::CommandFdExt;
    std::fs::create_dir(probe).map_err(|err| format!("its folder: {err}"))?;
    let root = layout::open_root(probe).map_err(|err| format!("its folder: {err}"))?;
    layout::prepare_folder(&root, "probe", host).map_err(|err| format!("its folder: {err}"))?;
    let folder = probe.join("probe");
    let view = view::View {
        tools,
        system,
        host,
        inside: host,
        folder: &folder,
        cwd: Path::new("/workspace"),
        installs: &[],
        granted: &[],
        network: false,
        resolv_conf: None,
        resolv_at: Path::new("/etc/resolv.conf"),
    };
    let line = view.command_line(&tools.shell, &["-c".into(), "exit 0".into()]);
    let mapping = starting::args_fd(&view::environment_args([]))
        .map_err(|err| format!("its arguments: {err}"))?;
    let mut command = std::process::Command::new(&line[0]);
    command
        .args(&line[1..])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    command
        .fd_mappings(vec![mapping])
        .map_err(|err| format!("its arguments: {err}"))?;
    let output = command
        .output()
        .map_err(|err| format!("the view's command: {err}"))?;
    if output.status.success() {
        return Ok(());
    }
    // What it says (bubblewrap's reason): bounded, as a log line.
    let said = String::from_utf8_lossy(&output.stderr);
    let said: String = said.trim().chars().take(500).collect();
    Err(format!("the view's command {}: {said}", output.status))
}

/// Whether a sandbox could run `program` (its command's first word, or its image) with
/// `path` as its `PATH` on this machine: as any uid of the sandboxes' range when Sandgate
/// is root, else as Sandgate's own; for `check-config`, before any start.
pub fn check_program(
    program: &str,
    path: Option<&str>,
    granted: &[PathBuf],
    isolation: &super::process_isolation::Isolation,
) -> Result<(), Unreachable> {
    let path = path
        .map(str::to_owned)
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_default();
    let program = command_line::resolve(program, &path);
    if !program.is_absolute() {
        // Looked up on the PATH at the start: nothing to say of it here.
        return Ok(());
    }
    let ids = if isolation.root {
        let base = super::process_isolation::SANDBOX_UID_BASE;
        super::process_isolation::Ids {
            uid: base,
            gid: base,
        }
    } else {
        starting::own_ids()
    };
    check_reach(&program, ids, granted, true)
}
