//! What the HTTP server knows of one connection's use (a request in flight, since when it
//! waits, whether a request's headers have begun), and the verdict of its deadlines: the
//! bookkeeping behind the limits described in the server's module.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Limits;

pub(super) const NOTHING_PENDING: u64 = u64::MAX;

/// What the server knows of one connection's use, in milliseconds since it was accepted.
pub(super) struct Activity {
    pub(super) epoch: Instant,
    in_flight: AtomicUsize,
    /// When its last request ended (or it was accepted).
    pub(super) idle_since: AtomicU64,
    /// When the first byte of a request not yet begun arrived, or `NOTHING_PENDING`.
    pub(super) pending_since: AtomicU64,
    pub(super) evicted: CancellationToken,
}

pub(super) enum Verdict {
    Keep,
    HeaderTimeout,
    Idle,
}

impl Activity {
    pub(super) fn new() -> Activity {
        Activity {
            epoch: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            pending_since: AtomicU64::new(NOTHING_PENDING),
            evicted: CancellationToken::new(),
        }
    }

    pub(super) fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(NOTHING_PENDING - 1)
    }

    pub(super) fn is_busy(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }

    /// Since when it has waited without a request in flight.
    pub(super) fn waiting_since(&self) -> Instant {
        let since = self
            .idle_since
            .load(Ordering::Acquire)
            .min(self.pending_since.load(Ordering::Acquire));
        self.epoch + Duration::from_millis(since)
    }

    /// The deadline that applies now; none while a request is in flight.
    pub(super) fn next_check(&self, limits: &Limits) -> Option<u64> {
        if self.is_busy() {
            return None;
        }
        let pending = self.pending_since.load(Ordering::Acquire);
        if pending != NOTHING_PENDING {
            return Some(pending.saturating_add(millis(limits.header_read_timeout)));
        }
        let idle = self.idle_since.load(Ordering::Acquire);
        Some(idle.saturating_add(millis(limits.idle_timeout)))
    }

    pub(super) fn verdict(&self, limits: &Limits, now: u64) -> Verdict {
        if self.is_busy() {
            return Verdict::Keep;
        }
        let pending = self.pending_since.load(Ordering::Acquire);
        if pending != NOTHING_PENDING {
            let waited = Duration::from_millis(now.saturating_sub(pending));
            return if waited >= limits.header_read_timeout {
                Verdict::HeaderTimeout
            } else {
                Verdict::Keep
            };
        }
        let idle =
            Duration::from_millis(now.saturating_sub(self.idle_since.load(Ordering::Acquire)));
        if idle >= limits.idle_timeout {
            Verdict::Idle
        } else {
            Verdict::Keep
        }
    }
}

pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(NOTHING_PENDING - 1)
}

/// A request in flight on a connection, from its headers to its answer's last byte.
pub(super) struct Busy(Arc<Activity>);

impl Busy {
    pub(super) fn begin(activity: &Arc<Activity>) -> Busy {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        activity
            .pending_since
            .store(NOTHING_PENDING, Ordering::Release);
        Busy(activity.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let activity = &self.0;
        if activity.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            activity.idle_since.store(activity.now(), Ordering::Release);
            activity
                .pending_since
                .store(NOTHING_PENDING, Ordering::Release);
        }
    }
}

/// A connection's stream, noting when the bytes of a new request start to arrive.
pub(super) struct Watched {
    pub(super) io: TcpStream,
    pub(super) activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if buf.filled().len() > before && !this.activity.is_busy() {
            // The first byte of a request sets the header deadline; later ones leave it.
            let _first = this.activity.pending_since.compare_exchange(
                NOTHING_PENDING,
                this.activity.now(),
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            max_connections: 4,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_idle_timeout: Duration::from_secs(30),
        }
    }

    #[test]
    fn a_connection_without_a_request_is_closed_after_the_idle_timeout() {
        let activity = Activity::new();
        activity.idle_since.store(1_000, Ordering::Release);
        assert!(matches!(activity.verdict(&limits(), 60_999), Verdict::Keep));
        assert!(matches!(activity.verdict(&limits(), 61_000), Verdict::Idle));
        assert_eq!(activity.next_check(&limits()), Some(61_000));
    }

    #[test]
    fn headers_begun_must_end_within_the_header_timeout() {
        let activity = Activity::new();
        activity.pending_since.store(5_000, Ordering::Release);
        assert!(matches!(activity.verdict(&limits(), 14_999), Verdict::Keep));
        assert!(matches!(
            activity.verdict(&limits(), 15_000),
            Verdict::HeaderTimeout
        ));
        assert_eq!(activity.next_check(&limits()), Some(15_000));
    }

    #[test]
    fn a_request_in_flight_is_never_cut_by_the_connection_timeouts() {
        let activity = Activity::new();
        activity.in_flight.store(1, Ordering::Release);
        assert!(matches!(
            activity.verdict(&limits(), 3_600_000),
            Verdict::Keep
        ));
        // Not looked at until it ends.
        assert_eq!(activity.next_check(&limits()), None);
    }
}
