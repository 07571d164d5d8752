//! The install's tools as the operator and the kubelet run them: `check-config` (exit
//! status and report), the services' own start checks, `gen-secrets` and `health-check`.
//!
//! One file per tool: `check_config.rs` (with the chart's prod example values it checks),
//! `start_checks.rs`, `gen_secrets.rs` and `health_check.rs`; this file holds what they
//! share.

mod check_config;
mod gen_secrets;
mod health_check;
mod start_checks;

/// A secret as strong as `gen-secrets` makes them.
const STRONG: &str = "5f0c6a1d2b3e4f5061728394a5b6c7d8e9f00112233445566778899aabbccdd";

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}
