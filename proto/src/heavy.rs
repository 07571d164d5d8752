//! Work on a request body that may take long: a large body's is done on the blocking
//! pool, not on the thread serving the request. A serving thread serves every request of
//! its connections from start to end (`sandgate::http_server`), so one tenant's
//! multi-megabyte body judged there would hold every other connection of that thread.

use crate::error::ErrorDetail;

/// Bodies from this size on are parsed and validated off the serving thread.
pub const OFF_THREAD_BYTES: usize = 256 * 1024;

/// Parses or validates a body of `size` bytes: at once when it is small; when it is large
/// (a multi-megabyte body takes tens of milliseconds), on the blocking pool, so that
/// the other connections served by the caller's thread are not held meanwhile (measured
/// with `scripts/bench-cpu-neighbour`).
pub async fn judged<T: Send + 'static>(
    size: usize,
    judge: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ErrorDetail> {
    if size < OFF_THREAD_BYTES {
        return Ok(judge());
    }
    match tokio::task::spawn_blocking(judge).await {
        Ok(judged) => Ok(judged),
        Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
        Err(_) => Err(ErrorDetail::new(
            crate::error::ErrorCode::Unavailable,
            "the server is stopping",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A large body is judged on another thread than the caller's (whose other
    /// connections it would hold), a small one at once on the caller's.
    #[tokio::test]
    async fn only_large_bodies_leave_the_callers_thread() {
        let here = std::thread::current().id();
        let small = judged(OFF_THREAD_BYTES - 1, || std::thread::current().id()).await;
        assert_eq!(small.unwrap(), here);
        let large = judged(OFF_THREAD_BYTES, || std::thread::current().id()).await;
        assert_ne!(large.unwrap(), here);
    }

    /// A judge that panics off the thread panics the caller, as it would at once.
    #[tokio::test]
    #[should_panic(expected = "judged")]
    async fn a_panic_off_the_thread_reaches_the_caller() {
        drop(judged(OFF_THREAD_BYTES, || panic!("judged")).await);
    }
}
