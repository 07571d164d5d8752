//! How the `process` driver keeps a sandbox from Sandgate, from other sandboxes and from
//! this machine, with what this machine allows, said once at start and by `check-config`:
//!
//! - Its own view of the filesystem, PID namespace and user namespace, made by bubblewrap
//!   (`process/view.rs`): the system directories read-only, its own folder, a `/proc`
//!   holding its own processes only; not the data directory, not another sandbox. When
//!   its first process exits or is killed, the kernel kills every process of the
//!   namespace, `setsid`, double forks and tmux servers included.
//! - When Sandgate runs as root: a uid of its own on this machine, one per sandbox
//!   (derived from its runtime id in `SANDBOX_UID_BASE..`), whatever its spec's
//!   `run_as_user`, which is the uid it sees itself as inside its user namespace: limits
//!   counted per uid (processes) and file ownership are per sandbox.
//! - A network namespace of its own, joined to this machine by pasta
//!   (`process/network.rs`): Sandgate's ports for sandboxes, the webhooks its start names
//!   and the internet, never this machine's loopback services, another sandbox or the
//!   metadata service. As root, or without root where pasta may open `/dev/net/tun` as
//!   Sandgate's user ([`network_tools`]).
//! - rlimits by `prlimit`: address space, and processes when the uid is its own (the
//!   count is per uid), scaled by `resource_factor`.
//!
//! Per-sandbox cgroups are not made: where cgroups are v1 (as on the machines Sandgate is
//! tested on) a root process could make them, but a process moved in after its spawn may
//! have forked already; memory is bounded by `RLIMIT_AS` instead.
//!
//! Where a sandbox would get no view or no network of its own, the driver does not start
//! unless `SANDBOX_ISOLATION` is best effort ([`Requirement`]): a machine missing
//! bubblewrap would otherwise hand every sandbox Sandgate's files, its store among them.

use std::path::{Path, PathBuf};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sha2::{Digest, Sha256};

pub use super::process::{Joining, NetworkTools, ViewTools};

/// First uid of the range sandboxes get when Sandgate runs as root: far above the uids
/// of a machine's real users and services.
pub const SANDBOX_UID_BASE: u32 = 200_000;
/// How many uids the range holds: two sandboxes share one with odds of 1 in this.
const SANDBOX_UID_COUNT: u32 = 800_000;
/// Address space of a sandbox at `resource_factor` 1: four times the memory limit a
/// Kubernetes sandbox gets (4 GiB), since Python and Node reserve far more address space
/// than they use; it stops a runaway allocation, not a heavy build.
const ADDRESS_SPACE_BYTES: f64 = 16.0 * 1024.0 * 1024.0 * 1024.0;
/// Processes (and threads) of a sandbox's uid at `resource_factor` 1: a fork bomb stops
/// here, a build with its compilers and test workers does not.
const PROCESSES: f64 = 1024.0;
/// The machine's directories every sandbox sees, read-only, when present: its programs,
/// their libraries and their configuration (`/etc`: resolver, certificates, users).
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];
/// Top directories of a sandbox's view that its working directory cannot be.
pub const RESERVED_TOPS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/proc",
    "/dev", "/run",
];

/// What this machine lets the driver do.
#[derive(Clone, Debug)]
pub struct Isolation {
    /// Sandgate runs as root: sandboxes get uids of their own.
    pub root: bool,
    /// bubblewrap, setpriv and sh, when a sandbox's view can be made here.
    pub view: Option<ViewTools>,
    pub prlimit: Option<PathBuf>,
    /// iproute2's `ip` and pasta (and without root, what else it needs:
    /// [`network_tools`]), when they are here: each sandbox gets a network of its own.
    pub network: Option<NetworkTools>,
    /// The system directories of this machine, as a view shows them.
    pub system: Vec<SystemDir>,
}

/// A system directory as a sandbox sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SystemDir {
    /// Bound read-only.
    Dir(PathBuf),
    /// A link, as on this machine (`/bin -> usr/bin`).
    Link { path: PathBuf, target: PathBuf },
}

/// A uid and a gid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ids {
    pub uid: u32,
    pub gid: u32,
}

/// Who a sandbox is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// On this machine: its own when Sandgate is root; `None`, Sandgate's.
    pub host: Option<Ids>,
    /// Inside its user namespace: its spec's `run_as_user` and `run_as_group`, else its
    /// uid on this machine.
    pub inside: Option<Ids>,
}

/// Whether the `process` driver starts on a machine that cannot give sandboxes a view and
/// a network of their own (`SANDBOX_ISOLATION`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Requirement {
    /// It refuses to start, saying what is missing: a sandbox runs code nobody read.
    #[default]
    Required,
    /// It starts, and says what sandboxes lack; for code the operator trusts.
    BestEffort,
}

impl std::str::FromStr for Requirement {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "required" => Ok(Self::Required),
            "best-effort" => Ok(Self::BestEffort),
            other => Err(format!(
                "{other:?} is neither \"required\" nor \"best-effort\""
            )),
        }
    }
}

impl Isolation {
    /// Probes this machine: whether Sandgate is root, and whether a sandbox's view can be
    /// made by the uid sandboxes run as.
    pub fn detect() -> Self {
        let root = rustix::process::geteuid().is_root();
        let system = system_dirs(Path::new("/"));
        let view = view_tools().filter(|tools| probe(tools, root, &system));
        let network = view.as_ref().and_then(|view| network_tools(view, root));
        Self {
            root,
            view,
            prlimit: find_program("prlimit"),
            network,
            system,
        }
    }

    /// No isolation at all, for a driver that only lists its workloads.
    pub fn none() -> Self {
        Self {
            root: false,
            view: None,
            prlimit: None,
            network: None,
            system: Vec::new(),
        }
    }

    /// What sandboxes lack on this machine, one sentence each; empty when nothing.
    pub fn gaps(&self) -> Vec<String> {
        let mut gaps = vec![
            "no per-sandbox cgroup: memory is bounded by RLIMIT_AS, not by a cgroup".to_owned(),
        ];
        if !self.root {
            gaps.push(
                "Sandgate does not run as root: sandboxes run as its own user (run_as_user is \
                 the uid they see inside), share its process limit, and only their view of \
                 the filesystem keeps them from its files"
                    .to_owned(),
            );
        }
        gaps.extend(self.view_gap().map(str::to_owned));
        gaps.extend(self.network_gap().map(str::to_owned));
        if self.prlimit.is_none() {
            gaps.push("no prlimit: sandboxes run without rlimits".to_owned());
        }
        gaps
    }

    /// Why sandboxes would not be kept from Sandgate and from each other here: without a
    /// view of their own they read Sandgate's files (its store among them) as its uid or
    /// theirs; without a network of their own they reach this machine's loopback services
    /// and each other's ports. `None` when they have both.
    pub fn shortfall(&self) -> Option<String> {
        let gaps: Vec<&str> = [self.view_gap(), self.network_gap()]
            .into_iter()
            .flatten()
            .collect();
        (!gaps.is_empty()).then(|| {
            format!(
                "this machine cannot keep process sandboxes from Sandgate and from each other: \
                 {}; install what is missing (Debian's bubblewrap, passt and iproute2), or \
                 set SANDBOX_ISOLATION=best-effort to run sandboxes without it, for code you \
                 trust",
                gaps.join("; ")
            )
        })
    }

    fn view_gap(&self) -> Option<&'static str> {
        self.view.is_none().then_some(
            "no view of its own (bubblewrap, setpriv or sh is missing, or a sandbox's uid \
             cannot make a user, mount and PID namespace here): a sandbox sees this machine's \
             files and processes as its uid, works in its own directory rather than at the \
             absolute path its spec names, and a process it detaches (setsid) can outlive it",
        )
    }

    fn network_gap(&self) -> Option<&'static str> {
        if self.network.is_some() {
            return None;
        }
        Some(if self.root {
            "no network of its own (pasta, from Debian's package passt, or iproute2's ip is \
             missing, or there is no view): sandboxes share this machine's network, its \
             loopback services and each other's ports"
        } else {
            "no network of its own (without root it needs pasta, from Debian's package passt, \
             iproute2's ip, util-linux's nsenter, /dev/net/tun open to Sandgate's user for \
             reading and writing (mode 0666, as Debian's udev makes it), and user namespaces \
             with capabilities inside them): sandboxes share this machine's network, its \
             loopback services and each other's ports"
        })
    }

    /// Who a sandbox with this spec is. A `run_as_user` of 0 is not honoured.
    pub fn identity(
        &self,
        runtime_id: &str,
        run_as_user: Option<i64>,
        run_as_group: Option<i64>,
    ) -> Identity {
        let positive = |id: Option<i64>| {
            id.and_then(|id| u32::try_from(id).ok())
                .filter(|id| *id > 0)
        };
        let host = self.root.then(|| {
            let uid = derived_uid(runtime_id);
            Ids { uid, gid: uid }
        });
        let inside = match positive(run_as_user) {
            Some(uid) => Some(Ids {
                uid,
                gid: positive(run_as_group).unwrap_or(uid),
            }),
            None => host,
        };
        Identity { host, inside }
    }

    /// The command line running `program args` under its rlimits: prlimit's, then the
    /// rest. `own_uid`: the sandbox's uid is its alone, so a process limit holds.
    pub fn limited(&self, line: Vec<String>, factor: Option<f64>, own_uid: bool) -> Vec<String> {
        let Some(prlimit) = &self.prlimit else {
            return line;
        };
        let factor = factor
            .filter(|factor| factor.is_finite() && *factor > 0.0)
            .unwrap_or(1.0);
        let mut limited = vec![
            prlimit.display().to_string(),
            format!("--as={}", (ADDRESS_SPACE_BYTES * factor).round() as u64),
        ];
        if own_uid {
            limited.push(format!("--nproc={}", (PROCESSES * factor).round() as u64));
        }
        limited.push("--".to_owned());
        limited.extend(line);
        limited
    }
}

/// The system directories under `root`, as a view shows them.
fn system_dirs(root: &Path) -> Vec<SystemDir> {
    SYSTEM_DIRS
        .iter()
        .filter_map(|dir| {
            let path = PathBuf::from(dir);
            let here = root.join(dir.trim_start_matches('/'));
            let meta = std::fs::symlink_metadata(&here).ok()?;
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&here).ok()?;
                Some(SystemDir::Link { path, target })
            } else {
                meta.is_dir().then_some(SystemDir::Dir(path))
            }
        })
        .collect()
}

/// The tools of a network of its own for every sandbox, where this machine has them: as
/// root, `ip` and pasta; without root, also `nsenter`, a `/dev/net/tun` Sandgate's user
/// may open (pasta opens it in the namespace as that user), and a stage that keeps its
/// capabilities in a user namespace of its own, with the sandbox's inside it (`view.rs`:
/// a setuid bwrap refuses `--cap-add` to a user, and some machines refuse nested user
/// namespaces).
fn network_tools(view: &ViewTools, root: bool) -> Option<NetworkTools> {
    let ip = find_program("ip")?;
    let pasta = find_program("pasta")?;
    let joining = if root {
        Joining::Root
    } else {
        let nsenter = find_program("nsenter")?;
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")
            .ok()?;
        let (bwrap, shell) = (
            view.bwrap.display().to_string(),
            view.shell.display().to_string(),
        );
        let staged = std::process::Command::new(&view.bwrap)
            .args(super::process::ROOTLESS_STAGE)
            .args(["--unshare-net", "--dev-bind", "/", "/", "--"])
            .args([&bwrap, "--unshare-user", "--uid", "1", "--gid", "1"])
            .args(["--ro-bind", "/", "/", "--", &shell, "-c", "exit 0"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?;
        if !staged.success() {
            return None;
        }
        Joining::Rootless { nsenter }
    };
    Some(NetworkTools { ip, pasta, joining })
}

fn view_tools() -> Option<ViewTools> {
    Some(ViewTools {
        bwrap: find_program("bwrap")?,
        setpriv: find_program("setpriv")?,
        shell: find_program("sh")?,
    })
}

/// Whether a view can be made here: `true` run in one, as a sandbox would be (as the
/// first uid of the sandboxes' range when Sandgate is root).
fn probe(tools: &ViewTools, root: bool, system: &[SystemDir]) -> bool {
    let host = root.then_some(Ids {
        uid: SANDBOX_UID_BASE,
        gid: SANDBOX_UID_BASE,
    });
    super::process::probe_view(tools, system, host)
}

/// A uid of the range for `runtime_id`: the same across Sandgate's restarts, with nothing
/// to allocate or record.
fn derived_uid(runtime_id: &str) -> u32 {
    let digest = Sha256::digest(runtime_id.as_bytes());
    let value = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    SANDBOX_UID_BASE + value % SANDBOX_UID_COUNT
}

fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/bin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// The PID namespace bubblewrap (`pid`, the process Sandgate holds) made for the
/// sandbox: that of its child, when the child's is not its own.
fn child_namespace(pid: i32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{}/ns/pid", sandbox_init(pid)?)).ok()
}

/// The children of `pid`: from `/proc/{pid}/task/{pid}/children` where the kernel has
/// it, else by the parent field of every process's `stat`.
fn children(pid: i32) -> Vec<i32> {
    if let Ok(listed) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
        return listed
            .split_whitespace()
            .filter_map(|child| child.parse().ok())
            .collect();
    }
    processes()
        .filter(|other| stat_field::<i32>(*other, PPID) == Some(pid))
        .collect()
}

/// Fields of `/proc/<pid>/stat`, counted after the command name: the parent, the process
/// group, the start time.
const PPID: usize = 1;
const PGRP: usize = 2;
const STARTTIME: usize = 19;

/// Every process of this machine (as this PID namespace sees them), by pid.
fn processes() -> impl Iterator<Item = i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
}

/// Field `index` of process `pid`'s `stat`, counted after its command name (which may
/// hold spaces; the fields after it do not).
fn stat_field<T: std::str::FromStr>(pid: i32, index: usize) -> Option<T> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(index)?
        .parse()
        .ok()
}

/// The processes (host pids) of the sandbox's PID namespace; `None`: bubblewrap (`pid`)
/// made none.
pub fn namespace_members(pid: i32) -> Option<Vec<i32>> {
    let namespace = child_namespace(pid)?;
    Some(
        processes()
            .filter(|other| {
                std::fs::read_link(format!("/proc/{other}/ns/pid")).is_ok_and(|ns| ns == namespace)
            })
            .collect(),
    )
}

/// The host pid of the first process of the sandbox's namespaces (the child of the
/// bubblewrap Sandgate holds), for what must join them after the start (the network).
pub fn sandbox_init(pid: i32) -> Option<i32> {
    let own = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?;
    children(pid).into_iter().find(|child| {
        std::fs::read_link(format!("/proc/{child}/ns/pid")).is_ok_and(|namespace| namespace != own)
    })
}

/// The processes of the sandbox's namespace that are not its command's own line (the
/// namespace's init and, where that is bubblewrap's monitor, its first child, which runs
/// the command): what the command started, detached or not. `None`: bubblewrap (`pid`)
/// made no namespace. Asked to end first, while the command keeps the namespace alive:
/// when the command exits, the kernel kills the rest at once.
pub fn detached_members(pid: i32) -> Option<Vec<i32>> {
    let members = namespace_members(pid)?;
    let init = sandbox_init(pid)?;
    let mut line = vec![init];
    let comm = std::fs::read_to_string(format!("/proc/{init}/comm")).unwrap_or_default();
    if comm.trim() == "bwrap" {
        // Orphans are the init's children too: the command is the oldest.
        if let Some(command) = children(init)
            .into_iter()
            .min_by_key(|child| (start_time(*child).unwrap_or(u64::MAX), *child))
        {
            line.push(command);
        }
    }
    Some(
        members
            .into_iter()
            .filter(|member| !line.contains(member))
            .collect(),
    )
}

/// The processes of process group `group` (a sandbox without a PID namespace of its own:
/// its first process leads its group).
pub fn group_members(group: i32) -> Vec<i32> {
    processes()
        .filter(|pid| stat_field::<i32>(*pid, PGRP) == Some(group))
        .collect()
}

/// Sends `signal` to every process of the sandbox's PID namespace, not to the bubblewrap
/// Sandgate holds (`pid`; which, signalled, would exit and so SIGKILL the namespace).
/// `false`: `pid` made no namespace.
pub fn signal_namespace(pid: i32, signal: Signal) -> bool {
    let Some(members) = namespace_members(pid) else {
        return false;
    };
    for member in members {
        let _ = kill(Pid::from_raw(member), signal);
    }
    true
}

/// Whether what is left of the sandbox's namespace (bubblewrap's, `pid`) is its init alone, with
/// no handler for SIGTERM. As a namespace's init it ignores a SIGTERM that would have
/// ended it anywhere else (a Python server's default), so a stop need not wait out the
/// grace period for it.
pub fn only_deaf_init(pid: i32) -> bool {
    let Some(members) = namespace_members(pid) else {
        return false;
    };
    let [init] = members.as_slice() else {
        return false;
    };
    let Ok(status) = std::fs::read_to_string(format!("/proc/{init}/status")) else {
        return false;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(str::trim)
            .map(str::to_owned)
    };
    let is_init = field("NSpid:").is_some_and(|pids| pids.ends_with("\t1") || pids.ends_with(" 1"));
    let caught = field("SigCgt:").and_then(|mask| u64::from_str_radix(&mask, 16).ok());
    // SIGTERM is signal 15: bit 14 of the mask.
    is_init && caught.is_some_and(|mask| mask & (1 << 14) == 0)
}

/// When process `pid` started (clock ticks since boot, field 22 of its `stat`): with its
/// pid, it names a process that no later one can be mistaken for.
pub fn start_time(pid: i32) -> Option<u64> {
    stat_field(pid, STARTTIME)
}

/// Marks Sandgate's own process undumpable, so that its `/proc/<pid>/environ` and memory
/// are root's: a sandbox running as Sandgate's uid (Sandgate not root, no namespaces)
/// still cannot read its secrets there.
pub fn protect_sandgate() {
    if let Err(err) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        tracing::warn!(error = %err, "cannot mark Sandgate undumpable: a sandbox of its uid may read its environment");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_gets_a_uid_of_its_own_and_sees_its_spec_s_inside() {
        let isolation = Isolation {
            root: true,
            ..Isolation::none()
        };
        let own = isolation.identity("abc", None, None);
        let host = own.host.expect("root chooses");
        assert!(host.uid >= SANDBOX_UID_BASE && host.gid == host.uid);
        assert_eq!(own.inside, Some(host));
        assert_eq!(isolation.identity("abc", None, None), own, "stable");
        // Two sandboxes asking the same run_as_user stay two uids on the machine.
        let first = isolation.identity("abc", Some(10001), Some(10002));
        let second = isolation.identity("abd", Some(10001), Some(10002));
        assert_eq!(
            first.inside,
            Some(Ids {
                uid: 10001,
                gid: 10002
            })
        );
        assert_eq!(first.inside, second.inside);
        assert_ne!(first.host, second.host);
        assert_eq!(
            isolation.identity("abc", Some(0), Some(0)),
            own,
            "never root"
        );
        let unprivileged = Isolation::none().identity("abc", Some(10001), None);
        assert_eq!(unprivileged.host, None);
        assert_eq!(
            unprivileged.inside,
            Some(Ids {
                uid: 10001,
                gid: 10001
            })
        );
    }

    #[test]
    fn the_command_runs_under_prlimit_scaled_by_the_factor() {
        let isolation = Isolation {
            prlimit: Some("/usr/bin/prlimit".into()),
            ..Isolation::none()
        };
        let line = isolation.limited(vec!["/bin/sh".into()], Some(2.0), true);
        assert_eq!(line[0], "/usr/bin/prlimit");
        assert_eq!(line[1], format!("--as={}", 32u64 << 30));
        assert_eq!(line[2], "--nproc=2048");
        assert_eq!(line[3..], ["--", "/bin/sh"]);
        let shared = isolation.limited(vec!["/bin/sh".into()], None, false);
        assert!(!shared.iter().any(|arg| arg.starts_with("--nproc")));
        assert_eq!(
            Isolation::none().limited(vec!["x".into()], None, true),
            ["x"]
        );
    }

    #[test]
    fn system_directories_are_bound_or_linked_as_on_the_machine() {
        let machine = tempfile::tempdir().expect("dir");
        std::fs::create_dir(machine.path().join("usr")).expect("mkdir");
        std::fs::create_dir(machine.path().join("etc")).expect("mkdir");
        std::os::unix::fs::symlink("usr/bin", machine.path().join("bin")).expect("link");
        assert_eq!(
            system_dirs(machine.path()),
            [
                SystemDir::Dir("/usr".into()),
                SystemDir::Link {
                    path: "/bin".into(),
                    target: "usr/bin".into()
                },
                SystemDir::Dir("/etc".into()),
            ]
        );
    }
}
