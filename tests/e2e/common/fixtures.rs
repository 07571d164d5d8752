//! The shared webhook fixtures (`../shared/fixtures/webhook`, or `SANDGATE_FIXTURES`).

use std::path::{Path, PathBuf};

use serde_json::Value;

pub fn root() -> PathBuf {
    std::env::var_os("SANDGATE_FIXTURES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/webhook"),
        PathBuf::from,
    )
}

/// A fixture body's bytes, e.g. `body("accept/kitchen_sink")`.
pub fn body(name: &str) -> Vec<u8> {
    let path = root().join(format!("{name}.json"));
    std::fs::read(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// A fixture body parsed, for tests that change it.
pub fn json(name: &str) -> Value {
    serde_json::from_slice(&body(name)).expect("fixture is JSON")
}

/// Every `(name, body, expected)` under `folder` (`accept`, `reject`, `either`).
pub fn all(folder: &str) -> Vec<(String, Vec<u8>, Value)> {
    let dir = root().join(folder);
    let mut found: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("{}: {err}", dir.display()))
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.extension().is_some_and(|ext| ext == "json")
                && !path.to_string_lossy().ends_with(".expected.json")
        })
        .map(|path| {
            let name = path
                .file_stem()
                .expect("stem")
                .to_string_lossy()
                .into_owned();
            let expected_path = dir.join(format!("{name}.expected.json"));
            let expected = serde_json::from_slice(&std::fs::read(&expected_path).expect("sidecar"))
                .expect("sidecar is JSON");
            (name, std::fs::read(&path).expect("body"), expected)
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}
