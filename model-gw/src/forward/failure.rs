//! How a forwarded call fails, as the client is told: the upstream's connection or
//! answer failed (502), it was slow (504), its answer was too large, or the call's deadline
//! passed.

use sandgate_proto::error::ErrorCode;

/// The reason the guarded resolver gave for refusing an upstream, if that is why the
/// connection failed.
pub(crate) fn egress_refusal(err: &reqwest::Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(cause) = source {
        let text = cause.to_string();
        if text.contains("added models may not reach") || text.contains("names this machine") {
            return Some(format!("cannot connect to the upstream: {text}"));
        }
        source = cause.source();
    }
    None
}

pub(crate) fn upstream_failure(err: &reqwest::Error) -> (ErrorCode, u16, &'static str) {
    if err.is_timeout() {
        (
            ErrorCode::GatewayTimeout,
            504,
            "the upstream did not answer in time",
        )
    } else if err.is_connect() {
        (ErrorCode::BadGateway, 502, "cannot connect to the upstream")
    } else {
        (ErrorCode::BadGateway, 502, "the upstream's answer failed")
    }
}

/// Why a whole answer's body was not read.
pub(crate) enum BodyFailure {
    Upstream(reqwest::Error),
    /// Larger than the limit (its announced length, or what arrived).
    TooLarge(usize),
    /// The call's deadline passed.
    Deadline,
}

impl BodyFailure {
    pub(crate) fn describe(self) -> (ErrorCode, u16, String) {
        match self {
            Self::Upstream(err) => {
                let (code, status, message) = upstream_failure(&err);
                tracing::warn!(error = %err.without_url(), "upstream body failed");
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
            Self::Deadline => deadline_passed(),
        }
    }
}

pub(crate) fn deadline_passed() -> (ErrorCode, u16, String) {
    tracing::warn!("an upstream call passed its deadline; ended");
    (
        ErrorCode::GatewayTimeout,
        504,
        "the upstream's answer took longer than the call's deadline (--gateway-call-deadline)"
            .to_owned(),
    )
}
