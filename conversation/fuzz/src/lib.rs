//! The conversation crate's fuzz targets' entry points, one `fn(&[u8])` each: every
//! `fuzz_targets/<name>.rs` hands libFuzzer's input to one of them, and the workspace's
//! `tests/fuzz_regressions.rs` (which includes this file) runs every kept input through
//! them in the ordinary test suite. An entry returns for input it has nothing to say about
//! and panics when the code under test crashes or breaks one of the invariants it checks.

pub mod webhook;

/// A target's entry point: returns, or panics on a crash or a broken invariant.
pub type Entry = fn(&[u8]);

/// Every target, by the name of its `fuzz_targets/` file and its `regressions/`, `seeds/`
/// and `corpus/` folders.
pub const TARGETS: &[(&str, Entry)] = &[("conversation_webhook", webhook::webhook_body)];
