//! When an upstream call is tried again, and after how long. Only answers that say
//! "not now" (429, 500, 502, 503) and connections that failed before any answer are
//! retried: nothing has reached the client yet, so a retry is invisible to it. Timeouts,
//! the gateway's own or an upstream's 504, are not: each retry would add a whole timeout
//! to the client's wait.

use std::time::Duration;

use http::HeaderMap;

use crate::forward::{Answer, UpstreamError};

/// The pause before the first retry; each further one doubles it.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest computed pause.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// The longest `Retry-After` waited out: an upstream asking for more is answered at once,
/// its status passed on, rather than holding the client or retrying too early.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(5);

/// How many times a failed upstream call is tried again, and on what.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    /// At most [`MAX_RETRIES`](crate::config::MAX_RETRIES), whatever is asked: one client
    /// call causes at most that many upstream calls, plus one.
    pub retries: u32,
    /// Answered statuses (429, 500, 502, 503) are retried, not only failed connections.
    pub statuses: bool,
}

/// Why an attempt failed in a way worth another: the metrics' `reason` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryReason {
    /// An answered status (429, 500, 502, 503).
    Status(u16),
    /// No answer: the connection was refused or reset before any response.
    Connection,
}

impl RetryReason {
    /// The label value: the status, or `connect`.
    pub fn label(self) -> String {
        match self {
            Self::Status(status) => status.to_string(),
            Self::Connection => "connect".to_owned(),
        }
    }
}

/// An answered status that is retried: rate limited, or a transient server failure.
fn retryable_status(status: u16) -> bool {
    matches!(status, 429 | 500 | 502 | 503)
}

/// Why the outcome of one attempt (its answer's head, or the failure to get one) is
/// worth another, and when the upstream asked to be called again; `None` when it is
/// final: a success, any other status, a timeout.
pub fn transient(
    sent: &Result<Answer, UpstreamError>,
    statuses: bool,
) -> Option<(RetryReason, RetryAfter)> {
    match sent {
        Ok(response) if statuses && retryable_status(response.status().as_u16()) => Some((
            RetryReason::Status(response.status().as_u16()),
            RetryAfter::of(response.headers()),
        )),
        // The connection failed before any response (refused, reset, closed), never a
        // timeout.
        Err(err) if err.is_transient() => Some((RetryReason::Connection, RetryAfter::Unspecified)),
        _ => None,
    }
}

/// What an upstream's `Retry-After` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryAfter {
    /// No header, or one not in seconds (an HTTP date): the computed backoff applies.
    Unspecified,
    /// Wait this long (at most [`MAX_RETRY_AFTER`]).
    Wait(Duration),
    /// Longer than [`MAX_RETRY_AFTER`]: not retried.
    TooLong,
}

impl RetryAfter {
    pub fn of(headers: &HeaderMap) -> Self {
        let seconds = headers
            .get(http::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.trim().parse::<u64>().ok());
        match seconds.map(Duration::from_secs) {
            None => Self::Unspecified,
            Some(wait) if wait <= MAX_RETRY_AFTER => Self::Wait(wait),
            Some(_) => Self::TooLong,
        }
    }
}

impl RetryPolicy {
    /// The pause before retrying after failed attempt `attempt` (0 for the first), or
    /// `None` when it is not retried.
    pub fn pause(self, attempt: u32, retry_after: RetryAfter) -> Option<Duration> {
        if attempt >= self.retries.min(crate::config::MAX_RETRIES) {
            return None;
        }
        match retry_after {
            RetryAfter::Wait(wait) => Some(wait),
            RetryAfter::TooLong => None,
            RetryAfter::Unspecified => Some(jittered(backoff(attempt))),
        }
    }
}

/// 100 ms × 2^attempt, at most [`MAX_BACKOFF`].
fn backoff(attempt: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(2u32.saturating_pow(attempt))
        .min(MAX_BACKOFF)
}

/// Between half of `backoff` and all of it, at random: replicas that failed together do
/// not retry together.
fn jittered(backoff: Duration) -> Duration {
    let millis = backoff.as_millis() as u64;
    Duration::from_millis(rand::random_range(millis / 2..=millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry_after(value: &str) -> RetryAfter {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_str(value).expect("a header value"),
        );
        RetryAfter::of(&headers)
    }

    #[test]
    fn only_transient_statuses_are_retried() {
        for status in [429, 500, 502, 503] {
            assert!(retryable_status(status), "{status}");
        }
        for status in [200, 400, 401, 404, 408, 413, 422, 501, 504] {
            assert!(!retryable_status(status), "{status}");
        }
    }

    #[test]
    fn the_backoff_doubles_with_jitter_and_is_capped() {
        let policy = RetryPolicy {
            retries: 10,
            statuses: true,
        };
        for attempt in 0..crate::config::MAX_RETRIES {
            let full = backoff(attempt);
            let pause = policy
                .pause(attempt, RetryAfter::Unspecified)
                .expect("retried");
            assert!(pause >= full / 2 && pause <= full, "{attempt}: {pause:?}");
        }
        assert_eq!(backoff(0), Duration::from_millis(100));
        assert_eq!(backoff(1), Duration::from_millis(200));
        assert_eq!(backoff(9), MAX_BACKOFF);
        // However many are asked for, at most MAX_RETRIES.
        assert!(
            policy
                .pause(crate::config::MAX_RETRIES, RetryAfter::Unspecified)
                .is_none()
        );
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn retries_are_bounded() {
        let policy = RetryPolicy {
            retries: 2,
            statuses: true,
        };
        assert!(policy.pause(0, RetryAfter::Unspecified).is_some());
        assert!(policy.pause(1, RetryAfter::Unspecified).is_some());
        assert!(policy.pause(2, RetryAfter::Unspecified).is_none());
        let never = RetryPolicy {
            retries: 0,
            statuses: true,
        };
        assert!(never.pause(0, RetryAfter::Wait(Duration::ZERO)).is_none());
    }

    #[test]
    fn retry_after_in_seconds_is_honoured_up_to_the_cap() {
        assert_eq!(retry_after("0"), RetryAfter::Wait(Duration::ZERO));
        assert_eq!(retry_after(" 2 "), RetryAfter::Wait(Duration::from_secs(2)));
        assert_eq!(retry_after("5"), RetryAfter::Wait(MAX_RETRY_AFTER));
        assert_eq!(retry_after("6"), RetryAfter::TooLong);
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            RetryAfter::Unspecified
        );
        assert_eq!(retry_after("-1"), RetryAfter::Unspecified);
        assert_eq!(RetryAfter::of(&HeaderMap::new()), RetryAfter::Unspecified);
        let policy = RetryPolicy {
            retries: 2,
            statuses: true,
        };
        assert_eq!(
            policy.pause(0, RetryAfter::Wait(Duration::from_secs(1))),
            Some(Duration::from_secs(1))
        );
        assert_eq!(policy.pause(0, RetryAfter::TooLong), None);
    }
}
