//! Every input kept for the fuzz targets (`fuzz/`, run by `scripts/fuzz`), replayed through
//! the same entry points in the ordinary test suite: the crashes found
//! (`fuzz/regressions/<target>/`), each a bug fixed that must stay fixed, and the small
//! seed corpora (`fuzz/seeds/<target>/`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

#[path = "../fuzz/src/lib.rs"]
mod entries;

/// The files of `fuzz/<folder>/<target>/`, sorted; none when the folder does not exist.
fn inputs(folder: &str, target: &str) -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
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
    for (target, entry) in entries::TARGETS {
        for path in inputs(folder, target) {
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
    // Each target has seeds: a target missing from the table, or seeds not found, would
    // make this test pass by checking nothing.
    for (target, _) in entries::TARGETS {
        assert!(!inputs("seeds", target).is_empty(), "no seeds for {target}");
    }
    assert!(replay("seeds") >= entries::TARGETS.len());
}
