//! Two helpers every layer of the gateway uses and none owns: the wall clock in the
//! store's unit, and an error status made of a code and a message.

use std::time::{SystemTime, UNIX_EPOCH};

use sandgate_proto::error::{ErrorCode, ErrorDetail};
use tonic::Status;

/// An error answer: `code`, with `message` for the client.
pub(crate) fn error(code: ErrorCode, message: impl Into<String>) -> Status {
    ErrorDetail::new(code, message).into_status()
}

/// Now, in milliseconds since the Unix epoch (the store's times).
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

/// An embedded store in a directory of its own, kept while the directory is: for tests.
#[cfg(test)]
pub(crate) async fn embedded_store() -> (tempfile::TempDir, sandgate_store::Store) {
    let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
    let backend = sandgate_store::Backend::Embedded {
        data_dir: dir.path().to_owned(),
    };
    let store = sandgate_store::Store::open(&backend)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    (dir, store)
}
