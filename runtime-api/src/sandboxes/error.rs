//! Why a lifecycle operation of a sandbox failed, and what the caller is told of it.

use sandgate_proto::error::{ErrorCode, ErrorDetail};

use super::driver::{DriverError, Refusal};
use sandgate_conversation::LocItem;
use sandgate_store::StoreError;

/// Why a lifecycle operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the sandbox platform failed: {0}")]
    Driver(#[from] DriverError),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("the sandbox changed under too many concurrent calls; retry")]
    Contention,
    #[error("{}: {}", .0.field, .0.message)]
    Refused(Refusal),
    /// A quota of the runtime API key (`quota.rs`).
    #[error("{0}")]
    Quota(String),
}

impl From<SandboxError> for ErrorDetail {
    fn from(err: SandboxError) -> Self {
        match err {
            SandboxError::Store(err) => err.into(),
            SandboxError::Driver(err) => {
                tracing::warn!(error = %err, "sandbox platform call failed");
                Self::new(
                    ErrorCode::BadGateway,
                    format!("The sandbox platform failed: {err}"),
                )
            }
            SandboxError::NotFound(detail) => Self::new(ErrorCode::NotFound, detail),
            SandboxError::Conflict(detail) => Self::new(ErrorCode::Conflict, detail),
            SandboxError::Contention => Self::new(ErrorCode::Unavailable, err.to_string()),
            SandboxError::Quota(detail) => Self::new(ErrorCode::RateLimited, detail),
            SandboxError::Refused(refusal) => {
                crate::validation::failure(vec![sandgate_conversation::ValidationError {
                    error_type: "value_error",
                    loc: vec![LocItem::Key(refusal.field.to_owned())],
                    msg: format!("Value error, {}", refusal.message),
                    input: refusal.input,
                    ctx: None,
                }])
            }
        }
    }
}
