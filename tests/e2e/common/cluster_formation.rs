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
/// speaks to. A node drops a handshake that has not completed within its node timeout (2 s
/// here) and never tries it again: on a loaded machine the callers meet again while they
/// wait for the cluster to form (CI once saw four clusters started at once never form).
pub async fn meet(connection: &mut MultiplexedConnection, port: u16, bus: u16) {
    meet_again(connection, port, bus)
        .await
        .expect("CLUSTER MEET");
}

/// Meets again each of `others` (their ports and buses) that the node `connection` speaks
/// to neither knows nor is shaking hands with: a handshake node counts among the known, so
/// meeting a known node again would hold the count above the cluster's size while it
/// lasts. A reply that times out is "not yet": the caller polls again.
pub async fn meet_the_unknown(connection: &mut MultiplexedConnection, others: &[(u16, u16)]) {
    let nodes: redis::RedisResult<String> = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(connection)
        .await;
    let Ok(nodes) = nodes else {
        return;
    };
    for &(port, bus) in others {
        if !nodes.contains(&format!("127.0.0.1:{port}@{bus}")) {
            let _ = meet_again(connection, port, bus).await;
        }
    }
}

async fn meet_again(
    connection: &mut MultiplexedConnection,
    port: u16,
    bus: u16,
) -> redis::RedisResult<()> {
    redis::cmd("CLUSTER")
        .arg("MEET")
        .arg("127.0.0.1")
        .arg(port)
        .arg(bus)
        .query_async::<()>(connection)
        .await
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

/// For a failure's message, what each node (named by its port) sees of the cluster: its
/// state and the nodes it knows (`CLUSTER INFO`'s first lines and `CLUSTER NODES`), or
/// why it did not answer.
pub async fn what_they_see<'a>(
    nodes: impl IntoIterator<Item = (u16, &'a mut MultiplexedConnection)>,
) -> String {
    let mut seen = String::new();
    for (port, connection) in nodes {
        seen.push_str(&format!("node {port}:\n"));
        for command in ["INFO", "NODES"] {
            let answer: redis::RedisResult<String> = redis::cmd("CLUSTER")
                .arg(command)
                .query_async(&mut *connection)
                .await;
            match answer {
                Ok(answer) if command == "INFO" => {
                    seen.extend(answer.lines().take(7).map(|line| format!("{line}\n")));
                }
                Ok(answer) => seen.push_str(&answer),
                Err(err) => seen.push_str(&format!("CLUSTER {command}: {err}\n")),
            }
        }
    }
    seen
}
