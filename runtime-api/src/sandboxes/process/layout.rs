//! Where a `process` sandbox's files are on this machine, made without following a link
//! on its behalf, and whether its uid can reach what it runs.
//!
//! - `{data_dir}/sandboxes/` (root's, 0700) holds only the sandboxes' folders;
//!   `{data_dir}/sandboxes/{runtime_id}/` is the sandbox's own (its uid's, 0700), with
//!   `workspace/`, `home/` and `tmp/` in it, and nothing of Sandgate's.
//! - `{data_dir}/sandbox-state/{runtime_id}/` (Sandgate's, 0700) holds its port, its pid
//!   and its log: a sandbox never sees them, nor the store beside them.
//!
//! A sandbox owns everything inside its folder, so it can replace any of it by a link
//! between two starts. Sandgate therefore reaches the folder from a descriptor of the
//! root, and each directory in it from the folder's descriptor, never following a link
//! (`openat` with `O_NOFOLLOW`), and changes an owner or mode only through a descriptor
//! of a directory it made itself. What lies below `workspace/` (a working directory
//! such as `/workspace/a/b`) is made by the sandbox's own uid, inside its own view.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use crate::sandboxes::process_isolation::Ids;

/// The directories of a sandbox's folder, made by Sandgate before each start.
pub(super) const OWN_DIRS: [&str; 3] = ["workspace", "home", "tmp"];

/// Opens `path` (Sandgate's own: the sandboxes' root), made 0700 when missing.
pub(super) fn open_root(path: &Path) -> io::Result<OwnedFd> {
    std::fs::create_dir_all(path)?;
    let root = rustix::fs::open(path, dir_flags(), Mode::empty())?;
    rustix::fs::fchmod(&root, Mode::from_raw_mode(0o700))?;
    Ok(root)
}

fn dir_flags() -> OFlags {
    OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::RDONLY
}

/// Makes (or finds) the sandbox's folder `name` under `root` and its [`OWN_DIRS`], each
/// reached without following a link; the folder is `owner`'s and 0700. An entry that is
/// not a directory (a link the sandbox put there) fails the start and is left as it is.
pub(super) fn prepare_folder(root: &OwnedFd, name: &str, owner: Option<Ids>) -> io::Result<()> {
    let folder = own_dir(root, name, owner)?;
    for dir in OWN_DIRS {
        own_dir(&folder, dir, owner)?;
    }
    Ok(())
}

/// The directory `name` in `parent`: made (0700, then given to `owner`) when missing,
/// opened with `O_NOFOLLOW` either way, and only through that descriptor chowned.
fn own_dir(parent: &OwnedFd, name: &str, owner: Option<Ids>) -> io::Result<OwnedFd> {
    let made = match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
        Ok(()) => true,
        Err(rustix::io::Errno::EXIST) => false,
        Err(err) => return Err(err.into()),
    };
    let dir = rustix::fs::openat(parent, name, dir_flags(), Mode::empty()).map_err(|err| {
        match err {
            // A link (ELOOP) or a file (ENOTDIR) where a directory must be.
            rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => io::Error::other(format!(
                "{name} is not a directory (a link or a file was put in its place); it was left as it is"
            )),
            err => err.into(),
        }
    })?;
    // Made here, or left by an earlier layout under another owner: given to the
    // sandbox's uid and closed to it alone.
    let foreign = match owner {
        Some(owner) => rustix::fs::fstat(&dir)?.st_uid != owner.uid,
        None => false,
    };
    if made || foreign {
        if let Some(owner) = owner {
            rustix::fs::fchown(
                &dir,
                Some(rustix::fs::Uid::from_raw(owner.uid)),
                Some(rustix::fs::Gid::from_raw(owner.gid)),
            )?;
        }
        rustix::fs::fchmod(&dir, Mode::from_raw_mode(0o700))?;
    }
    Ok(dir)
}

/// Why a sandbox's uid cannot reach a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreachable {
    /// The path it was asked to reach.
    pub path: PathBuf,
    /// The directory or file that stops it, with its mode and owner.
    pub blocker: PathBuf,
    pub mode: u32,
    pub owner: (u32, u32),
    pub ids: Ids,
    /// What the blocker lacks, or why it is not there.
    pub reason: String,
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the sandbox's uid {} (gid {}) cannot reach {}: {} is mode {:04o}, owned by {}:{} ({})",
            self.ids.uid,
            self.ids.gid,
            self.path.display(),
            self.blocker.display(),
            self.mode & 0o7777,
            self.owner.0,
            self.owner.1,
            self.reason
        )
    }
}

/// Whether `ids` may `want` (an `rwx` bit: 4, 2 or 1) on a file of this metadata, by its
/// mode bits (as the kernel decides for a process of that uid and gid alone).
fn allows(meta: &std::fs::Metadata, ids: Ids, want: u32) -> bool {
    let mode = meta.mode();
    let bits = if meta.uid() == ids.uid {
        mode >> 6
    } else if meta.gid() == ids.gid {
        mode >> 3
    } else {
        mode
    };
    bits & want == want
}

/// Checks that `ids` can reach `path` (absolute) following links as the kernel would,
/// and, when `executable`, run it; every directory on the way needs search permission,
/// but those above a `granted` directory (which a sandbox's view holds whatever they
/// say: `SANDBOX_READ_ONLY_PATHS`).
pub fn check_reach(
    path: &Path,
    ids: Ids,
    granted: &[PathBuf],
    executable: bool,
) -> Result<(), Unreachable> {
    let fail = |blocker: &Path, meta: Option<&std::fs::Metadata>, reason: &str| Unreachable {
        path: path.to_path_buf(),
        blocker: blocker.to_path_buf(),
        mode: meta.map_or(0, MetadataExt::mode),
        owner: meta.map_or((0, 0), |meta| (meta.uid(), meta.gid())),
        ids,
        reason: reason.to_owned(),
    };
    let mut pending: Vec<PathBuf> = vec![path.to_path_buf()];
    let mut hops = 0;
    let mut at = PathBuf::from("/");
    while let Some(next) = pending.pop() {
        let mut components: Vec<Component<'_>> = next.components().collect();
        components.reverse();
        if next.is_absolute() {
            at = PathBuf::from("/");
        }
        while let Some(component) = components.pop() {
            let name = match component {
                Component::RootDir | Component::CurDir | Component::Prefix(_) => continue,
                Component::ParentDir => {
                    at.pop();
                    continue;
                }
                Component::Normal(name) => name,
            };
            let candidate = at.join(name);
            let dir_meta = std::fs::metadata(&at).map_err(|_| fail(&at, None, "missing"))?;
            let bound_below = granted.iter().any(|dir| dir.starts_with(&candidate));
            if !bound_below && !allows(&dir_meta, ids, 1) {
                return Err(fail(&at, Some(&dir_meta), "no search permission"));
            }
            let meta = std::fs::symlink_metadata(&candidate)
                .map_err(|_| fail(&candidate, None, "missing"))?;
            if meta.file_type().is_symlink() {
                hops += 1;
                let target = std::fs::read_link(&candidate)
                    .map_err(|_| fail(&candidate, Some(&meta), "unreadable link"))?;
                if hops > 40 {
                    return Err(fail(&candidate, Some(&meta), "too many links"));
                }
                // The rest of this path, after the link's target.
                let rest: PathBuf = components.iter().rev().collect();
                pending.push(rest);
                pending.push(target);
                break;
            }
            at = candidate;
        }
    }
    let meta = std::fs::metadata(&at).map_err(|_| fail(&at, None, "missing"))?;
    // A directory is reached by searching it; a program by running it.
    let want = if executable || meta.is_dir() { 1 } else { 4 };
    if !allows(&meta, ids, want) {
        let reason = if executable {
            "not executable by it"
        } else {
            "not readable by it"
        };
        return Err(fail(&at, Some(&meta), reason));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[test]
    fn reach_is_refused_at_the_first_directory_without_search_permission() {
        let dir = tempfile::tempdir().expect("dir");
        let me = Ids {
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
        };
        let stranger = Ids {
            uid: 4_000_001,
            gid: 4_000_001,
        };
        let closed = dir.path().join("closed");
        std::fs::create_dir_all(closed.join("bin")).expect("mkdir");
        let program = closed.join("bin/tool");
        std::fs::write(&program, "#!/bin/sh\n").expect("write");
        mode(&program, 0o755);
        mode(dir.path(), 0o755);
        mode(&closed, 0o700);
        assert_eq!(check_reach(&program, me, &[], true), Ok(()));
        let refused = check_reach(&program, stranger, &[], true).expect_err("closed");
        assert_eq!(refused.blocker, closed);
        assert_eq!(refused.mode & 0o777, 0o700);
        let message = refused.to_string();
        for part in [
            "4000001",
            "0700",
            &closed.display().to_string(),
            &program.display().to_string(),
        ] {
            assert!(message.contains(part), "{message} names {part}");
        }
        // Through a link, the target's directories count.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&program, &link).expect("symlink");
        assert_eq!(
            check_reach(&link, stranger, &[], true)
                .expect_err("via link")
                .blocker,
            closed
        );
        // Unless the operator grants what lies inside to every sandbox.
        let granted = [closed.join("bin")];
        assert_eq!(check_reach(&program, stranger, &granted, true), Ok(()));
        assert!(check_reach(&closed.join("other"), stranger, &granted, false).is_err());
        mode(&closed, 0o711);
        assert_eq!(check_reach(&link, stranger, &[], true), Ok(()));
        mode(&program, 0o700);
        assert_eq!(
            check_reach(&program, stranger, &[], true)
                .expect_err("not executable")
                .blocker,
            program
        );
        let missing = dir.path().join("missing/tool");
        assert_eq!(
            check_reach(&missing, me, &[], true)
                .expect_err("missing")
                .reason,
            "missing"
        );
    }

    #[test]
    fn a_folder_is_never_reached_through_a_link() {
        let root_dir = tempfile::tempdir().expect("dir");
        let elsewhere = tempfile::tempdir().expect("dir");
        let root = open_root(root_dir.path()).expect("root");
        prepare_folder(&root, "sb", None).expect("made");
        for dir in OWN_DIRS {
            assert!(root_dir.path().join("sb").join(dir).is_dir());
        }
        // The sandbox swaps its workspace for a link: the start fails, the target is
        // untouched.
        let workspace = root_dir.path().join("sb/workspace");
        std::fs::remove_dir(&workspace).expect("rmdir");
        std::os::unix::fs::symlink(elsewhere.path(), &workspace).expect("symlink");
        mode(elsewhere.path(), 0o755);
        let err = prepare_folder(&root, "sb", None).expect_err("a link");
        assert!(
            err.to_string().contains("workspace is not a directory"),
            "{err}"
        );
        assert_eq!(
            std::fs::metadata(elsewhere.path()).expect("meta").mode() & 0o777,
            0o755
        );
        assert_eq!(
            std::fs::read_dir(elsewhere.path()).expect("list").count(),
            0
        );
        // And the folder itself, when it is a link.
        std::os::unix::fs::symlink(elsewhere.path(), root_dir.path().join("other"))
            .expect("symlink");
        assert!(prepare_folder(&root, "other", None).is_err());
        assert_eq!(
            std::fs::read_dir(elsewhere.path()).expect("list").count(),
            0
        );
    }
}
