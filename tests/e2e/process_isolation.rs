//! The `process` driver against a hostile sandbox (issue 40), on the real `sandgate`
//! binary, as root and as an unprivileged user: a sandbox's command reads neither
//! Sandgate's environment nor another sandbox's through `/proc`, and after a pause, a
//! stop, Sandgate's shutdown and a restart after a SIGKILL, no process of the sandbox is
//! left, `setsid`, double forks, tmux servers and a changed working directory included.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{SandgateProcess, require_root};
use crate::process_sandboxes::{
    SANDGATE_SECRET, act, call, serve_as, serving, until_session, written_environment,
};
use crate::process_view::unprivileged_network;

/// How long the processes of a stopped sandbox may take to go.
const GONE_WITHIN: Duration = Duration::from_secs(15);

/// A uid Sandgate runs as in the unprivileged tests: no user of this machine.
const UNPRIVILEGED: u32 = 4242;

/// A sandbox that writes down its environment, then serves its working directory on its
/// port, after `script` (run by `sh` in its working directory).
fn sandbox(session: &str, script: &str) -> Value {
    json!({
        "image": "local/hostile",
        "command": serving(&format!("env > environment.txt; {script};")),
        "working_dir": "/workspace",
        // A session key of the spec's own would shut Sandgate's out: it is dropped.
        "environment": {"GREETING": "hello", "OH_SESSION_API_KEYS_0": "the-spec-s-own-key"},
        "session_id": session,
    })
}

/// What a hostile sandbox tries: every process's environment it can see, its parent's
/// first (where Sandgate's used to be), into `seen.txt`; and which processes it sees (by
/// the shell's own glob: no process is started to look), and what its pid 1 runs.
const READ_EVERY_ENVIRONMENT: &str = "cat /proc/$PPID/environ /proc/[0-9]*/environ > seen.txt 2>/dev/null; \
     for p in /proc/[0-9]*; do echo \"${p#/proc/}\"; done > processes.txt; \
     tr '\\0' ' ' < /proc/1/cmdline > init.txt; id -u > uid.txt";

/// Processes that detach from the sandbox's command in every way a shell can: a new
/// session, a double fork, a tmux server, and one that leaves the sandbox's directory.
/// Each sleeps `marker` plus 1 to 4 seconds, so that they are found on this machine.
fn detached(marker: u32) -> String {
    format!(
        "setsid sleep {} & (sleep {} &) ; tmux -S ./tmux.sock new-session -d 'sleep {}'; (cd / && exec sleep {}) & true",
        marker + 1,
        marker + 2,
        marker + 3,
        marker + 4
    )
}

/// The detached processes of `marker` still running on this machine (any pid namespace).
fn survivors(marker: u32) -> Vec<String> {
    let wanted: Vec<String> = (1..=4)
        .map(|n| format!("sleep\0{}\0", marker + n))
        .collect();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).into_owned();
            (wanted.contains(&cmdline) && crate::process_sandboxes::alive(&pid.to_string()))
                .then_some(cmdline.replace('\0', " "))
        })
        .collect()
}

/// Polls until `count` detached processes of `marker` run.
async fn until_detached(marker: u32, count: usize) {
    let deadline = tokio::time::Instant::now() + GONE_WITHIN;
    while survivors(marker).len() != count {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of marker {marker} run, not {count}: {:?}",
            survivors(marker).len(),
            survivors(marker)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts `body`, waits until it runs; its runtime id.
async fn started(sandgate: &SandgateProcess, body: Value) -> String {
    let session = body["session_id"].as_str().expect("session").to_owned();
    let (status, started) = call(sandgate, "/start", Some(body)).await;
    assert_eq!(status, 200, "{started}");
    until_session(sandgate, &session, "running").await;
    started["runtime_id"].as_str().expect("id").to_owned()
}

/// A data directory Sandgate can use when it runs as `uid`.
fn data_dir(uid: Option<u32>) -> tempfile::TempDir {
    let data = tempfile::tempdir().expect("data dir");
    if let Some(uid) = uid {
        std::os::unix::fs::chown(data.path(), Some(uid), Some(uid)).expect("chown");
    }
    data
}

/// Two sandboxes; the second tries to read everybody's environment.
async fn neither_sandgate_nor_a_neighbour_is_readable(uid: Option<u32>) {
    let data = data_dir(uid);
    let mut sandgate = serve_as(uid, data.path(), "8000", &[]).await;
    let neighbour = started(&sandgate, sandbox("neighbour", "true")).await;
    let sandboxes = data.path().join("sandboxes");
    let neighbour_key = written_environment(&sandboxes.join(&neighbour))
        .remove("SESSION_API_KEY")
        .expect("the neighbour's key");
    let hostile = started(&sandgate, sandbox("hostile", READ_EVERY_ENVIRONMENT)).await;
    let workspace = sandboxes.join(&hostile).join("workspace");
    let seen = std::fs::read(workspace.join("seen.txt")).expect("the sandbox ran");
    let seen = String::from_utf8_lossy(&seen);
    assert!(
        seen.contains("GREETING=hello"),
        "it reads its own environment: {seen}"
    );
    assert!(!seen.contains(SANDGATE_SECRET), "Sandgate's secret leaked");
    assert!(
        !seen.contains("the-spec-s-own-key"),
        "the spec's session key reached the sandbox: {seen}"
    );
    assert!(!seen.contains(&neighbour_key), "the neighbour's key leaked");
    // Its own PID namespace. Unprivileged without a network of its own, the one process
    // it sees is its own command, as pid 1; under root, or with a network (both staged),
    // bubblewrap's second stage (which made its user namespace) is pid 1 and its command
    // pid 2: nothing else.
    let processes = std::fs::read_to_string(workspace.join("processes.txt")).expect("pids");
    let init = std::fs::read_to_string(workspace.join("init.txt")).expect("pid 1");
    if uid.is_some() && !unprivileged_network() {
        assert_eq!(processes, "1\n", "it sees only its own process");
        assert!(
            init.starts_with("/bin/sh -c env > environment.txt; cat /proc/$PPID/environ"),
            "its pid 1 is its own command: {init}"
        );
    } else {
        assert_eq!(
            processes, "1\n2\n",
            "it sees only its init and its own command"
        );
        assert!(
            init.contains("bwrap"),
            "its pid 1 is its own bubblewrap: {init}"
        );
    }
    let sandbox_uid = std::fs::read_to_string(workspace.join("uid.txt")).expect("uid");
    let sandbox_uid: u32 = sandbox_uid.trim().parse().expect("a uid");
    match uid {
        // Sandgate's own user, the only one it can run sandboxes as.
        Some(uid) => assert_eq!(sandbox_uid, uid),
        // Root: a uid of the sandbox's own.
        None => {
            let neighbour_uid = std::fs::read_to_string(
                sandboxes.join(&neighbour).join("workspace/environment.txt"),
            )
            .map(|_| std::fs::metadata(sandboxes.join(&neighbour).join("workspace")))
            .expect("neighbour")
            .map(|meta| std::os::unix::fs::MetadataExt::uid(&meta))
            .expect("neighbour's workspace");
            assert!(sandbox_uid >= 200_000, "{sandbox_uid}");
            assert_ne!(sandbox_uid, neighbour_uid, "each sandbox has its own uid");
        }
    }
    sandgate.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_reads_neither_sandgate_s_environment_nor_another_sandbox_s() {
    neither_sandgate_nor_a_neighbour_is_readable(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_an_unprivileged_sandgate_a_sandbox_reads_neither_environment_either() {
    if !require_root("Sandgate started as another user") {
        return;
    }
    neither_sandgate_nor_a_neighbour_is_readable(Some(UNPRIVILEGED)).await;
}

/// Pause, stop, Sandgate's shutdown (SIGTERM) and its restart after a SIGKILL each leave
/// no process of the sandbox.
async fn nothing_of_a_sandbox_outlives_it(uid: Option<u32>, base: u32) {
    let data = data_dir(uid);
    let sandgate = serve_as(uid, data.path(), "8000", &[]).await;

    let paused = base;
    let id = started(&sandgate, sandbox("paused", &detached(paused))).await;
    until_detached(paused, 4).await;
    assert_eq!(act(&sandgate, "pause", &id).await, 200);
    until_detached(paused, 0).await;

    let stopped = base + 10;
    let id = started(&sandgate, sandbox("stopped", &detached(stopped))).await;
    until_detached(stopped, 4).await;
    assert_eq!(act(&sandgate, "stop", &id).await, 200);
    until_detached(stopped, 0).await;

    let shutdown = base + 20;
    started(&sandgate, sandbox("shutdown", &detached(shutdown))).await;
    until_detached(shutdown, 4).await;
    let mut sandgate = sandgate;
    sandgate.terminate().await;
    until_detached(shutdown, 0).await;

    // Killed without a chance to stop them, Sandgate leaves them running; the next run on
    // the same data ends them.
    let mut sandgate = serve_as(uid, data.path(), "8000", &[]).await;
    let killed = base + 30;
    started(&sandgate, sandbox("killed", &detached(killed))).await;
    until_detached(killed, 4).await;
    sandgate.kill().await;
    assert_eq!(survivors(killed).len(), 4, "a SIGKILL stops nothing");
    let mut sandgate = serve_as(uid, data.path(), "8000", &[]).await;
    until_detached(killed, 0).await;
    until_session(&sandgate, "killed", "error").await;
    sandgate.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_process_of_a_sandbox_outlives_a_pause_a_stop_a_shutdown_or_a_restart() {
    nothing_of_a_sandbox_outlives_it(None, 7_100_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_an_unprivileged_sandgate_no_process_outlives_its_sandbox_either() {
    if !require_root("Sandgate started as another user") {
        return;
    }
    nothing_of_a_sandbox_outlives_it(Some(UNPRIVILEGED), 7_200_000).await;
}

/// A pause is graceful for every process of the sandbox, not only its first: a detached
/// one gets its SIGTERM (and writes it down) before anything is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_gives_every_process_of_the_sandbox_its_sigterm_first() {
    let data = data_dir(None);
    let mut sandgate = serve_as(None, data.path(), "8000", &[]).await;
    // The shell runs its trap once its `sleep` returns: a short one, so that the SIGTERM
    // is answered well within the grace period however loaded the machine.
    let listener = "setsid sh -c 'trap \"echo graceful > term.txt; exit 0\" TERM; \
         echo ready > ready.txt; while :; do sleep 0.1; done' & true";
    let id = started(&sandgate, sandbox("graceful", listener)).await;
    let workspace = data.path().join("sandboxes").join(&id).join("workspace");
    let deadline = tokio::time::Instant::now() + GONE_WITHIN;
    while !workspace.join("ready.txt").exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the trap was not set"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(act(&sandgate, "pause", &id).await, 200);
    let said = std::fs::read_to_string(workspace.join("term.txt")).unwrap_or_default();
    assert_eq!(
        said.trim(),
        "graceful",
        "the detached process got its SIGTERM"
    );
    sandgate.terminate().await;
}

/// What a sandbox's kernel reports of its limits, and whether it can reserve 12 GiB of
/// address space (an anonymous mapping: nothing is touched, so the machine's memory is not
/// at stake, only the sandbox's `RLIMIT_AS`).
const REPORT_LIMITS: &str = "grep 'Max address space' /proc/self/limits | tr -s ' ' | cut -d' ' -f4 > address_space.txt; \
     grep 'Max processes' /proc/self/limits | tr -s ' ' | cut -d' ' -f3 > processes.txt; \
     /usr/bin/python3 -c 'import mmap; mmap.mmap(-1, 12 << 30)' 2> mapping.txt \
     && echo mapped >> mapping.txt || echo refused >> mapping.txt";

/// The address space and process limits scale with `resource_factor`: at 0.5 a sandbox
/// cannot reserve 12 GiB (8 GiB is its bound), at 2 it can (32 GiB); its process count is
/// bounded at 512 and 2048 when its uid is its own (Sandgate runs as root).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_s_memory_and_process_limits_scale_with_its_resource_factor() {
    let data = data_dir(None);
    let mut sandgate = serve_as(None, data.path(), "8000", &[]).await;
    for (factor, session, mapped) in [(0.5, "small", false), (2.0, "large", true)] {
        let mut body = sandbox(session, REPORT_LIMITS);
        body["resource_factor"] = json!(factor);
        let id = started(&sandgate, body).await;
        let workspace = data.path().join("sandboxes").join(&id).join("workspace");
        let read = |name: &str| {
            std::fs::read_to_string(workspace.join(name))
                .unwrap_or_else(|error| panic!("{session}: {name}: {error}"))
        };
        let address_space: u64 = read("address_space.txt").trim().parse().expect("bytes");
        assert_eq!(
            address_space,
            (16.0 * 1024.0 * 1024.0 * 1024.0 * factor) as u64,
            "{session}: RLIMIT_AS"
        );
        if require_root("a sandbox's process limit, on its own uid") {
            let processes: u64 = read("processes.txt").trim().parse().expect("a count");
            assert_eq!(
                processes,
                (1024.0 * factor) as u64,
                "{session}: RLIMIT_NPROC"
            );
        }
        let mapping = read("mapping.txt");
        assert_eq!(
            mapping.trim_end().ends_with("mapped"),
            mapped,
            "{session}: 12 GiB under a factor of {factor}: {mapping}"
        );
        if !mapped {
            assert!(
                mapping.contains("MemoryError") || mapping.contains("Cannot allocate"),
                "{mapping}"
            );
        }
    }
    sandgate.terminate().await;
}

/// Each sandbox works at the absolute path its spec names (the app server's agent-server
/// creates `/workspace/project`) and sees its own directory there: not the machine's
/// `/workspace`, not another sandbox's. Each has a temporary directory of its own too
/// (agent-servers name theirs after their pid, the same in every PID namespace).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sandbox_sees_its_own_directory_at_the_working_directory_its_spec_names() {
    let data = data_dir(None);
    let mut sandgate = serve_as(None, data.path(), "8000", &[]).await;
    let mut runtimes = Vec::new();
    for name in ["first-tenant", "second-tenant"] {
        let script = format!(
            "echo {name} > /workspace/mine.txt && mkdir -p /workspace/project && ls /workspace > /workspace/project/listing.txt"
        );
        runtimes.push((name, started(&sandgate, sandbox(name, &script)).await));
    }
    for (name, runtime_id) in &runtimes {
        let dir = data.path().join("sandboxes").join(runtime_id);
        let read = |path: &str| std::fs::read_to_string(dir.join(path)).unwrap_or_default();
        assert_eq!(read("workspace/mine.txt"), format!("{name}\n"));
        // Its own files only, whatever the other wrote at the same path.
        assert_eq!(
            read("workspace/project/listing.txt"),
            "environment.txt\nmine.txt\nproject\n"
        );
        let tmp = format!("TMPDIR={}\n", dir.join("tmp").display());
        assert!(
            read("workspace/environment.txt").contains(&tmp),
            "{}",
            read("workspace/environment.txt")
        );
    }
    assert!(
        !std::path::Path::new("/workspace/mine.txt").exists(),
        "a sandbox wrote the machine's /workspace"
    );
    sandgate.terminate().await;
}

/// The spec's environment reaches the sandbox's own processes only: never bubblewrap's
/// stage, which runs as root, nor any process of Sandgate's uid. A library the spec
/// preloads (`LD_PRELOAD`, from a directory on its `PATH`, which its view holds) marks
/// every process it is loaded in with a file in `/tmp` named after a word of its own and
/// the pid: a process of the sandbox writes it into the sandbox's own `/tmp`; any other,
/// into the machine's or the stage's. Every mark is in the sandbox's, and its uid's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_library_the_spec_preloads_never_runs_as_sandgate_s_uid() {
    if !require_root("a sandbox's own uid") {
        return;
    }
    // Not under `/tmp`: a sandbox's own `/tmp` covers the machine's in its view, and with
    // it anything granted there.
    let work = tempfile::tempdir_in("/var/tmp").expect("dir");
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let bin = work.path().join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    let word = format!("sandgate-mark-{}", std::process::id());
    let source = work.path().join("mark.c");
    std::fs::write(
        &source,
        format!(
            "#include <stdio.h>\n#include <unistd.h>\n\
             __attribute__((constructor)) static void mark(void) {{\n\
             char path[512]; snprintf(path, sizeof path, \"/tmp/{word}-%d\", (int)getpid());\n\
             FILE *file = fopen(path, \"w\"); if (file) fclose(file); }}\n"
        ),
    )
    .expect("write");
    let library = bin.join("mark.so");
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .status()
        .expect("cc");
    assert!(built.success());

    let data = data_dir(None);
    // The library's directory is granted to the sandboxes (read-only), as an operator
    // grants what its sandboxes run: nothing of the machine's `/tmp` is in their view.
    let granted = work.path().display().to_string();
    let mut sandgate = serve_as(
        None,
        data.path(),
        "8000",
        &["--sandbox-read-only-paths", &granted],
    )
    .await;
    let mut body = sandbox("preloads", "true");
    body["environment"]["LD_PRELOAD"] = json!(library.display().to_string());
    body["environment"]["PATH"] = json!(format!("{}:/usr/bin:/bin", bin.display()));
    let runtime_id = started(&sandgate, body).await;
    let dir = data.path().join("sandboxes").join(&runtime_id);
    let sandbox_uid = std::fs::metadata(dir.join("home")).expect("home").uid();
    assert_ne!(sandbox_uid, 0);
    let marks = |dir: &std::path::Path| -> Vec<u32> {
        std::fs::read_dir(dir)
            .expect("list")
            .flatten()
            .filter(|entry| entry.file_name().to_string_lossy().starts_with(&word))
            .map(|entry| entry.metadata().expect("metadata").uid())
            .collect()
    };
    let owners = marks(&dir.join("tmp"));
    // sh, and the Python it execs, at least.
    assert!(owners.len() >= 2, "{owners:?}");
    assert!(
        owners.iter().all(|owner| *owner == sandbox_uid),
        "a process ran as another uid than the sandbox's {sandbox_uid}: {owners:?}"
    );
    assert_eq!(
        marks(std::path::Path::new("/tmp")),
        Vec::<u32>::new(),
        "a process outside the sandbox loaded the library"
    );
    sandgate.terminate().await;
}
