//! Which `sandgate` builds a load benchmark measures, for side-by-side comparisons of two
//! builds in one run.

/// The `sandgate` binaries to measure side by side, labelled: `BENCH_SANDGATE`
/// (`label=path,…`, e.g. a copy of the previous build against the current one), else the
/// current build with an empty label.
pub fn from_env(current: &str) -> Vec<(String, String)> {
    match std::env::var("BENCH_SANDGATE") {
        Ok(list) => list
            .split(',')
            .map(|entry| {
                let (label, path) = entry.split_once('=').expect("BENCH_SANDGATE: label=path");
                (format!("{label}, "), path.to_owned())
            })
            .collect(),
        Err(_) => vec![(String::new(), current.to_owned())],
    }
}
