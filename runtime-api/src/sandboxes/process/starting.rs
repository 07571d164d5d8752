//! Starting a `process` sandbox: its folder (`layout.rs`), its port, pid and log in
//! Sandgate's own directory for it, the checks that its uid can reach what it runs, and
//! its command line (in its own view, `view.rs`) and environment (the spec's, Sandgate's
//! keys, and of Sandgate's own environment only what [`INHERITED_ENV`] names).

use std::io::{Seek, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use command_fds::{CommandFdExt, FdMapping};
use tokio::process::{Child, Command};

use super::command_line::{arguments, relative, resolve};
use super::layout::{self, check_reach};
use super::network::{self, Egress, Handshake};
use super::view::{ARGS_FD, View, environment_args, top_of};
use super::{LOG_FILE, PID_FILE, PORT_FILE, ProcessDriver};
use crate::sandboxes::driver::{DriverError, SECRET_KEY_ENV, SandboxKeys, is_foreign_session_key};
use crate::sandboxes::process_isolation::{Ids, RESERVED_TOPS, start_time};
use sandgate_store::StoredSandbox;

/// The environment variable that carries the session key, as in a Kubernetes sandbox.
const SESSION_KEY_ENV: &str = "SESSION_API_KEY";
/// The sandbox's `/etc/resolv.conf`, in its state directory, where it has names.
const RESOLV_CONF_FILE: &str = "resolv.conf";
/// Of Sandgate's own environment, what a sandbox's process inherits.
const INHERITED_ENV: &[&str] = &["PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ"];

impl ProcessDriver {
    /// Starts `sandbox`'s command on `port` with its keys; its process, and when it has a
    /// network namespace of its own, what sets it up (`network.rs`), which the process
    /// waits for.
    pub(super) fn spawn(
        &self,
        sandbox: &StoredSandbox,
        port: u16,
        keys: &SandboxKeys,
    ) -> Result<(Child, Option<Handshake>), DriverError> {
        let id = &sandbox.runtime_id;
        let failed = |what: &str, err: std::io::Error| {
            DriverError(format!("cannot {what} for sandbox {id}: {err}"))
        };
        let folder = self.dir(id);
        let identity =
            self.isolation
                .identity(id, sandbox.spec.run_as_user, sandbox.spec.run_as_group);
        // Who the kernel checks its access as on this machine.
        let ids = identity.host.unwrap_or_else(own_ids);
        // Its working directory, plain components only; `/workspace` without one.
        let relative_workdir = Some(relative(&sandbox.spec.working_dir))
            .filter(|path| !path.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from("workspace"));
        let cwd = Path::new("/").join(&relative_workdir);
        let top = top_of(&cwd);
        if self.isolation.view.is_some() && RESERVED_TOPS.contains(&top.as_str()) {
            return Err(DriverError(format!(
                "cannot start sandbox {id}: its working directory {} is under {top}, which a \
                 sandbox sees read-only from this machine (or as its own /proc, /dev or /run); \
                 choose another, such as /workspace",
                cwd.display()
            )));
        }
        let root = layout::open_root(&self.options.root)
            .map_err(|err| failed(&format!("open {}", self.options.root.display()), err))?;
        layout::prepare_folder(&root, id, identity.host)
            .map_err(|err| failed(&format!("prepare {}", folder.display()), err))?;
        let state = self.state_dir(id);
        std::fs::create_dir_all(&state)
            .map_err(|err| failed(&format!("create {}", state.display()), err))?;
        std::fs::write(state.join(PORT_FILE), port.to_string())
            .map_err(|err| failed("record the port", err))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(state.join(LOG_FILE))
            .map_err(|err| failed("open the log", err))?;
        let output = log.try_clone().map_err(|err| failed("open the log", err))?;

        let argv = arguments(&sandbox.spec, self.options.port, port);
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| DriverError("the sandbox has neither a command nor an image".into()))?;
        let path = sandbox
            .spec
            .environment
            .get("PATH")
            .cloned()
            .or_else(|| std::env::var("PATH").ok())
            .unwrap_or_default();
        let program = resolve(program, &path);
        let refused =
            |err: layout::Unreachable| DriverError(format!("cannot start sandbox {id}: {err}"));
        if program.is_absolute() {
            check_reach(&program, ids, &self.options.read_only, true).map_err(refused)?;
        }
        let home = folder.join("home");
        let tmp = folder.join("tmp");
        let mut environment: Vec<(String, String)> = INHERITED_ENV
            .iter()
            .filter_map(|name| Some((name.to_string(), std::env::var(name).ok()?)))
            .collect();
        environment.push(("HOME".into(), home.display().to_string()));
        environment.push(("TMPDIR".into(), tmp.display().to_string()));
        environment.extend(
            sandbox
                .spec
                .environment
                .iter()
                .filter(|(name, _)| !is_foreign_session_key(name))
                .map(|(name, value)| (name.clone(), value.clone())),
        );
        // Sandgate's keys over any the spec names, as on Kubernetes.
        environment.push(("PORT".into(), port.to_string()));
        environment.push((SESSION_KEY_ENV.into(), keys.session.clone()));
        environment.push((SECRET_KEY_ENV.into(), keys.secret.clone()));

        let own_uid = identity.host.is_some();
        // Its own network where this machine allows (as root, or without: `network.rs`),
        // made by the stage of its view.
        let networked = self.isolation.network.is_some() && self.isolation.view.is_some();
        let mut handshake = None;
        // With egress, names, asked of pasta: the machine's resolver may be out of reach.
        let resolv_conf = (networked && self.options.network.egress == Egress::Internet)
            .then(|| state.join(RESOLV_CONF_FILE));
        let resolv_at = network::resolv_conf_path();
        if let Some(conf) = &resolv_conf {
            let host = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
            std::fs::write(conf, network::resolv_conf(&host))
                .and_then(|()| {
                    std::fs::set_permissions(conf, std::fs::Permissions::from_mode(0o644))
                })
                .map_err(|err| failed("write its resolv.conf", err))?;
        }
        let mut command = match &self.isolation.view {
            Some(tools) => {
                let installs = installs(
                    &program,
                    &path,
                    &self.isolation.system,
                    &self.options.read_only,
                    self.data_dir(),
                    ids,
                );
                // What is missing is left out; without root, Sandgate can grant only
                // what its own uid reaches.
                let granted: Vec<PathBuf> = self
                    .options
                    .read_only
                    .iter()
                    .filter(|dir| {
                        dir.is_dir()
                            && (identity.host.is_some()
                                || check_reach(dir, ids, &[], false).is_ok())
                    })
                    .cloned()
                    .collect();
                let view = View {
                    tools,
                    system: &self.isolation.system,
                    host: identity.host,
                    inside: identity.inside,
                    folder: &folder,
                    cwd: &cwd,
                    installs: &installs,
                    granted: &granted,
                    network: networked,
                    resolv_conf: resolv_conf.as_deref(),
                    resolv_at: &resolv_at,
                };
                let line = self.isolation.limited(
                    view.command_line(&program, args),
                    sandbox.spec.resource_factor,
                    own_uid,
                );
                let mut command = Command::new(&line[0]);
                command.args(&line[1..]).current_dir("/").env_clear();
                let mapping = args_fd(&environment_args(
                    environment
                        .iter()
                        .map(|(name, value)| (name.as_str(), value.as_str())),
                ))
                .map_err(|err| failed("hand over the environment", err))?;
                let mut mappings = vec![mapping];
                if networked {
                    let (parent, child) = Handshake::new()
                        .map_err(|err| failed("make its network namespace", err))?;
                    mappings.extend(child);
                    handshake = Some(parent);
                }
                command
                    .fd_mappings(mappings)
                    .map_err(|err| DriverError(format!("cannot start sandbox {id}: {err}")))?;
                command
            }
            None => {
                // No view: it works in its folder on this machine, as its uid.
                let workdir = folder.join(&relative_workdir);
                std::fs::create_dir_all(&workdir)
                    .map_err(|err| failed(&format!("create {}", workdir.display()), err))?;
                check_reach(&workdir, ids, &[], false).map_err(refused)?;
                let mut line = vec![program.display().to_string()];
                line.extend(args.iter().cloned());
                let line = self
                    .isolation
                    .limited(line, sandbox.spec.resource_factor, own_uid);
                let mut command = Command::new(&line[0]);
                if let Some(host) = identity.host {
                    command.uid(host.uid).gid(host.gid);
                }
                command
                    .args(&line[1..])
                    .current_dir(&workdir)
                    .env_clear()
                    .envs(environment.iter().map(|(name, value)| (name, value)));
                command
            }
        };
        command
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(log)
            // Its own process group, so that stopping it stops what it started too.
            .process_group(0)
            .kill_on_drop(true);
        let child = command
            .spawn()
            .map_err(|err| failed(&format!("run {}", program.display()), err))?;
        if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) {
            // For the next run to stop it, should this one end without doing so; its start
            // time tells it from a process that takes its pid later.
            let started = start_time(pid).unwrap_or_default();
            let _ = std::fs::write(state.join(PID_FILE), format!("{pid} {started}"));
        }
        tracing::debug!(runtime_id = %id, port, "sandbox process started");
        Ok((child, handshake))
    }
}

/// Sandgate's own uid and gid.
pub(super) fn own_ids() -> Ids {
    Ids {
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
    }
}

/// `bytes` in a memory file, mapped to [`ARGS_FD`] in the child.
pub(super) fn args_fd(bytes: &[u8]) -> std::io::Result<FdMapping> {
    let fd: OwnedFd =
        rustix::fs::memfd_create("sandgate-sandbox-env", rustix::fs::MemfdFlags::CLOEXEC)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    file.rewind()?;
    Ok(FdMapping {
        parent_fd: file.into(),
        child_fd: ARGS_FD,
    })
}

/// The installations a sandbox runs from, outside the system directories, bound
/// read-only in its view: that of its program (where it is named and where its links
/// lead: a virtual environment and its interpreter) and of each directory of its `PATH`.
/// An installation is the directory above a `bin` (or the directory itself). Left out:
/// what its uid cannot reach (it could not read it anyway), the root, and whatever holds
/// or lies in Sandgate's data directory.
fn installs(
    program: &Path,
    path: &str,
    system: &[crate::sandboxes::process_isolation::SystemDir],
    granted: &[PathBuf],
    data_dir: &Path,
    ids: Ids,
) -> Vec<PathBuf> {
    use crate::sandboxes::process_isolation::SystemDir;
    let prefix = |dir: &Path| -> PathBuf {
        match dir.file_name().and_then(|name| name.to_str()) {
            Some("bin" | "sbin") => dir.parent().unwrap_or(dir).to_path_buf(),
            _ => dir.to_path_buf(),
        }
    };
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut consider = |dir: &Path| {
        if !dir.is_absolute() {
            return;
        }
        dirs.push(prefix(dir));
        if let Ok(real) = std::fs::canonicalize(dir) {
            dirs.push(prefix(&real));
        }
    };
    if let Some(parent) = program.parent() {
        consider(parent);
    }
    if let Ok(real) = std::fs::canonicalize(program)
        && let Some(parent) = real.parent()
    {
        consider(parent);
    }
    for dir in std::env::split_paths(path) {
        consider(&dir);
    }
    let seen_by_all = |dir: &Path| {
        granted.iter().any(|granted| dir.starts_with(granted))
            || system.iter().any(|system| match system {
                SystemDir::Dir(path) | SystemDir::Link { path, .. } => dir.starts_with(path),
            })
    };
    dirs.sort();
    dirs.dedup();
    let mut kept: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        let excluded = dir.parent().is_none()
            || seen_by_all(&dir)
            || data_dir.starts_with(&dir)
            || dir.starts_with(data_dir)
            || kept.iter().any(|parent| dir.starts_with(parent))
            || !dir.is_dir()
            || check_reach(&dir, ids, &[], false).is_err();
        if !excluded {
            kept.push(dir);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_s_installation_is_bound_but_never_the_data_directory() {
        let machine = tempfile::tempdir().expect("dir");
        let venv = machine.path().join("tools/venv");
        let base = machine.path().join("python");
        std::fs::create_dir_all(venv.join("bin")).expect("mkdir");
        std::fs::create_dir_all(base.join("bin")).expect("mkdir");
        std::fs::write(base.join("bin/python3"), "").expect("write");
        std::os::unix::fs::symlink(base.join("bin/python3"), venv.join("bin/python"))
            .expect("link");
        let data = machine.path().join("data");
        std::fs::create_dir_all(data.join("sandboxes/x/bin")).expect("mkdir");
        let path = std::env::join_paths([
            venv.join("bin"),
            data.join("sandboxes/x/bin"),
            machine.path().to_path_buf(),
            PathBuf::from("/usr/bin"),
            PathBuf::from("/"),
        ])
        .expect("path")
        .into_string()
        .expect("utf-8");
        let system = [crate::sandboxes::process_isolation::SystemDir::Dir(
            "/usr".into(),
        )];
        let got = installs(
            &venv.join("bin/python"),
            &path,
            &system,
            &[],
            &data,
            own_ids(),
        );
        // The machine's directory holds the data directory: never bound whole.
        assert_eq!(got, [base, venv]);
    }
}
