//! What the services take from the world around them: the time, behind a trait so that
//! expiry (admin tokens, login challenges, sandbox leases) is tested without waiting, and
//! random tokens (challenges, salts, runtime ids, lease holders). Admin login and the
//! sandboxes both draw on them, so they belong to neither.

/// Milliseconds since the epoch; injectable so that expiry is tested without waiting.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> i64;
}

/// The system clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as i64)
    }
}

/// A random token of `bytes` random bytes, hex encoded.
pub fn random_hex(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    rand::fill(buffer.as_mut_slice());
    hex::encode(buffer)
}
