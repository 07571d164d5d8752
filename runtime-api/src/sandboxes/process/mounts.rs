//! A `process` sandbox's working directory at the path its spec names, in a mount
//! namespace of its own. The app server starts sandboxes in `/workspace` and tells their
//! agent-server to work in `/workspace/project`: absolute paths, which the agent-server
//! creates. The sandbox's working directory is its own `{root}/{runtime_id}/workspace`;
//! it sees it at `/workspace` too, so that it writes neither the machine's `/workspace`
//! nor another sandbox's.
//!
//! The sandbox's command line runs behind
//! `unshare --user --map-root-user --mount -- sh -c 'mount --bind …; cd …; exec …'`, as
//! the sandbox's uid from its first program on: root only inside a user namespace of its
//! own, which is all a bind mount needs, and nothing on the machine (the spec's
//! environment, `LD_PRELOAD` and `PATH` included, never reaches a process of Sandgate's
//! uid). The rest of its isolation (`process_isolation.rs`) follows, its user namespace
//! nested in that one and mapping the sandbox's uid back, so that its programs run as
//! that uid, not as root. Every program execs the next: the process Sandgate holds is
//! still the last `unshare`, as without.
//!
//!
//! The mount point is the path's first directory: made empty (root's, 0755) when the
//! machine lacks it, and never one that holds anything, which the sandbox would hide from
//! itself (`/usr`, `/home`). Where the mount cannot be made (Sandgate is not root, the
//! directory exists and is not empty, a tool is missing), the sandbox works in its own
//! directory under the relative path, as it always did; `check-config` says so.

use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use super::super::process_isolation::MountTools;

/// Runs `$1` (`mount`, by its absolute path) to bind `$2` at `$3`, enters `$4`, and runs
/// the rest of its arguments. Paths come as arguments, never inside the script: nothing
/// in them is read as shell.
const SCRIPT: &str = r#""$1" --bind -- "$2" "$3" && cd -- "$4" && shift 4 && exec "$@""#;

/// A sandbox's directory bound at the top of its working directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Bound {
    /// The sandbox's own directory, `{root}/{runtime_id}/workspace`.
    source: PathBuf,
    /// Where the sandbox sees it, `/workspace`.
    target: PathBuf,
    /// The spec's working directory, under `target`.
    cwd: PathBuf,
}

/// The bind for a sandbox in `dir` working in `relative` (plain components, the spec's
/// working directory less its root); `None` when its first directory cannot be a mount
/// point.
pub(super) fn bind(dir: &Path, relative: &Path) -> Option<Bound> {
    bind_in(Path::new("/"), dir, relative)
}

/// [`bind`] on a machine whose root is `root`.
fn bind_in(root: &Path, dir: &Path, relative: &Path) -> Option<Bound> {
    let Some(Component::Normal(first)) = relative.components().next() else {
        return None;
    };
    let target = root.join(first);
    mount_point(&target).then(|| Bound {
        source: dir.join(first),
        target,
        cwd: root.join(relative),
    })
}

/// Whether `target` is an empty directory, made so when the machine lacks it.
fn mount_point(target: &Path) -> bool {
    let empty_dir = |target: &Path| {
        std::fs::symlink_metadata(target).is_ok_and(|meta| meta.is_dir())
            && std::fs::read_dir(target).is_ok_and(|mut entries| entries.next().is_none())
    };
    if std::fs::symlink_metadata(target).is_err() {
        // Another sandbox's start may make it first: either way it must be empty now.
        if std::fs::create_dir(target).is_ok() {
            let _ = std::fs::set_permissions(target, std::fs::Permissions::from_mode(0o755));
        }
    }
    empty_dir(target)
}

/// `program args` (the sandbox's isolated command line, its user namespace mapping the
/// sandbox's uid) behind the mount.
pub(super) fn command_line(
    tools: &MountTools,
    bound: &Bound,
    program: &Path,
    args: Vec<String>,
) -> (PathBuf, Vec<String>) {
    let mut line: Vec<String> = [
        "--user",
        "--map-root-user",
        "--mount",
        "--propagation",
        "private",
        "--",
        &tools.shell.display().to_string(),
        "-c",
        SCRIPT,
        "sh",
        &tools.mount.display().to_string(),
        &bound.source.display().to_string(),
        &bound.target.display().to_string(),
        &bound.cwd.display().to_string(),
        &program.display().to_string(),
    ]
    .map(str::to_owned)
    .to_vec();
    line.extend(args);
    (tools.unshare.clone(), line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bind_puts_the_sandbox_s_directory_at_its_first_component() {
        let machine = tempfile::tempdir().expect("dir");
        let sandbox = Path::new("/srv/sandboxes/abc");
        // Missing on the machine: made, empty, and bound.
        let bound =
            bind_in(machine.path(), sandbox, Path::new("workspace/project")).expect("bound");
        assert_eq!(bound.source, sandbox.join("workspace"));
        assert_eq!(bound.target, machine.path().join("workspace"));
        assert_eq!(bound.cwd, machine.path().join("workspace/project"));
        assert!(bound.target.is_dir());
        // A second sandbox finds it as the first left it: empty.
        assert_eq!(
            bind_in(machine.path(), sandbox, Path::new("workspace")).map(|bound| bound.target),
            Some(machine.path().join("workspace"))
        );
    }

    #[test]
    fn a_directory_that_holds_anything_is_never_a_mount_point() {
        let machine = tempfile::tempdir().expect("dir");
        let sandbox = Path::new("/srv/sandboxes/abc");
        std::fs::create_dir(machine.path().join("home")).expect("mkdir");
        std::fs::write(machine.path().join("home/user-file"), "x").expect("write");
        std::fs::write(machine.path().join("a-file"), "x").expect("write");
        assert_eq!(
            bind_in(machine.path(), sandbox, Path::new("home/app")),
            None
        );
        assert_eq!(bind_in(machine.path(), sandbox, Path::new("a-file")), None);
        assert_eq!(bind_in(machine.path(), sandbox, Path::new("")), None);
        assert_eq!(
            std::fs::read_to_string(machine.path().join("home/user-file")).expect("kept"),
            "x"
        );
    }

    #[test]
    fn the_command_line_binds_and_enters_in_a_user_namespace_of_its_own() {
        let tools = MountTools {
            unshare: "/usr/bin/unshare".into(),
            shell: "/bin/sh".into(),
            mount: "/usr/bin/mount".into(),
        };
        let bound = Bound {
            source: "/srv/abc/workspace".into(),
            target: "/workspace".into(),
            cwd: "/workspace/project".into(),
        };
        let (program, args) = command_line(
            &tools,
            &bound,
            Path::new("/usr/bin/prlimit"),
            vec!["--as=1".into(), "--".into(), "agent-server".into()],
        );
        assert_eq!(program, Path::new("/usr/bin/unshare"));
        assert_eq!(args[..2], ["--user", "--map-root-user"]);
        let script = args.iter().position(|arg| arg == SCRIPT).expect("script");
        assert_eq!(
            args[script + 1..script + 6],
            [
                "sh",
                "/usr/bin/mount",
                "/srv/abc/workspace",
                "/workspace",
                "/workspace/project"
            ]
        );
        assert_eq!(
            args[script + 6..],
            ["/usr/bin/prlimit", "--as=1", "--", "agent-server"]
        );
    }
}
