//! The process's serving threads: a single-threaded runtime per core, shared by every
//! server of the process, on which each connection is served from its first byte to its
//! last.
//!
//! On one multi-threaded runtime a call hopped between its workers at each turn (the
//! client's connection, the upstream's, the answer's body), each hop a wake-up of a
//! parked thread: measured, 15–18 % of a gateway call's CPU (BENCHMARKS.md,
//! `gateway_nginx`). Here a connection's task, the tasks its calls spawn and the
//! connections they open (the model gateway's upstream clients and the Redis store's
//! connection are per thread) share a thread, as nginx's workers keep theirs. A new
//! connection goes to the thread serving the fewest.
//!
//! What holds a thread holds its connections: work of many milliseconds (validating a
//! large body) goes to the blocking pool (`sandgate_proto::heavy::judged`).

use std::num::NonZero;
use std::sync::OnceLock;

use tokio_util::task::LocalPoolHandle;

static POOL: OnceLock<LocalPoolHandle> = OnceLock::new();

/// The serving threads, started with the first server: one per core this process may
/// run on.
pub(super) fn pool() -> &'static LocalPoolHandle {
    POOL.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(1, NonZero::get);
        LocalPoolHandle::new(threads)
    })
}
