//! A Redis Cluster of the benchmark's own: masters on free ports, the slots split evenly,
//! for the benchmarks that compare a cluster with one Redis (`BENCH_BACKENDS=cluster`).

use tokio::process::Child;

/// The slots of a Redis Cluster.
const SLOTS: u16 = 16384;

/// A cluster of `masters` masters (no replicas), returned once every node sees it as ok;
/// its processes and its `redis+cluster://` URL.
pub async fn redis_cluster(masters: u16) -> (Vec<Child>, String) {
    let mut children = Vec::new();
    let mut nodes = Vec::new();
    for _ in 0..masters {
        let (port, bus) = (super::harness::free_port(), super::harness::free_port());
        let mut node = super::harness::redis_command(port);
        node.args([
            "--cluster-enabled",
            "yes",
            "--cluster-port",
            &bus.to_string(),
        ])
        .args(["--cluster-node-timeout", "5000"]);
        let (child, _) = super::harness::spawn_listening(node, "Ready to accept connections").await;
        children.push(child);
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("url");
        let connection = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect to a cluster node");
        nodes.push((port, bus, connection));
    }
    for (index, (_, _, connection)) in (0_u16..).zip(&mut nodes) {
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
    let others: Vec<(u16, u16)> = nodes[1..]
        .iter()
        .map(|(port, bus, _)| (*port, *bus))
        .collect();
    for (port, bus) in others {
        redis::cmd("CLUSTER")
            .arg("MEET")
            .arg("127.0.0.1")
            .arg(port)
            .arg(bus)
            .query_async::<()>(&mut nodes[0].2)
            .await
            .expect("CLUSTER MEET");
    }
    // Polled: the nodes learn each other and the slot map over their bus.
    let known = format!("cluster_known_nodes:{masters}");
    loop {
        let mut ready = true;
        for (_, _, connection) in &mut nodes {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query_async(connection)
                .await
                .expect("CLUSTER INFO");
            ready &= info.contains("cluster_state:ok") && info.contains(&known);
        }
        if ready {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let seeds: Vec<String> = nodes
        .iter()
        .map(|(port, _, _)| format!("127.0.0.1:{port}"))
        .collect();
    (children, format!("redis+cluster://{}", seeds.join(",")))
}
