//! Forming a Redis Cluster out of started nodes, shared by the tests' `RedisServer` and the
//! benchmarks' cluster (`benches/harness/cluster.rs` includes this file): the slots split
//! evenly over the masters, the nodes introduced, their view of the cluster polled.

use redis::aio::MultiplexedConnection;

/// The slots of a Redis Cluster.
const SLOTS: u16 = 16384;

/// Gives master `index` of `masters` its even share of the slots (the last takes the
/// remainder).
pub async fn assign_slots(connection: &mut MultiplexedConnection, index: u16, masters: u16) {
    let first = SLOTS / masters * index;
    let last = if index + 1 == masters {
        SLOTS - 1
    } else {
        SLOTS / masters * (index + 1) - 1
    };
    redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(first)
        .arg(last)
        .query_async::<()>(connection)
        .await
        .expect("CLUSTER ADDSLOTSRANGE");
}

/// Introduces the node listening on `port` (cluster bus on `bus`) to the one `connection`
/// speaks to.
pub async fn meet(connection: &mut MultiplexedConnection, port: u16, bus: u16) {
    redis::cmd("CLUSTER")
        .arg("MEET")
        .arg("127.0.0.1")
        .arg(port)
        .arg(bus)
        .query_async::<()>(connection)
        .await
        .expect("CLUSTER MEET");
}

/// Whether the node sees the cluster as ok with `total` nodes known. A reply that times
/// out (a node busy forming, on a loaded machine) is "not yet": the caller polls again.
pub async fn sees_cluster_formed(connection: &mut MultiplexedConnection, total: u16) -> bool {
    let info: redis::RedisResult<String> = redis::cmd("CLUSTER")
        .arg("INFO")
        .query_async(connection)
        .await;
    let known = format!("cluster_known_nodes:{total}");
    info.is_ok_and(|info| info.contains("cluster_state:ok") && info.contains(&known))
}
