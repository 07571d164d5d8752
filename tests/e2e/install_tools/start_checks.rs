//! The services' own start checks: a fatal setting stops the start, named; weak (test)
//! keys are a warning.

use super::stderr;
use crate::common::{Backend, SandgateProcess, run_sandgate, serve_args};

/// A setting that makes the service unusable stops its start, named; the same run of
/// `serve` with only weak (test) keys starts and warns.
#[tokio::test]
async fn a_service_refuses_to_start_on_a_fatal_setting() {
    let data = tempfile::tempdir().expect("temp dir");
    let data_dir = data.path().display().to_string();
    let output = run_sandgate(
        &["serve", "--listen", "127.0.0.1:0", "--data-dir", &data_dir],
        &[
            (
                "RUNTIME_URL_PATTERN",
                "https://{runtime_id}-runtime.sandgate.example.com",
            ),
            ("RUNTIME_BASE_URL", "runtime.sandgate.example.com"),
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(1));
    let log = stderr(&output);
    assert!(log.contains("refusing to start"), "{log}");
    assert!(
        log.contains(
            "RUNTIME_DISABLE_SSL: is true (the default), but RUNTIME_URL_PATTERN is https"
        ),
        "{log}"
    );
    assert!(!log.contains("listening on"), "{log}");

    let output = run_sandgate(
        &[
            "runtime-api",
            "--grpc-listen",
            "127.0.0.1:0",
            "--data-dir",
            &data_dir,
        ],
        &[
            ("SANDBOX_DRIVER", "kubernetes"),
            ("JWT_SECRET", "too-short"),
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(1));
    let log = stderr(&output);
    assert!(log.contains("STORAGE_CLASS: not set"), "{log}");
    assert!(log.contains("JWT_SECRET: is 9 bytes"), "{log}");
    assert!(!log.contains("too-short"), "{log}");
}

#[tokio::test]
async fn weak_test_keys_are_a_warning_at_start_not_a_refusal() {
    let backend = Backend::embedded();
    let server = SandgateProcess::spawn(&serve_args(&backend), &[]).await;
    let log = server.log();
    assert!(log.contains("setting=DEFAULT_API_KEY"), "{log}");
    assert!(log.contains("is 20 bytes"), "{log}");
    assert!(!log.contains(crate::common::RUNTIME_KEY), "{log}");
}
