//! How a forwarded call fails, as the client is told: the upstream's connection or
//! answer failed (502), it was slow (504), its answer was too large, or the call's deadline
//! passed.

use sandgate_proto::error::ErrorCode;

use super::connect::{BoxError, Refused};

/// Why an upstream's connection or answer failed.
#[derive(Debug)]
pub(crate) struct UpstreamError {
    kind: Failure,
    source: Option<BoxError>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    /// No connection: refused, unreachable, a resolver's refusal, TLS.
    Connect,
    /// The upstream stayed silent longer than it may (connecting included).
    Timeout,
    /// The call's deadline passed.
    Deadline,
    /// The request could not be sent, or the answer was cut or malformed.
    Broken,
}

impl UpstreamError {
    /// A request that got no answer's head.
    pub(crate) fn of_send(err: hyper_util::client::legacy::Error) -> Self {
        let kind = if timed_out(&err) {
            Failure::Timeout
        } else if err.is_connect() {
            Failure::Connect
        } else {
            Failure::Broken
        };
        Self {
            kind,
            source: Some(err.into()),
        }
    }

    /// An answer's body that failed.
    pub(crate) fn of_body(err: hyper::Error) -> Self {
        Self {
            kind: if timed_out(&err) {
                Failure::Timeout
            } else {
                Failure::Broken
            },
            source: Some(err.into()),
        }
    }

    /// An upstream silent for longer than the read timeout.
    pub(crate) fn silent() -> Self {
        Self {
            kind: Failure::Timeout,
            source: None,
        }
    }

    /// The call's deadline passed while its answer was read.
    pub(crate) fn deadline() -> Self {
        Self {
            kind: Failure::Deadline,
            source: None,
        }
    }

    /// A connection that failed before any answer (refused, reset, closed), never a
    /// timeout: worth another attempt.
    pub(crate) fn is_transient(&self) -> bool {
        matches!(self.kind, Failure::Connect | Failure::Broken)
    }

    /// The reason the guarded resolver gave for refusing an upstream, if that is why the
    /// connection failed.
    pub(crate) fn egress_refusal(&self) -> Option<String> {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = match &self.source {
            Some(source) => Some(source.as_ref()),
            None => None,
        };
        while let Some(error) = cause {
            if let Some(refused) = error.downcast_ref::<Refused>() {
                return Some(format!("cannot connect to the upstream: {refused}"));
            }
            cause = error.source();
        }
        None
    }

    /// The client's status and what it is told.
    pub(crate) fn describe(&self) -> (ErrorCode, u16, &'static str) {
        match self.kind {
            Failure::Timeout => (
                ErrorCode::GatewayTimeout,
                504,
                "the upstream did not answer in time",
            ),
            Failure::Deadline => (ErrorCode::GatewayTimeout, 504, DEADLINE_PASSED),
            Failure::Connect => (ErrorCode::BadGateway, 502, "cannot connect to the upstream"),
            Failure::Broken => (ErrorCode::BadGateway, 502, "the upstream's answer failed"),
        }
    }
}

/// The error and its causes, each after a colon: no URL is in any of them (a base URL may
/// carry credentials in its query).
impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some(source) = &self.source else {
            return f.write_str(match self.kind {
                Failure::Deadline => "the call's deadline passed",
                _ => "no data within the read timeout",
            });
        };
        write!(f, "{source}")?;
        let mut cause = source.source();
        while let Some(error) = cause {
            write!(f, ": {error}")?;
            cause = error.source();
        }
        Ok(())
    }
}

/// Whether a timeout is the cause of `err` (a connection that was not made in time).
fn timed_out(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(err);
    while let Some(error) = cause {
        if error
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        cause = error.source();
    }
    false
}

const DEADLINE_PASSED: &str =
    "the upstream's answer took longer than the call's deadline (--gateway-call-deadline)";

/// Why a whole answer's body was not read.
pub(crate) enum BodyFailure {
    Upstream(UpstreamError),
    /// Larger than the limit (its announced length, or what arrived).
    TooLarge(usize),
}

impl BodyFailure {
    pub(crate) fn describe(self) -> (ErrorCode, u16, String) {
        match self {
            Self::Upstream(err) => {
                let (code, status, message) = err.describe();
                tracing::warn!(error = %err, "upstream body failed");
                (code, status, message.to_owned())
            }
            Self::TooLarge(limit) => {
                tracing::warn!(limit, "an upstream answer is larger than the limit; cut");
                (
                    ErrorCode::BadGateway,
                    502,
                    format!(
                        "the upstream's answer is larger than {limit} bytes (--gateway-max-answer-bytes)"
                    ),
                )
            }
        }
    }
}
