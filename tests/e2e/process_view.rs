//! The `process` driver's filesystem isolation (issue 50) from the hostile side, inside
//! real sandboxes on the real `sandgate` binary, as root and as an unprivileged user,
//! with the data directory in a parent no other uid can enter (as under `/root`):
//!
//! - a sandbox that finds the data directory through `/proc/self/mountinfo` reads neither
//!   the store nor another sandbox's log, nor lists the sandboxes;
//! - a link swapped in at each level of a two-level working directory (`/workspace/a/b`)
//!   between two runs (a pause, an idle pause, a Sandgate restart) leaves the directory it
//!   points at as it was;
//! - two sandboxes asking the same `run_as_user` each fork up to their own process limit;
//! - a program its uid cannot reach fails the start naming the path, its mode and the
//!   uid, and `check-config` says the same before deploy.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{SandgateProcess, run_sandgate};
use crate::process_sandboxes::{act, call, serve_as, serving, until_session};

/// A uid Sandgate runs as in the unprivileged tests: no user of this machine.
pub(crate) const UNPRIVILEGED: u32 = 4343;

pub(crate) fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Whether a Sandgate run as another user gives its sandboxes a network of their own (and
/// with it a stage, as root's: `view.rs`): where pasta may open `/dev/net/tun` as that
/// user, as `scripts/test` makes it (Debian's udev's mode, 0666).
pub(crate) fn unprivileged_network() -> bool {
    std::fs::metadata("/dev/net/tun").is_ok_and(|tun| {
        std::os::unix::fs::PermissionsExt::mode(&tun.permissions()) & 0o666 == 0o666
    })
}

/// A data directory inside a parent of mode 0700 (its owner's: `uid`'s, else root's), as
/// `/root/…` is on a new machine; the parent is kept alive with it.
pub(crate) fn closed_data_dir(uid: Option<u32>) -> (tempfile::TempDir, PathBuf) {
    let parent = tempfile::tempdir().expect("parent");
    let data = parent.path().join("data");
    std::fs::create_dir(&data).expect("mkdir");
    if let Some(uid) = uid {
        for dir in [parent.path(), data.as_path()] {
            std::os::unix::fs::chown(dir, Some(uid), Some(uid)).expect("chown");
        }
    }
    std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    (parent, data)
}

/// A sandbox running `script` (by `sh`, in its working directory), then serving on its
/// port.
fn sandbox(session: &str, working_dir: &str, script: &str) -> Value {
    json!({
        "image": "local/hostile",
        "command": serving(&format!("{script};")),
        "working_dir": working_dir,
        "session_id": session,
    })
}

async fn started(sandgate: &SandgateProcess, body: Value) -> String {
    let session = body["session_id"].as_str().expect("session").to_owned();
    let (status, started) = call(sandgate, "/start", Some(body)).await;
    assert_eq!(status, 200, "{started}");
    until_session(sandgate, &session, "running").await;
    started["runtime_id"].as_str().expect("id").to_owned()
}

/// What a hostile sandbox tries: the data directory from the source of its workspace's
/// mount, then the store, the sandboxes' folders and every log there.
const READ_THE_STORE: &str = r#"
source=$(awk '$5 == "/workspace" { print $4 }' /proc/self/mountinfo)
data=${source%/sandboxes/*}
echo "$data" > data.txt
{ cat "$data/sandgate.redb" | wc -c; } > store.txt 2>&1
ls "$data/sandboxes" > listing.txt 2>&1
cat "$data"/sandbox-state/*/sandbox.log > logs.txt 2>&1
true"#;

async fn the_store_and_the_neighbours_logs_are_out_of_reach(uid: Option<u32>) {
    let (_parent, data) = closed_data_dir(uid);
    let mut sandgate = serve_as(uid, &data, "8000", &[]).await;
    // A neighbour whose log holds something to steal.
    let neighbour = started(
        &sandgate,
        sandbox("neighbour", "/workspace", "echo neighbour-secret-0451 >&2"),
    )
    .await;
    let log = data
        .join("sandbox-state")
        .join(&neighbour)
        .join("sandbox.log");
    assert!(
        std::fs::read_to_string(&log).is_ok_and(|log| log.contains("neighbour-secret-0451")),
        "the neighbour's log is where the thief looks"
    );
    let thief = started(&sandgate, sandbox("thief", "/workspace", READ_THE_STORE)).await;
    let workspace = data.join("sandboxes").join(&thief).join("workspace");
    let read = |name: &str| std::fs::read_to_string(workspace.join(name)).expect(name);
    assert_eq!(
        read("data.txt").trim(),
        data.display().to_string(),
        "the thief found the data directory"
    );
    assert!(data.join("sandgate.redb").is_file(), "the store is there");
    let store = read("store.txt");
    assert!(
        store.contains("No such file") || store.contains("Permission denied"),
        "the store was read: {store}"
    );
    // Its own folder is at its own path in its view: the only one there.
    assert_eq!(read("listing.txt").trim(), thief, "it lists only itself");
    let logs = read("logs.txt");
    assert!(
        !logs.contains("neighbour-secret-0451"),
        "the neighbour's log was read"
    );
    // On this machine, Sandgate's files are closed to every sandbox's uid.
    for dir in [data.join("sandboxes"), data.join("sandbox-state")] {
        assert_eq!(std::fs::metadata(&dir).expect("dir").mode() & 0o777, 0o700);
    }
    let folder = std::fs::metadata(data.join("sandboxes").join(&thief)).expect("folder");
    assert_eq!(folder.mode() & 0o777, 0o700);
    if uid.is_none() {
        assert!(folder.uid() >= 200_000, "the folder is its uid's");
    }
    sandgate.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_reads_neither_the_store_nor_another_sandbox_s_log() {
    the_store_and_the_neighbours_logs_are_out_of_reach(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_an_unprivileged_sandgate_the_store_is_out_of_reach_too() {
    if !is_root() {
        return;
    }
    the_store_and_the_neighbours_logs_are_out_of_reach(Some(UNPRIVILEGED)).await;
}

/// The owner, mode and entries of `dir`.
fn state_of(dir: &Path) -> (u32, u32, Vec<String>) {
    let meta = std::fs::metadata(dir).expect("target");
    let mut entries: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    entries.sort();
    (meta.uid(), meta.mode() & 0o7777, entries)
}

/// Replaces `path` by a link to `target`, as the sandbox (which owns it) can.
fn swap_for_link(path: &Path, target: &Path) {
    let aside = path.with_extension("orig");
    std::fs::rename(path, aside).expect("rename");
    std::os::unix::fs::symlink(target, path).expect("symlink");
}

/// Waits until a resumed session has left `starting` (which an accepted resume's answer
/// left it in; a refused one leaves it as it was); where it went. After an accepted
/// resume, `paused` means it ran and the idle sweep paused it again: only a running
/// sandbox is paused for idling, and a poll on a loaded machine may miss the two seconds
/// it ran.
async fn resumed(sandgate: &SandgateProcess, session: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (_, runtime) = call(sandgate, &format!("/sessions/{session}"), None).await;
        let status = runtime["status"].as_str().unwrap_or_default().to_owned();
        if status != "starting" {
            return status;
        }
        assert!(tokio::time::Instant::now() < deadline, "{runtime}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_swapped_into_the_working_directory_is_never_followed_by_sandgate() {
    links_are_never_followed(None).await;
}

/// As above, under a Sandgate run as another user: the links point at a directory of
/// that user's, which Sandgate could change if it followed them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_an_unprivileged_sandgate_a_swapped_link_is_never_followed_either() {
    if !crate::common::require_root("a Sandgate run as another user (root starts it)") {
        return;
    }
    links_are_never_followed(Some(UNPRIVILEGED)).await;
}

/// Links swapped in for each level of a two-level working directory, under a Sandgate
/// run as `uid` (root without one).
async fn links_are_never_followed(uid: Option<u32>) {
    let (_parent, data) = closed_data_dir(uid);
    // What the links point at: a directory of someone else's (or, without root, of
    // Sandgate's user's own), with a file in it.
    let target = tempfile::tempdir().expect("target");
    std::fs::write(target.path().join("keep.txt"), "mine").expect("write");
    std::fs::set_permissions(target.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    if let Some(uid) = uid {
        std::os::unix::fs::chown(target.path(), Some(uid), Some(uid)).expect("chown");
    }
    let before = state_of(target.path());
    let args = ["--runtime-idle-seconds", "2", "--reconcile-interval", "0.2"];
    let mut sandgate = serve_as(uid, &data, "8000", &args).await;
    // One sandbox per level, each working in /workspace/a/b.
    let mut ids = Vec::new();
    for session in ["level-two", "level-one", "level-zero"] {
        let body = sandbox(session, "/workspace/a/b", "pwd > /workspace/pwd.txt");
        let id = started(&sandgate, body).await;
        let workspace = data.join("sandboxes").join(&id).join("workspace");
        assert_eq!(
            std::fs::read_to_string(workspace.join("pwd.txt"))
                .expect("pwd")
                .trim(),
            "/workspace/a/b"
        );
        ids.push((session, id, workspace));
    }
    let [
        (two, two_id, two_ws),
        (one, one_id, one_ws),
        (zero, zero_id, zero_ws),
    ] = &ids[..]
    else {
        unreachable!()
    };

    // `b`, then a pause and a resume.
    act(&sandgate, "pause", two_id).await;
    until_session(&sandgate, two, "paused").await;
    swap_for_link(&two_ws.join("a/b"), target.path());
    let answer = act(&sandgate, "resume", two_id).await;
    let status = resumed(&sandgate, two).await;
    assert_eq!(
        state_of(target.path()),
        before,
        "b, after a resume ({answer}, then {status})"
    );

    // `a`, then an idle pause (nobody hears from it for 2 s) and a resume.
    until_session(&sandgate, one, "paused").await;
    swap_for_link(&one_ws.join("a"), target.path());
    let answer = act(&sandgate, "resume", one_id).await;
    let status = resumed(&sandgate, one).await;
    assert_eq!(
        state_of(target.path()),
        before,
        "a, after an idle pause ({answer}, then {status})"
    );

    // The workspace itself, then Sandgate's restart and a resume.
    until_session(&sandgate, zero, "paused").await;
    sandgate.terminate().await;
    swap_for_link(zero_ws, target.path());
    let mut sandgate = serve_as(uid, &data, "8000", &args).await;
    // Its start fails (the folder's `workspace` is a link) and the sandbox stays paused.
    let status = act(&sandgate, "resume", zero_id).await;
    assert_eq!(
        state_of(target.path()),
        before,
        "the workspace, after a restart ({status})"
    );
    assert!(
        !Path::new("/a").exists() && !Path::new("/workspace/a").exists(),
        "nothing made on the machine"
    );
    sandgate.terminate().await;
}

/// Forks sleepers until the kernel refuses or 1,100 run, counting them in `forks.txt`.
const FORK_1100: &str =
    "( i=0; while [ $i -lt 1100 ]; do sleep 600 & i=$((i+1)); echo $i > forks.txt; done ); true";

/// Two sandboxes whose spec asks the same `run_as_user` (as the app server's do) are two
/// uids on the machine: each forks up to its own limit (1,024 at factor 1), the second
/// while the first holds all of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_with_the_same_run_as_user_each_have_their_own_process_limit() {
    if !is_root() {
        return;
    }
    let (_parent, data) = closed_data_dir(None);
    let mut sandgate = serve_as(None, &data, "8000", &[]).await;
    let mut counts = Vec::new();
    for session in ["forker-one", "forker-two"] {
        let mut body = sandbox(
            session,
            "/workspace",
            &format!("id -u > uid.txt; {FORK_1100}"),
        );
        body["run_as_user"] = json!(10001);
        body["run_as_group"] = json!(10001);
        let id = started(&sandgate, body).await;
        let workspace = data.join("sandboxes").join(&id).join("workspace");
        let read = |name: &str| std::fs::read_to_string(workspace.join(name)).expect(name);
        assert_eq!(
            read("uid.txt").trim(),
            "10001",
            "the uid it asked for, inside"
        );
        let owner = std::fs::metadata(&workspace).expect("workspace").uid();
        counts.push((
            owner,
            read("forks.txt").trim().parse::<u32>().expect("a count"),
        ));
    }
    let [(first_uid, first), (second_uid, second)] = counts[..] else {
        unreachable!()
    };
    assert_ne!(first_uid, second_uid, "two uids on the machine");
    for count in [first, second] {
        assert!(
            (900..1100).contains(&count),
            "each stops at its own limit of 1024 processes: {counts:?}"
        );
    }
    sandgate.terminate().await;
}

/// A program in a directory of mode 0700 (root's): no sandbox uid can run it.
fn unreachable_program() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("dir");
    let closed = dir.path().join("closed");
    std::fs::create_dir(&closed).expect("mkdir");
    let program = closed.join("agent");
    std::fs::write(&program, "#!/bin/sh\nexec sleep 60\n").expect("write");
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    (dir, program)
}

fn names_path_mode_and_uid(message: &str, closed: &Path) {
    assert!(message.contains(&closed.display().to_string()), "{message}");
    assert!(message.contains("mode 0700"), "{message}");
    assert!(message.contains("uid "), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_the_sandbox_cannot_reach_fails_its_start_saying_where_and_check_config_too() {
    let (_dir, program) = unreachable_program();
    let closed = program.parent().expect("dir").to_path_buf();
    let uid = is_root().then_some(UNPRIVILEGED);
    for uid in [None, uid]
        .into_iter()
        .collect::<std::collections::BTreeSet<_>>()
    {
        let (_parent, data) = closed_data_dir(uid);
        let mut sandgate = serve_as(uid, &data, "8000", &[]).await;
        let body = json!({
            "image": "local/agent",
            "command": [program.display().to_string()],
            "working_dir": "/workspace",
            "session_id": format!("unreachable-{}", uid.unwrap_or(0)),
        });
        let (status, answer) = call(&sandgate, "/start", Some(body)).await;
        assert!(status >= 400, "{status} {answer}");
        names_path_mode_and_uid(&answer.to_string(), &closed);
        sandgate.terminate().await;
    }

    let warm = tempfile::NamedTempFile::new().expect("file");
    let config = json!({"count": 1, "configs": [{
        "name": "closed",
        "image": "local/agent",
        "working_dir": "/workspace",
        "command": [program.display().to_string()],
        "environment": {},
    }]});
    std::fs::write(warm.path(), config.to_string()).expect("write");
    let warm_path = warm.path().display().to_string();
    let output = run_sandgate(
        &["check-config", "--service", "runtime-api"],
        &[
            ("SANDBOX_DRIVER", "process"),
            ("WARM_RUNTIMES_FILE", warm_path.as_str()),
            ("PATH", "/usr/bin:/bin"),
        ],
    )
    .await;
    let report = String::from_utf8_lossy(&output.stdout);
    let line = report
        .lines()
        .find(|line| line.contains("closed"))
        .unwrap_or_else(|| panic!("check-config is silent: {report}"));
    names_path_mode_and_uid(line, &closed);
}
