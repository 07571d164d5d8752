//! How the `process` driver keeps a sandbox from Sandgate and from other sandboxes, with
//! what this machine allows, said once at start and by `check-config`:
//!
//! - Its own PID namespace (`unshare --user --pid --fork --mount-proc --kill-child`): the
//!   sandbox's `/proc` holds its own processes only, so it reads neither Sandgate's
//!   environment nor another sandbox's; and when its first process exits or is killed,
//!   the kernel kills every process of the namespace, `setsid`, double forks and tmux
//!   servers included. `--kill-child` ends the namespace when the `unshare` process that
//!   Sandgate holds is killed, which is how a stop, a pause and a shutdown end it.
//! - When Sandgate runs as root: its own unprivileged uid (the spec's `run_as_user`, else
//!   one derived from its runtime id in `SANDBOX_UID_BASE..`), owning its directories.
//! - rlimits by `prlimit`: address space, and processes when the uid is its own (the
//!   count is per uid), scaled by `resource_factor`.
//!
//! Per-sandbox cgroups are not made: where cgroups are v1 (as on the machines Sandgate is
//! tested on) a root process could make them, but a process moved in after its spawn may
//! have forked already; memory is bounded by `RLIMIT_AS` instead.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sha2::{Digest, Sha256};

/// First uid of the range sandboxes get when Sandgate runs as root and their spec names
/// none: far above the uids of a machine's real users and services.
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
/// The namespace flags: a user namespace lets an unprivileged uid make the PID one.
const UNSHARE_ARGS: &[&str] = &[
    "--user",
    "--map-current-user",
    "--pid",
    "--fork",
    "--mount-proc",
    "--kill-child",
    "--",
];

/// What this machine lets the driver do.
#[derive(Clone, Debug)]
pub struct Isolation {
    /// Sandgate runs as root: sandboxes get uids of their own.
    pub root: bool,
    /// `unshare` of a user and PID namespace works here (for a sandbox's uid).
    pub unshare: Option<PathBuf>,
    pub prlimit: Option<PathBuf>,
    /// What binds a sandbox's working directory at the path its spec names
    /// (`process/mounts.rs`): found when Sandgate is root (it makes the mount point) and
    /// a sandbox's uid can make a user and mount namespace.
    pub mounts: Option<MountTools>,
}

/// The programs that bind a sandbox's working directory, found on this machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountTools {
    pub unshare: PathBuf,
    pub shell: PathBuf,
    pub mount: PathBuf,
}

/// The uid and gid a sandbox runs as, when Sandgate can choose them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
}

impl Isolation {
    /// Probes this machine: whether Sandgate is root, and whether a namespace can be made
    /// by the uid sandboxes run as.
    pub fn detect() -> Self {
        let root = rustix::process::geteuid().is_root();
        let unshare = find_program("unshare").filter(|unshare| {
            let mut probe = std::process::Command::new(unshare);
            probe
                .args(UNSHARE_ARGS)
                .arg("true")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            if root {
                use std::os::unix::process::CommandExt;
                probe.uid(SANDBOX_UID_BASE).gid(SANDBOX_UID_BASE);
            }
            probe.status().is_ok_and(|status| status.success())
        });
        let mounts = root.then(mount_tools).flatten();
        Self {
            root,
            unshare,
            prlimit: find_program("prlimit"),
            mounts,
        }
    }

    /// No isolation at all, for a driver that only lists its workloads.
    pub fn none() -> Self {
        Self {
            root: false,
            unshare: None,
            prlimit: None,
            mounts: None,
        }
    }

    /// What sandboxes lack on this machine, one sentence each; empty when nothing.
    pub fn gaps(&self) -> Vec<String> {
        let mut gaps = vec![
            "no per-sandbox cgroup: memory is bounded by RLIMIT_AS, not by a cgroup".to_owned(),
        ];
        if !self.root {
            gaps.push(
                "Sandgate does not run as root: sandboxes run as its own user, so run_as_user \
                 is ignored and they can read each other's files"
                    .to_owned(),
            );
        }
        if self.unshare.is_none() {
            gaps.push(
                "no user and PID namespaces (unshare --user --pid): a sandbox sees every \
                 process of this machine in /proc, and a process it detaches (setsid) can \
                 outlive it"
                    .to_owned(),
            );
        }
        if self.mounts.is_none() {
            gaps.push(
                "no mount namespace of a sandbox's own (Sandgate is not root, a sandbox's uid \
                 cannot make a user and mount namespace and bind in it, or sh or mount is \
                 missing): a sandbox works in its own directory, not at the absolute path \
                 its spec names (/workspace)"
                    .to_owned(),
            );
        }
        if self.prlimit.is_none() {
            gaps.push("no prlimit: sandboxes run without rlimits".to_owned());
        }
        gaps
    }

    /// The uid and gid of a sandbox with this spec: none when Sandgate is not root (it
    /// cannot change its uid). A `run_as_user` of 0 is not honoured: root in a sandbox
    /// would read Sandgate's files.
    pub fn identity(
        &self,
        runtime_id: &str,
        run_as_user: Option<i64>,
        run_as_group: Option<i64>,
    ) -> Option<Identity> {
        if !self.root {
            return None;
        }
        let positive = |id: Option<i64>| {
            id.and_then(|id| u32::try_from(id).ok())
                .filter(|id| *id > 0)
        };
        let uid = positive(run_as_user).unwrap_or_else(|| derived_uid(runtime_id));
        let gid = positive(run_as_group).unwrap_or(uid);
        Some(Identity { uid, gid })
    }

    /// The command line running `program args` isolated: prlimit's, unshare's, then the
    /// sandbox's. `own_uid`: the sandbox's uid is its alone, so a process limit holds.
    /// `nested`: it runs as root of a user namespace of the sandbox's (the mount's), so
    /// its own maps `nested`'s uid and gid back rather than its current ones.
    pub fn command_line(
        &self,
        program: &Path,
        args: &[String],
        factor: Option<f64>,
        own_uid: bool,
        nested: Option<Identity>,
    ) -> (PathBuf, Vec<String>) {
        let mut line: Vec<String> = Vec::new();
        let factor = factor
            .filter(|factor| factor.is_finite() && *factor > 0.0)
            .unwrap_or(1.0);
        if let Some(prlimit) = &self.prlimit {
            line.push(prlimit.display().to_string());
            line.push(format!(
                "--as={}",
                (ADDRESS_SPACE_BYTES * factor).round() as u64
            ));
            if own_uid {
                line.push(format!("--nproc={}", (PROCESSES * factor).round() as u64));
            }
            line.push("--".to_owned());
        }
        if let Some(unshare) = &self.unshare {
            line.push(unshare.display().to_string());
            for arg in UNSHARE_ARGS {
                match (*arg, nested) {
                    ("--map-current-user", Some(identity)) => {
                        line.push(format!("--map-user={}", identity.uid));
                        line.push(format!("--map-group={}", identity.gid));
                    }
                    _ => line.push((*arg).to_owned()),
                }
            }
        }
        line.push(program.display().to_string());
        line.extend(args.iter().cloned());
        let program = PathBuf::from(line.remove(0));
        (program, line)
    }
}

/// The mount tools, when a sandbox's uid can make a user and mount namespace here and
/// bind in it (Sandgate is root, which makes the mount points).
fn mount_tools() -> Option<MountTools> {
    use std::os::unix::process::CommandExt;
    let tools = MountTools {
        unshare: find_program("unshare")?,
        shell: find_program("sh")?,
        mount: find_program("mount")?,
    };
    // A bind of the temporary directory on itself, in the probe's namespace only.
    let probe = std::env::temp_dir();
    let made = std::process::Command::new(&tools.unshare)
        .args([
            "--user",
            "--map-root-user",
            "--mount",
            "--propagation",
            "private",
            "--",
        ])
        .arg(&tools.mount)
        .args(["--bind", "--"])
        .args([&probe, &probe])
        .uid(SANDBOX_UID_BASE)
        .gid(SANDBOX_UID_BASE)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    made.then_some(tools)
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

/// The PID namespace `pid` made for its children (`unshare`'s), if it made one.
fn child_namespace(pid: i32) -> Option<PathBuf> {
    let namespace = std::fs::read_link(format!("/proc/{pid}/ns/pid_for_children")).ok()?;
    let own = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?;
    (namespace != own).then_some(namespace)
}

/// The processes (host pids) of the PID namespace `unshare` (`pid`) made; `None`: it
/// made none.
fn namespace_members(pid: i32) -> Option<Vec<i32>> {
    let namespace = child_namespace(pid)?;
    let entries = std::fs::read_dir("/proc").ok()?;
    Some(
        entries
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
            .filter(|other| {
                std::fs::read_link(format!("/proc/{other}/ns/pid")).is_ok_and(|ns| ns == namespace)
            })
            .collect(),
    )
}

/// Sends `signal` to every process of the PID namespace `unshare` (`pid`) made, not to
/// `unshare` itself (which, signalled, would exit and so SIGKILL the namespace at once).
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

/// Whether what is left of the namespace `unshare` (`pid`) made is its init alone, with
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
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; the fields after it do not.
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(19)?.parse().ok()
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
    fn a_sandbox_gets_its_spec_s_uid_or_one_of_its_own_but_never_root() {
        let isolation = Isolation {
            root: true,
            unshare: None,
            prlimit: None,
            mounts: None,
        };
        let own = isolation.identity("abc", None, None).expect("root chooses");
        assert!(own.uid >= SANDBOX_UID_BASE && own.gid == own.uid);
        assert_eq!(isolation.identity("abc", None, None), Some(own), "stable");
        assert_ne!(isolation.identity("abd", None, None), Some(own));
        assert_eq!(
            isolation.identity("abc", Some(10001), Some(10002)),
            Some(Identity {
                uid: 10001,
                gid: 10002
            })
        );
        assert_eq!(isolation.identity("abc", Some(0), Some(0)), Some(own));
        assert_eq!(Isolation::none().identity("abc", Some(10001), None), None);
    }

    #[test]
    fn the_command_runs_under_prlimit_and_unshare_scaled_by_the_factor() {
        let isolation = Isolation {
            root: true,
            unshare: Some("/usr/bin/unshare".into()),
            prlimit: Some("/usr/bin/prlimit".into()),
            mounts: None,
        };
        let (program, args) = isolation.command_line(
            Path::new("/bin/sh"),
            &["-c".into(), "x".into()],
            Some(2.0),
            true,
            None,
        );
        assert_eq!(program, Path::new("/usr/bin/prlimit"));
        assert_eq!(args[0], format!("--as={}", 32u64 << 30));
        assert_eq!(args[1], "--nproc=2048");
        assert_eq!(args[3], "/usr/bin/unshare");
        assert_eq!(args[args.len() - 3..], ["/bin/sh", "-c", "x"]);
        // Nested in the mount's user namespace, its own maps the sandbox's uid back.
        let nested = Identity {
            uid: 200_001,
            gid: 200_002,
        };
        let (_, args) = isolation.command_line(Path::new("/bin/sh"), &[], None, true, Some(nested));
        assert!(!args.contains(&"--map-current-user".to_owned()));
        assert!(args.contains(&"--map-user=200001".to_owned()));
        assert!(args.contains(&"--map-group=200002".to_owned()));
        let (program, args) =
            Isolation::none().command_line(Path::new("/bin/sh"), &[], None, false, None);
        assert_eq!((program.as_path(), args.len()), (Path::new("/bin/sh"), 0));
    }
}
