//! A server's serving threads: a single-threaded runtime per core, on which each
//! connection is served from its first byte to its last.
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
//! large body) goes to the blocking pool (`sandgate_proto::heavy::judged`). A server has
//! threads of its own, which end with it: a server is never held by another's
//! connections (a process serving its metrics apart, or tests running many servers in
//! one process, where a shared set of threads made one test's slow request another's).
//! Servers that come and go while the process lives on (process sandboxes' doors) share
//! one set instead, which never ends (`Threads::Shared`).

use std::num::NonZero;
use std::sync::OnceLock;

use tokio_util::task::LocalPoolHandle;

/// New serving threads for a server: one per core this process may run on. They end
/// once the pool is dropped (with the server) and what they run is done or dropped.
pub(super) fn pool() -> LocalPoolHandle {
    let threads = std::thread::available_parallelism().map_or(1, NonZero::get);
    LocalPoolHandle::new(threads)
}

/// The process's shared serving threads, started with the first server that asks for
/// them and never ended (see `Threads::Shared`).
pub(super) fn shared() -> LocalPoolHandle {
    static SHARED: OnceLock<LocalPoolHandle> = OnceLock::new();
    SHARED.get_or_init(pool).clone()
}
