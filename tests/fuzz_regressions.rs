//! Every input kept for the fuzz targets (run by `scripts/fuzz`), replayed through the same
//! entry points in the ordinary test suite: the crashes found
//! (`<fuzz crate>/regressions/<target>/`), each a bug fixed that must stay fixed, and the
//! small seed corpora (`<fuzz crate>/seeds/<target>/`). The fuzz crates are the
//! workspace's `fuzz/` and the crates' own (`conversation/fuzz/`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

#[path = "../fuzz/src/lib.rs"]
mod workspace;

#[path = "../conversation/fuzz/src/lib.rs"]
mod conversation;

/// A fuzz target's name and entry point.
type Target = (&'static str, fn(&[u8]));

/// Every fuzz crate, by its folder, with its targets.
const CRATES: [(&str, &[Target]); 2] = [
    ("fuzz", workspace::TARGETS),
    ("conversation/fuzz", conversation::TARGETS),
];

/// Every target of every fuzz crate, with its crate's folder.
fn targets() -> impl Iterator<Item = (&'static str, &'static Target)> {
    CRATES
        .into_iter()
        .flat_map(|(folder, targets)| targets.iter().map(move |target| (folder, target)))
}

/// The files of `<fuzz crate>/<folder>/<target>/`, sorted; none when the folder does not
/// exist.
fn inputs(fuzz_crate: &str, folder: &str, target: &str) -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(fuzz_crate)
        .join(folder)
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

fn replay(folder: &str) -> usize {
    let mut failures = Vec::new();
    let mut count = 0;
    for (fuzz_crate, (target, entry)) in targets() {
        for path in inputs(fuzz_crate, folder, target) {
            let data = std::fs::read(&path).unwrap_or_else(|err| panic!("{path:?}: {err}"));
            count += 1;
            if catch_unwind(AssertUnwindSafe(|| entry(&data))).is_err() {
                failures.push(path.display().to_string());
            }
        }
    }
    assert!(failures.is_empty(), "these inputs fail: {failures:#?}");
    count
}

#[test]
fn every_crash_found_stays_fixed() {
    replay("regressions");
}

#[test]
fn every_seed_passes() {
    // Each target has seeds: a target missing from the tables, or seeds not found, would
    // make this test pass by checking nothing.
    for (fuzz_crate, (target, _)) in targets() {
        assert!(
            !inputs(fuzz_crate, "seeds", target).is_empty(),
            "no seeds for {fuzz_crate}'s {target}"
        );
    }
    assert!(replay("seeds") >= targets().count());
}

/// Every `fuzz_targets/<name>.rs` of a fuzz crate is in its table, so that its kept
/// inputs are replayed here: a target added without its entry would never be.
#[test]
fn every_fuzz_target_is_replayed() {
    for (fuzz_crate, targets) in CRATES {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(fuzz_crate)
            .join("fuzz_targets");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|err| panic!("{dir:?}: {err}"))
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                name.strip_suffix(".rs").map(str::to_owned)
            })
            .collect();
        files.sort();
        let mut listed: Vec<String> = targets.iter().map(|(name, _)| (*name).to_owned()).collect();
        listed.sort();
        assert_eq!(files, listed, "{fuzz_crate}");
    }
}
