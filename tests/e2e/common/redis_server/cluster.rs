//! A Redis Cluster of servers on free ports: masters with their slots, replicas, and
//! the wait until every node sees the cluster formed.

use std::sync::Arc;

use super::{RedisServer, Tls};
use crate::common::cluster_formation;

impl RedisServer {
    /// A Redis Cluster of `masters` masters (no replicas) on free ports, its 16384 slots
    /// split evenly; returns once every node sees the cluster as ok. The first master
    /// stands for the cluster: its URL is the cluster's.
    pub async fn start_cluster(masters: u16) -> Self {
        Self::start_cluster_with_replicas(masters, 0).await
    }

    /// As [`Self::start_cluster`], every node speaking TLS only (clients, the cluster bus),
    /// with certificates of one CA: its URL is `rediss+cluster://…`.
    pub async fn start_tls_cluster(masters: u16) -> Self {
        Self::form_cluster(masters, 0, Some(Arc::new(Tls::issue(false)))).await
    }

    /// As [`Self::start_cluster`], with `replicas` replicas of each master, synchronised
    /// before it returns (a failover needs them).
    pub async fn start_cluster_with_replicas(masters: u16, replicas: u16) -> Self {
        Self::form_cluster(masters, replicas, None).await
    }

    async fn form_cluster(masters: u16, replicas: u16, tls: Option<Arc<Tls>>) -> Self {
        let mut nodes = Vec::new();
        for _ in 0..masters {
            nodes.push(Self::start_node(false, None, tls.clone(), true).await);
        }
        let mut connections = Vec::new();
        for (index, node) in (0_u16..).zip(&nodes) {
            let mut connection = node.connection().await;
            cluster_formation::assign_slots(&mut connection, index, masters).await;
            connections.push(connection);
        }
        let others: Vec<(u16, u16)> = nodes[1..]
            .iter()
            .map(|node| (node.port, node.cluster_port.expect("a cluster node")))
            .collect();
        for &(port, bus) in &others {
            cluster_formation::meet(&mut connections[0], port, bus).await;
        }
        let mut replica_servers = Vec::new();
        let mut replica_connections = Vec::new();
        for (index, master) in nodes.iter().enumerate() {
            let master_id: String = redis::cmd("CLUSTER")
                .arg("MYID")
                .query_async(&mut connections[index])
                .await
                .expect("CLUSTER MYID");
            for _ in 0..replicas {
                let replica = Self::start_node(false, None, tls.clone(), true).await;
                let mut connection = replica.connection().await;
                let bus = master.cluster_port.expect("a cluster node");
                // Polled: REPLICATE needs the master known to the replica (met again each
                // time, as a handshake may have timed out).
                for attempt in 0.. {
                    if attempt % 20 == 0 {
                        cluster_formation::meet_the_unknown(&mut connection, &[(master.port, bus)])
                            .await;
                    }
                    let replicated: redis::RedisResult<()> = redis::cmd("CLUSTER")
                        .arg("REPLICATE")
                        .arg(&master_id)
                        .query_async(&mut connection)
                        .await;
                    match replicated {
                        Ok(()) => break,
                        Err(err) if attempt >= 200 => panic!("CLUSTER REPLICATE: {err}"),
                        Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
                    }
                }
                replica_servers.push(replica);
                replica_connections.push(connection);
            }
        }
        let total = masters * (1 + replicas);
        // Polled: the nodes learn each other and the slot map over their bus, and the
        // replicas synchronise. A deadline, not a count of polls: on a machine the whole
        // suite loads, a poll's replies take longer (a fresh-clone CI run once gave up
        // after 400 polls).
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(90);
        let mut met = tokio::time::Instant::now();
        while tokio::time::Instant::now() < deadline {
            if met.elapsed() > std::time::Duration::from_secs(1) {
                cluster_formation::meet_the_unknown(&mut connections[0], &others).await;
                met = tokio::time::Instant::now();
            }
            let mut ready = true;
            for connection in connections.iter_mut().chain(&mut replica_connections) {
                if !cluster_formation::sees_cluster_formed(connection, total).await {
                    ready = false;
                    break;
                }
            }
            // As for CLUSTER INFO, a reply that times out is "not yet".
            for connection in &mut replica_connections {
                let info: Result<String, _> = redis::cmd("INFO")
                    .arg("replication")
                    .query_async(connection)
                    .await;
                ready &= info.is_ok_and(|info| info.contains("master_link_status:up"));
            }
            if ready {
                let mut first = nodes.remove(0);
                first.others = nodes;
                first.cluster_replicas = replica_servers;
                return first;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let seen = cluster_formation::what_they_see(
            nodes.iter().map(|node| node.port).zip(&mut connections),
        )
        .await;
        panic!("the cluster did not form in 90 s; what its masters see:\n{seen}");
    }
}
