//! Starting a `process` sandbox: its directories (the working directory, `HOME` and
//! `TMPDIR` its uid's own when it has one), its port and pid files, its log, and its
//! command line (behind the mount of its working directory at its own path when Sandgate
//! is root: `mounts.rs`) and environment (the spec's, Sandgate's keys, and of Sandgate's
//! own environment only what [`INHERITED_ENV`] names).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Stdio;

use tokio::process::{Child, Command};

use super::command_line::{arguments, relative, resolve};
use super::mounts;
use super::{LOG_FILE, PID_FILE, PORT_FILE, ProcessDriver};
use crate::sandboxes::driver::{DriverError, SECRET_KEY_ENV, SandboxKeys};
use crate::sandboxes::process_isolation::{SANDBOX_UID_BASE, start_time};
use sandgate_store::StoredSandbox;

/// The environment variable that carries the session key, as in a Kubernetes sandbox.
const SESSION_KEY_ENV: &str = "SESSION_API_KEY";
/// Of Sandgate's own environment, what a sandbox's process inherits.
const INHERITED_ENV: &[&str] = &["PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ"];

impl ProcessDriver {
    /// Starts `sandbox`'s command on `port` with its keys; its process.
    pub(super) fn spawn(
        &self,
        sandbox: &StoredSandbox,
        port: u16,
        keys: &SandboxKeys,
    ) -> Result<Child, DriverError> {
        let dir = self.dir(&sandbox.runtime_id);
        let failed = |what: &str, err: std::io::Error| {
            DriverError(format!(
                "cannot {what} for sandbox {}: {err}",
                sandbox.runtime_id
            ))
        };
        // Without a working directory of its own, `workspace`: the sandbox's directory
        // itself holds Sandgate's files (its pid among them) and stays root's.
        let relative_workdir = Some(relative(&sandbox.spec.working_dir))
            .filter(|path| !path.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from("workspace"));
        let workdir = dir.join(&relative_workdir);
        let home = dir.join("home");
        let identity = self.isolation.identity(
            &sandbox.runtime_id,
            sandbox.spec.run_as_user,
            sandbox.spec.run_as_group,
        );
        // Its working directory at the path its spec names, in a mount namespace of its
        // own (root only: the mount is made before the uid drops).
        let mounts = self
            .isolation
            .mounts
            .as_ref()
            .zip(identity)
            .and_then(|(tools, identity)| {
                Some((tools, identity, mounts::bind(&dir, &relative_workdir)?))
            });
        // Its own temporary directory (TMPDIR): agent-servers name theirs after their pid,
        // which is the same in every sandbox's PID namespace.
        let tmp = dir.join("tmp");
        for path in [&workdir, &home, &tmp] {
            std::fs::create_dir_all(path)
                .map_err(|err| failed(&format!("create {}", path.display()), err))?;
        }
        if let Some(identity) = identity {
            // The sandbox's own directories are its uid's; the rest of `dir` stays root's.
            let mut owned = vec![home.clone(), tmp.clone()];
            let mut path = dir.clone();
            for part in relative_workdir.components() {
                path.push(part);
                owned.push(path.clone());
            }
            for path in owned {
                std::os::unix::fs::chown(&path, Some(identity.uid), Some(identity.gid))
                    .map_err(|err| failed(&format!("give {} to its uid", path.display()), err))?;
                // Its own to read: not a neighbour's of another uid.
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))
                    .map_err(|err| failed(&format!("close {}", path.display()), err))?;
            }
        }
        std::fs::write(dir.join(PORT_FILE), port.to_string())
            .map_err(|err| failed("record the port", err))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(LOG_FILE))
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
        let (program_path, args) = self.isolation.command_line(
            &resolve(program, &path),
            args,
            sandbox.spec.resource_factor,
            identity.is_some_and(|identity| identity.uid >= SANDBOX_UID_BASE),
            // Behind the mount, its namespaces nest in the one that made the mount, where
            // its uid is named again.
            mounts.as_ref().map(|(_, identity, _)| *identity),
        );
        let (program_path, args) = match &mounts {
            Some((tools, _, bound)) => mounts::command_line(tools, bound, &program_path, args),
            None => (program_path, args),
        };
        // Everything runs as the sandbox's uid from the first program on: the spec's
        // environment (LD_PRELOAD, PATH) never reaches a process of Sandgate's uid.
        let mut command = Command::new(program_path);
        if let Some(identity) = identity {
            command.uid(identity.uid).gid(identity.gid);
        }
        command.args(args);
        command
            .current_dir(&workdir)
            .env_clear()
            .envs(
                INHERITED_ENV.iter().filter_map(|name| {
                    std::env::var_os(name).map(|value| (name.to_string(), value))
                }),
            )
            .env("HOME", &home)
            .env("TMPDIR", &tmp)
            .envs(&sandbox.spec.environment)
            .env("PORT", port.to_string())
            // Sandgate's keys over any the spec names, as on Kubernetes.
            .env(SESSION_KEY_ENV, &keys.session)
            .env(SECRET_KEY_ENV, &keys.secret)
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(log)
            // Its own process group, so that stopping it stops what it started too.
            .process_group(0)
            .kill_on_drop(true);
        let child = command
            .spawn()
            .map_err(|err| failed(&format!("run {program:?}"), err))?;
        if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) {
            // For the next run to stop it, should this one end without doing so; its start
            // time tells it from a process that takes its pid later.
            let started = start_time(pid).unwrap_or_default();
            let _ = std::fs::write(dir.join(PID_FILE), format!("{pid} {started}"));
        }
        tracing::debug!(runtime_id = %sandbox.runtime_id, port, "sandbox process started");
        Ok(child)
    }
}
