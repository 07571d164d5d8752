//! The filesystem a `process` sandbox sees, and the command line that builds it with
//! bubblewrap (`bwrap`): the machine's system directories read-only, the installation
//! of the program it runs, a `/proc` of its own PID namespace, a `/dev` of its own, its
//! folder at its own path (so `HOME` and `TMPDIR` name the same place inside and out),
//! its `workspace/` at the top of its working directory (`/workspace`) and its `tmp/` at
//! `/tmp`; nothing else of this machine: not the data directory, its store or logs, not
//! another sandbox.
//!
//! When Sandgate is root, two bwraps:
//!
//! ```text
//! prlimit … -- bwrap --unshare-pid --as-pid-1                       (root: the stage)
//!     [--unshare-net --info-fd 4 --block-fd 5]          (its network: `network.rs`)
//!     <system dirs> --dir /run --dir /run/granted [--ro-bind {granted} /run/granted/N]
//!     --ro-bind / /run/host --bind {folder} /run/sandbox
//!     --proc /proc --dev /dev --tmpfs /tmp --
//!   setpriv --reuid U --regid G --clear-groups --inh-caps=-all --bounding-set=-all --
//!   bwrap --args 3 --unshare-user --uid X --gid Y                     (the sandbox's uid U)
//!     <the view, its sources under /run/host, /run/granted and /run/sandbox> --
//!   sh -c 'mkdir -p -- "$1" && cd -- "$1" && shift && exec "$@"' sh {cwd} program args…
//! ```
//!
//! The first, as root, only makes a mount and PID namespace where the sandbox's folder is
//! reachable at `/run/sandbox` (its data directory may sit in a parent no other uid can
//! enter, such as `/root`); it resolves no path the sandbox controls. Everything else is
//! resolved by the second, as the sandbox's own uid in a user namespace that maps the
//! uid its spec asks for (`run_as_user`) to it: a link the sandbox planted is followed
//! with that uid's rights only, inside its own view. The environment reaches only that
//! second bwrap, through descriptor 3 (`--args`), never a process of root's, and never a
//! command line that `ps` shows. Without root, the second alone, with the PID namespace,
//! its sources the machine's own paths; but where the sandbox gets a network of its own
//! (`network.rs`), a stage too, in a user namespace of its own that maps its root to
//! Sandgate's uid alone and owns the network namespace:
//!
//! ```text
//! bwrap --unshare-user --uid 0 --gid 0 --cap-add ALL --unshare-pid --as-pid-1
//!     --unshare-net --info-fd 4 --block-fd 5 <as root's stage> --
//!   bwrap --args 3 --unshare-user --uid X --gid Y <as above>
//! ```
//!
//! Sandgate's tools join the stage's namespaces as their root to set the network up; the
//! second bwrap makes the sandbox's own user namespace inside, where it holds no
//! capability over the stage's (nor is its uid there: X maps to the stage's root, whose
//! capabilities bwrap drops for the sandbox).
//!
//! The process Sandgate holds is the first bwrap, which waits for the namespace's first
//! process: killing its process group (which a stop does past the grace period) ends the
//! namespace. Neither bwrap dies with Sandgate (`--die-with-parent`): a Sandgate killed
//! without a chance to stop its sandboxes leaves them running, for the next run to end
//! by the pid it recorded, as with any process.

use std::path::{Path, PathBuf};

use super::network::{BLOCK_FD, INFO_FD};
use crate::sandboxes::process_isolation::{Ids, SystemDir};

/// Where the stage shows the machine's root and the sandbox's folder.
const HOST: &str = "/run/host";
const SANDBOX: &str = "/run/sandbox";
/// Where the stage shows the directories the operator grants every sandbox.
const GRANTED: &str = "/run/granted";
/// Where the stage shows the sandbox's own `/etc/resolv.conf`.
const RESOLV_CONF: &str = "/run/resolv.conf";
/// Without root, the stage's own user namespace: its root Sandgate's uid alone, with the
/// capabilities the second bwrap needs to make the sandbox's inside it (`network.rs`).
pub(crate) const ROOTLESS_STAGE: &[&str] = &[
    "--unshare-user",
    "--uid",
    "0",
    "--gid",
    "0",
    "--cap-add",
    "ALL",
];
/// The descriptor that carries the second bwrap's environment (`--args`).
pub(super) const ARGS_FD: i32 = 3;
/// Makes the working directory inside the view, as the sandbox's uid, and runs the rest.
const SCRIPT: &str = r#"mkdir -p -- "$1" && cd -- "$1" && shift && exec "$@""#;

/// The programs that build the view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewTools {
    pub bwrap: PathBuf,
    /// Drops the stage's root to the sandbox's uid (when Sandgate is root).
    pub setpriv: PathBuf,
    pub shell: PathBuf,
}

/// One sandbox's view.
#[derive(Debug)]
pub(super) struct View<'a> {
    pub tools: &'a ViewTools,
    pub system: &'a [SystemDir],
    /// Its uid on this machine, when Sandgate is root (the two-stage chain).
    pub host: Option<Ids>,
    /// The uid and gid it sees itself as.
    pub inside: Option<Ids>,
    /// Its folder, `{root}/{runtime_id}`.
    pub folder: &'a Path,
    /// Its working directory: absolute, plain components only, at least one.
    pub cwd: &'a Path,
    /// Installations it runs from (read-only), outside the system directories.
    pub installs: &'a [PathBuf],
    /// Directories the operator grants every sandbox (read-only), bound by the stage.
    pub granted: &'a [PathBuf],
    /// A network namespace of its own, made by the stage (`network.rs`): the stage's
    /// bwrap then writes its pid and waits for the namespace's setup.
    pub network: bool,
    /// What it sees at `/etc/resolv.conf` in place of this machine's (a file the stage
    /// binds at [`RESOLV_CONF`]): its names are asked of pasta (`network.rs`).
    pub resolv_conf: Option<&'a Path>,
    /// Where `/etc/resolv.conf` leads on this machine (`network::resolv_conf_path`): the
    /// file itself, or, where it is a link (systemd-resolved's, resolvconf's), the file
    /// the link ends at, which the sandbox's `/etc` (this machine's) leads to as well.
    pub resolv_at: &'a Path,
}

impl View<'_> {
    /// `program args` in the view: the command line to run (its program first).
    pub fn command_line(&self, program: &Path, args: &[String]) -> Vec<String> {
        let mut line = Vec::new();
        // Without root, a network of its own needs a stage too (below).
        let staged = self.host.is_some() || self.network;
        let (host, sandbox) = if staged {
            (HOST.to_owned(), SANDBOX.to_owned())
        } else {
            (String::new(), self.folder.display().to_string())
        };
        if staged {
            line.push(self.tools.bwrap.display().to_string());
            if self.host.is_none() {
                // Without root: the stage's user namespace maps its root to Sandgate's uid
                // alone, and owns the network namespace, which Sandgate's tools then join as
                // that root (`network.rs`); its capabilities are kept for the second bwrap,
                // which makes the sandbox's own user namespace inside it. The sandbox holds
                // none of them: its uid is mapped in that second namespace only.
                line.extend(strings(ROOTLESS_STAGE));
            }
            line.extend(strings(&["--unshare-pid", "--as-pid-1"]));
            if self.network {
                line.extend(strings(&[
                    "--unshare-net",
                    "--info-fd",
                    &INFO_FD.to_string(),
                    "--block-fd",
                    &BLOCK_FD.to_string(),
                ]));
            }
            self.system_dirs(&mut line, "");
            line.extend(strings(&[
                "--perms", "0711", "--dir", "/run", "--perms", "0711", "--dir", GRANTED,
            ]));
            for (index, dir) in self.granted.iter().enumerate() {
                line.extend(strings(&[
                    "--ro-bind",
                    &dir.display().to_string(),
                    &format!("{GRANTED}/{index}"),
                ]));
            }
            if let Some(conf) = self.resolv_conf {
                line.extend(strings(&[
                    "--ro-bind",
                    &conf.display().to_string(),
                    RESOLV_CONF,
                ]));
            }
            line.extend(strings(&["--ro-bind", "/", HOST, "--bind"]));
            line.push(self.folder.display().to_string());
            line.extend(strings(&[
                SANDBOX, "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp",
                "--",
            ]));
            if let Some(ids) = self.host {
                line.extend(strings(&[
                    &self.tools.setpriv.display().to_string(),
                    &format!("--reuid={}", ids.uid),
                    &format!("--regid={}", ids.gid),
                    "--clear-groups",
                    "--inh-caps=-all",
                    "--bounding-set=-all",
                    "--",
                ]));
            }
        }
        line.push(self.tools.bwrap.display().to_string());
        line.extend(strings(&["--args", &ARGS_FD.to_string(), "--unshare-user"]));
        // Under the stage without root, the second bwrap is the stage's root: without a
        // uid asked for, the sandbox is Sandgate's uid, as without a stage.
        let inside = self
            .inside
            .or_else(|| (staged && self.host.is_none()).then(super::starting::own_ids));
        if let Some(inside) = inside {
            line.extend(strings(&[
                "--uid",
                &inside.uid.to_string(),
                "--gid",
                &inside.gid.to_string(),
            ]));
        }
        if !staged {
            // Its first process is the namespace's first, as in the stage: when it exits,
            // the kernel ends the rest.
            line.extend(strings(&["--unshare-pid", "--as-pid-1"]));
        }
        self.system_dirs(&mut line, &host);
        for install in self.installs {
            let source = format!("{host}{}", install.display());
            line.extend(strings(&[
                "--ro-bind",
                &source,
                &install.display().to_string(),
            ]));
        }
        for (index, dir) in self.granted.iter().enumerate() {
            let source = if staged {
                format!("{GRANTED}/{index}")
            } else {
                dir.display().to_string()
            };
            line.extend(strings(&["--ro-bind", &source, &dir.display().to_string()]));
        }
        if let (true, Some(_)) = (staged, self.resolv_conf) {
            // Bound where the link leads (a bind onto a link follows it, and bwrap cannot
            // make a file under a directory the view lacks): the directories on the way
            // are made, readable by the sandbox's user.
            // (A directory there already is left as it is.)
            let mut dirs: Vec<&Path> = self.resolv_at.ancestors().skip(1).collect();
            dirs.reverse();
            for dir in dirs.into_iter().filter(|dir| dir.parent().is_some()) {
                line.extend(strings(&["--perms", "0755", "--dir"]));
                line.push(dir.display().to_string());
            }
            line.extend(strings(&[
                "--ro-bind",
                RESOLV_CONF,
                &self.resolv_at.display().to_string(),
            ]));
        }
        if staged {
            // The stage's own PID namespace; only root could mount a new proc for it.
            line.extend(strings(&["--bind", "/proc", "/proc"]));
        } else {
            line.extend(strings(&["--proc", "/proc"]));
        }
        line.extend(strings(&["--dev", "/dev"]));
        let top = top_of(self.cwd);
        // Its workspace first: what nests under the same top then lands inside it.
        line.extend(strings(&["--bind", &format!("{sandbox}/workspace"), &top]));
        if top != "/tmp" {
            line.extend(strings(&["--bind", &format!("{sandbox}/tmp"), "/tmp"]));
        }
        line.extend(strings(&[
            "--bind",
            &sandbox,
            &self.folder.display().to_string(),
            "--",
            &self.tools.shell.display().to_string(),
            "-c",
            SCRIPT,
            "sh",
            &self.cwd.display().to_string(),
            &program.display().to_string(),
        ]));
        line.extend(args.iter().cloned());
        line
    }

    fn system_dirs(&self, line: &mut Vec<String>, host: &str) {
        for dir in self.system {
            match dir {
                SystemDir::Link { path, target } => line.extend(strings(&[
                    "--symlink",
                    &target.display().to_string(),
                    &path.display().to_string(),
                ])),
                SystemDir::Dir(path) => line.extend(strings(&[
                    "--ro-bind",
                    &format!("{host}{}", path.display()),
                    &path.display().to_string(),
                ])),
            }
        }
    }
}

fn strings(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|part| (*part).to_owned()).collect()
}

/// `/workspace` for `/workspace/a/b`.
pub(super) fn top_of(cwd: &Path) -> String {
    cwd.components()
        .find_map(|component| match component {
            std::path::Component::Normal(name) => Some(format!("/{}", name.to_string_lossy())),
            _ => None,
        })
        .unwrap_or_else(|| "/workspace".to_owned())
}

/// The arguments descriptor 3 carries: the environment, after `--clearenv`, as
/// NUL-separated `--setenv NAME VALUE` triples. A name or value with a NUL byte cannot be
/// an environment variable and is left out.
pub(super) fn environment_args<'a>(
    environment: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<u8> {
    let mut bytes = b"--clearenv\0".to_vec();
    for (name, value) in environment {
        if name.contains('\0') || value.contains('\0') || name.is_empty() || name.contains('=') {
            continue;
        }
        for part in ["--setenv", name, value] {
            bytes.extend_from_slice(part.as_bytes());
            bytes.push(0);
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> ViewTools {
        ViewTools {
            bwrap: "/usr/bin/bwrap".into(),
            setpriv: "/usr/bin/setpriv".into(),
            shell: "/bin/sh".into(),
        }
    }

    fn position(line: &[String], window: &[&str]) -> usize {
        line.windows(window.len())
            .position(|found| found.iter().zip(window).all(|(a, b)| a == b))
            .unwrap_or_else(|| panic!("{window:?} in {line:?}"))
    }

    #[test]
    fn as_root_the_stage_drops_to_the_sandbox_s_uid_before_anything_it_controls_is_resolved() {
        let tools = tools();
        let system = [
            SystemDir::Dir("/usr".into()),
            SystemDir::Link {
                path: "/bin".into(),
                target: "usr/bin".into(),
            },
        ];
        let installs = [PathBuf::from("/opt/agent/.venv")];
        let view = View {
            tools: &tools,
            system: &system,
            host: Some(Ids {
                uid: 200_123,
                gid: 200_123,
            }),
            inside: Some(Ids {
                uid: 10001,
                gid: 10002,
            }),
            folder: Path::new("/root/data/sandboxes/abc"),
            cwd: Path::new("/workspace/a/b"),
            installs: &installs,
            granted: &[PathBuf::from("/root/.pyenv/versions/3.12.1")],
            network: true,
            resolv_conf: Some(Path::new("/root/data/sandbox-state/abc/resolv.conf")),
            resolv_at: Path::new("/etc/resolv.conf"),
        };
        let line = view.command_line(Path::new("/opt/agent/.venv/bin/python"), &["-m".into()]);
        assert_eq!(line[0], "/usr/bin/bwrap");
        let setpriv = position(
            &line,
            &["/usr/bin/setpriv", "--reuid=200123", "--regid=200123"],
        );
        let second = position(&line, &["/usr/bin/bwrap", "--args", "3", "--unshare-user"]);
        assert!(setpriv < second);
        // The stage binds the machine's root and the folder, and nothing else of the data
        // directory.
        let stage = &line[..setpriv];
        assert!(
            position(
                stage,
                &["--bind", "/root/data/sandboxes/abc", "/run/sandbox"]
            ) > 0
        );
        assert_eq!(
            stage
                .iter()
                .filter(|arg| arg.contains("/root/data") && !arg.contains("sandbox-state"))
                .count(),
            1,
            "{stage:?}"
        );
        // Its resolv.conf, Sandgate's file, shown by the stage and bound over the machine's.
        position(
            stage,
            &[
                "--ro-bind",
                "/root/data/sandbox-state/abc/resolv.conf",
                "/run/resolv.conf",
            ],
        );
        // The sandbox's uid resolves everything it controls, from /run/sandbox.
        // The stage makes the network namespace: root's, which the sandbox cannot change.
        position(
            stage,
            &["--unshare-net", "--info-fd", "4", "--block-fd", "5"],
        );
        let view = &line[second..];
        assert!(!view.iter().any(|arg| arg == "--unshare-net"));
        position(view, &["--uid", "10001", "--gid", "10002"]);
        position(view, &["--ro-bind", "/run/host/usr", "/usr"]);
        position(view, &["--symlink", "usr/bin", "/bin"]);
        assert!(
            position(view, &["--ro-bind", "/run/resolv.conf", "/etc/resolv.conf"])
                > position(view, &["--ro-bind", "/run/host/usr", "/usr"]),
            "bound over the system directories"
        );
        position(
            view,
            &["--ro-bind", "/run/host/opt/agent/.venv", "/opt/agent/.venv"],
        );
        // A granted directory: bound by the stage, where the uid need not reach it.
        position(
            stage,
            &[
                "--ro-bind",
                "/root/.pyenv/versions/3.12.1",
                "/run/granted/0",
            ],
        );
        position(
            view,
            &[
                "--ro-bind",
                "/run/granted/0",
                "/root/.pyenv/versions/3.12.1",
            ],
        );
        position(view, &["--bind", "/run/sandbox/workspace", "/workspace"]);
        position(view, &["--bind", "/run/sandbox/tmp", "/tmp"]);
        position(
            view,
            &["--bind", "/run/sandbox", "/root/data/sandboxes/abc"],
        );
        let script = position(view, &["-c", SCRIPT, "sh", "/workspace/a/b"]);
        assert_eq!(view[script + 4..], ["/opt/agent/.venv/bin/python", "-m"]);
        assert!(!line.iter().any(|arg| arg.contains("SESSION_API_KEY")));
    }

    #[test]
    fn without_root_one_bwrap_makes_the_pid_namespace_from_the_machine_s_paths() {
        let tools = tools();
        let view = View {
            tools: &tools,
            system: &[SystemDir::Dir("/usr".into())],
            host: None,
            inside: None,
            folder: Path::new("/home/sg/data/sandboxes/abc"),
            cwd: Path::new("/tmp/work"),
            installs: &[],
            granted: &[],
            network: false,
            resolv_conf: None,
            resolv_at: Path::new("/etc/resolv.conf"),
        };
        let line = view.command_line(Path::new("/bin/true"), &[]);
        assert!(
            !line
                .iter()
                .any(|arg| arg.contains("setpriv") || arg == "--uid")
        );
        position(&line, &["--unshare-user", "--unshare-pid"]);
        position(&line, &["--ro-bind", "/usr", "/usr"]);
        position(&line, &["--proc", "/proc"]);
        position(
            &line,
            &["--bind", "/home/sg/data/sandboxes/abc/workspace", "/tmp"],
        );
        // A workspace at /tmp is the sandbox's /tmp.
        assert!(
            !line
                .iter()
                .any(|arg| arg == "/home/sg/data/sandboxes/abc/tmp")
        );
    }

    /// Without root, a network of its own: a stage in a user namespace of its own, where
    /// Sandgate's uid is root with every capability (so that its tools may configure the
    /// namespace's network, `network.rs`), which makes the network namespace and does not
    /// drop to another uid; the second bwrap makes the sandbox's own user namespace, where
    /// it is Sandgate's uid without a `run_as_user`.
    #[test]
    fn without_root_a_network_of_its_own_has_a_stage_of_its_own_user_namespace() {
        let tools = tools();
        let view = View {
            tools: &tools,
            system: &[SystemDir::Dir("/usr".into())],
            host: None,
            inside: None,
            folder: Path::new("/home/sg/data/sandboxes/abc"),
            cwd: Path::new("/workspace"),
            installs: &[],
            granted: &[],
            network: true,
            resolv_conf: Some(Path::new("/home/sg/data/sandbox-state/abc/resolv.conf")),
            resolv_at: Path::new("/etc/resolv.conf"),
        };
        let line = view.command_line(Path::new("/bin/true"), &[]);
        let second = position(&line, &["/usr/bin/bwrap", "--args", "3", "--unshare-user"]);
        let (stage, inner) = line.split_at(second);
        position(
            stage,
            &[
                "/usr/bin/bwrap",
                "--unshare-user",
                "--uid",
                "0",
                "--gid",
                "0",
                "--cap-add",
                "ALL",
                "--unshare-pid",
                "--as-pid-1",
                "--unshare-net",
                "--info-fd",
                "4",
                "--block-fd",
                "5",
            ],
        );
        assert!(!line.iter().any(|arg| arg.contains("setpriv")));
        let own = super::super::starting::own_ids();
        position(
            inner,
            &["--uid", &own.uid.to_string(), "--gid", &own.gid.to_string()],
        );
        assert!(
            !inner
                .iter()
                .any(|arg| arg == "--unshare-net" || arg == "--cap-add")
        );
        position(
            inner,
            &["--ro-bind", "/run/resolv.conf", "/etc/resolv.conf"],
        );
        position(inner, &["--bind", "/proc", "/proc"]);
    }

    /// Where this machine's `/etc/resolv.conf` is a link (systemd-resolved's, to
    /// `/run/systemd/resolve/stub-resolv.conf`), the sandbox's is bound where the link
    /// leads, with the directories on the way made readable: bwrap cannot bind onto a
    /// link whose target the view lacks (`Can't create file at /etc/resolv.conf`).
    #[test]
    fn a_linked_resolv_conf_is_bound_where_its_link_leads() {
        let tools = tools();
        let view = View {
            tools: &tools,
            system: &[SystemDir::Dir("/etc".into())],
            host: Some(Ids {
                uid: 200_123,
                gid: 200_123,
            }),
            inside: None,
            folder: Path::new("/root/data/sandboxes/abc"),
            cwd: Path::new("/workspace"),
            installs: &[],
            granted: &[],
            network: true,
            resolv_conf: Some(Path::new("/root/data/sandbox-state/abc/resolv.conf")),
            resolv_at: Path::new("/run/systemd/resolve/stub-resolv.conf"),
        };
        let line = view.command_line(Path::new("/bin/true"), &[]);
        let second = position(&line, &["--args", "3", "--unshare-user"]);
        let inner = &line[second..];
        let etc = position(inner, &["--ro-bind", "/run/host/etc", "/etc"]);
        let dirs = position(
            inner,
            &[
                "--perms",
                "0755",
                "--dir",
                "/run",
                "--perms",
                "0755",
                "--dir",
                "/run/systemd",
                "--perms",
                "0755",
                "--dir",
                "/run/systemd/resolve",
                "--ro-bind",
                "/run/resolv.conf",
                "/run/systemd/resolve/stub-resolv.conf",
            ],
        );
        assert!(etc < dirs, "after the machine's /etc");
        assert!(!inner.iter().any(|arg| arg == "/etc/resolv.conf"));
    }

    #[test]
    fn the_environment_travels_as_setenv_arguments_on_the_descriptor() {
        let bytes = environment_args([("A", "1 2"), ("BAD=", "x"), ("K", "v\0w"), ("B", "")]);
        assert_eq!(
            bytes,
            b"--clearenv\0--setenv\0A\x001 2\0--setenv\0B\0\0".to_vec()
        );
    }
}
