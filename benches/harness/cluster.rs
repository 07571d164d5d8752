//! A Redis Cluster of the benchmark's own: masters on free ports, the slots split evenly,
//! for the benchmarks that compare a cluster with one Redis (`BENCH_BACKENDS=cluster`).

use tokio::process::Child;

#[path = "../../tests/e2e/common/cluster_formation.rs"]
mod cluster_formation;

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
        cluster_formation::assign_slots(connection, index, masters).await;
    }
    let others: Vec<(u16, u16)> = nodes[1..]
        .iter()
        .map(|(port, bus, _)| (*port, *bus))
        .collect();
    for &(port, bus) in &others {
        cluster_formation::meet(&mut nodes[0].2, port, bus).await;
    }
    // Polled: the nodes learn each other and the slot map over their bus.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(90);
    let mut met = tokio::time::Instant::now();
    loop {
        if met.elapsed() > std::time::Duration::from_secs(1) {
            cluster_formation::meet_the_unknown(&mut nodes[0].2, &others).await;
            met = tokio::time::Instant::now();
        }
        let mut ready = true;
        for (_, _, connection) in &mut nodes {
            ready &= cluster_formation::sees_cluster_formed(connection, masters).await;
        }
        if ready {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            let seen = cluster_formation::what_they_see(
                nodes
                    .iter_mut()
                    .map(|(port, _, connection)| (*port, connection)),
            )
            .await;
            panic!("the cluster did not form in 90 s; what its masters see:\n{seen}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let seeds: Vec<String> = nodes
        .iter()
        .map(|(port, _, _)| format!("127.0.0.1:{port}"))
        .collect();
    (children, format!("redis+cluster://{}", seeds.join(",")))
}
