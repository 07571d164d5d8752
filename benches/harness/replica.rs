//! A replica of a benchmark's `redis-server`, for the benchmarks that measure writes
//! acknowledged by replicas (`--redis-min-replicas-ack`).

use tokio::process::Child;

/// A replica of the `redis-server` at `primary` (a URL of [`super::harness::redis`]),
/// returned once it has synchronised.
pub async fn redis_replica(primary: &str) -> Child {
    let primary_port = primary
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .expect("a port")
        .to_owned();
    let mut replica = super::harness::redis_command(super::harness::free_port());
    // Loaded straight from the primary's stream: no copy on disk.
    replica.args([
        "--repl-diskless-load",
        "on-empty-db",
        "--replicaof",
        "127.0.0.1",
    ]);
    replica.arg(&primary_port);
    let (child, _) =
        super::harness::spawn_listening(replica, "MASTER <-> REPLICA sync: Finished with success")
            .await;
    child
}
