//! The sandbox namespace's network and model-gw's egress (issue 40): connections probed
//! against the rendered policies (network.rs). The addresses stand for what a cluster has:
//! pods and Services in the private ranges, the metadata service on link-local, the
//! Kubernetes API behind a Service address and on a node.

use k8s_openapi::api::networking::v1::NetworkPolicyEgressRule;

use super::network::{Direction, Endpoint, admits, connects, default_denies, leaves};
use super::*;

fn metadata_addresses() -> [Endpoint; 2] {
    [
        Endpoint::address("the cloud metadata address", "169.254.169.254"),
        Endpoint::address("the cloud metadata address (IPv6)", "fd00:ec2::254"),
    ]
}

fn kube_api() -> [(Endpoint, i32); 2] {
    [
        (
            Endpoint::address("the Kubernetes API's Service address", "10.96.0.1"),
            443,
        ),
        (
            Endpoint::pod(
                "the Kubernetes API server",
                "172.20.0.5",
                "kube-system",
                &[("component", "kube-apiserver")],
            ),
            6443,
        ),
    ]
}

fn internet() -> Endpoint {
    Endpoint::address("an internet address", "93.184.216.34")
}

/// A sandbox pod as runtime-api's driver labels it.
fn sandbox_pod(runtime_id: &str, ip: &str) -> Endpoint {
    let labels = [
        ("app.kubernetes.io/managed-by", "sandgate"),
        ("sandgate.dev/runtime-id", runtime_id),
        ("sandgate.dev/pool", "cold"),
    ];
    let mut pod = Endpoint::pod(
        &format!("sandbox pod {runtime_id} ({SANDBOX_NS})"),
        ip,
        SANDBOX_NS,
        &labels,
    );
    pod.ports.insert("http".into(), 8000);
    pod
}

fn service_pod(install: &Install, service: &str, ip: &str) -> Option<Endpoint> {
    let workload = Workload::of_deployment(install.deployment(service)?);
    Some(Endpoint::of_workload(
        &format!("pods of {}", workload.reference()),
        ip,
        &workload,
    ))
}

fn dns_pod(install: &Install) -> Endpoint {
    let namespace = install.values["dnsNamespace"]
        .as_str()
        .expect("sandgate.dnsNamespace");
    Endpoint::pod(
        "the cluster DNS",
        "10.244.9.9",
        namespace,
        &[("k8s-app", "kube-dns")],
    )
}

type Probe = (Endpoint, i32, &'static str);

fn forbidden_and_needed(
    install: &Install,
    source: &Endpoint,
    forbidden: &[Probe],
    needed: &[Probe],
) -> Vec<String> {
    let mut out = vec![];
    for (destination, port, protocol) in forbidden {
        if leaves(install, source, destination, *port, protocol) {
            out.push(format!(
                "{} reaches {} ({}) on {port}/{protocol}",
                source.what, destination.what, destination.ip
            ));
        }
    }
    for (destination, port, protocol) in needed {
        if !connects(install, source, destination, *port, protocol) {
            out.push(format!(
                "{} does not reach {} on {port}/{protocol}",
                source.what, destination.what
            ));
        }
    }
    out
}

fn egress_rules_mut<'a>(
    install: &'a mut Install,
    name: &str,
    ns: &str,
) -> &'a mut Vec<NetworkPolicyEgressRule> {
    let policy = find_mut(&mut install.network_policies, name, ns);
    policy
        .spec
        .as_mut()
        .and_then(|s| s.egress.as_mut())
        .expect("egress rules")
}

/// Takes `cidr` out of every ipBlock's except.
fn unblock(install: &mut Install, cidr: &str) {
    for policy in &mut install.network_policies {
        let rules = policy
            .spec
            .iter_mut()
            .flat_map(|s| s.egress.iter_mut().flatten());
        for peer in rules.flat_map(|r| r.to.iter_mut().flatten()) {
            if let Some(except) = peer.ip_block.as_mut().and_then(|b| b.except.as_mut()) {
                except.retain(|e| e != cidr);
            }
        }
    }
}

fn sandbox_default_deny(install: &Install) -> Vec<String> {
    [
        (Direction::Ingress, "ingress"),
        (Direction::Egress, "egress"),
    ]
    .into_iter()
    .filter(|(direction, _)| !default_denies(install, SANDBOX_NS, *direction))
    .map(|(_, what)| {
        format!("no NetworkPolicy in {SANDBOX_NS} selects every pod and allows no {what}")
    })
    .collect()
}

#[test]
fn sandbox_namespace_denies_by_default() {
    verify(&Check {
        title: "network policy: the sandbox namespace denies ingress and egress by default",
        run: sandbox_default_deny,
        profiles: BOTH,
        mutations: &[("the sandbox namespace's default deny is gone", |i| {
            remove(&mut i.network_policies, "sandbox-default-deny", SANDBOX_NS)
        })],
    });
}

fn sandbox_egress(install: &Install) -> Vec<String> {
    let me = sandbox_pod("a", "10.244.1.10");
    let mut forbidden: Vec<Probe> = vec![(sandbox_pod("b", "10.244.1.11"), 8000, "TCP")];
    for m in metadata_addresses() {
        forbidden.extend([80, 443].map(|port| (m.clone(), port, "TCP")));
    }
    forbidden.extend(kube_api().map(|(api, port)| (api, port, "TCP")));
    for (n, service) in ["runtime-api", "model-gw"].into_iter().enumerate() {
        if let Some(pod) = service_pod(install, service, &format!("10.244.2.{}", n + 1)) {
            forbidden.extend(pod.ports.values().map(|port| (pod.clone(), *port, "TCP")));
        }
    }
    forbidden.push((
        Endpoint::address("a node's kubelet", "10.0.0.7"),
        10250,
        "TCP",
    ));
    let mut needed: Vec<Probe> = vec![(dns_pod(install), 53, "UDP"), (dns_pod(install), 53, "TCP")];
    let Some(edge) = service_pod(install, "edge", "10.244.3.3") else {
        return vec!["no Deployment edge".into()];
    };
    let edge_port = edge.ports.get("http").copied().unwrap_or(8080);
    needed.push((edge, edge_port, "TCP"));
    if install.values["sandboxEgress"]["internet"]
        .as_bool()
        .expect("sandgate.sandboxEgress.internet")
    {
        needed.push((internet(), 443, "TCP"));
    } else {
        forbidden.push((internet(), 443, "TCP"));
    }
    forbidden_and_needed(install, &me, &forbidden, &needed)
}

#[test]
fn sandboxes_reach_dns_the_edge_and_the_internet_only() {
    verify(&Check {
        title: "network policy: a sandbox reaches DNS, the edge and the internet; never another sandbox, a metadata address, the Kubernetes API or Sandgate's other services",
        run: sandbox_egress,
        profiles: BOTH,
        mutations: &[
            ("sandboxes reach every pod of their namespace", |i| {
                let rule = serde_json::from_value(serde_json::json!({"to": [{"podSelector": {}}]}))
                    .expect("a rule");
                egress_rules_mut(i, "sandboxes", SANDBOX_NS).push(rule);
            }),
            ("the link-local range is no longer blocked", |i| {
                unblock(i, "169.254.0.0/16")
            }),
            ("10.0.0.0/8 is no longer blocked", |i| {
                unblock(i, "10.0.0.0/8")
            }),
            ("the edge rule is gone", |i| {
                egress_rules_mut(i, "sandboxes", SANDBOX_NS).remove(1);
            }),
        ],
    });
}

fn sandbox_ingress(install: &Install) -> Vec<String> {
    let me = sandbox_pod("a", "10.244.1.10");
    let controller_namespace = install.values["ingressControllerNamespace"]
        .as_str()
        .expect("sandgate.ingressControllerNamespace");
    let controller = Endpoint::pod(
        "the ingress controller",
        "10.244.5.5",
        controller_namespace,
        &[("app.kubernetes.io/name", "ingress-nginx")],
    );
    let mut allowed = vec![controller];
    allowed.extend(service_pod(install, "runtime-api", "10.244.2.1"));
    let mut refused = vec![
        sandbox_pod("b", "10.244.1.11"),
        Endpoint::pod(
            "a pod of another namespace",
            "10.244.6.6",
            "default",
            &[("app", "x")],
        ),
    ];
    for (n, service) in ["edge", "model-gw"].into_iter().enumerate() {
        refused.extend(service_pod(
            install,
            service,
            &format!("10.244.4.{}", n + 1),
        ));
    }
    let mut out = vec![];
    for source in &allowed {
        if !connects(install, source, &me, 8000, "TCP") {
            out.push(format!("{} cannot reach a sandbox", source.what));
        }
    }
    for source in &refused {
        if admits(install, &me, source, 8000) {
            out.push(format!("{} reaches a sandbox", source.what));
        }
    }
    out
}

#[test]
fn sandboxes_accept_the_ingress_controller_and_runtime_api_only() {
    verify(&Check {
        title: "network policy: a sandbox accepts the ingress controller and runtime-api only",
        run: sandbox_ingress,
        profiles: BOTH,
        mutations: &[
            ("sandboxes accept every pod of the app namespace", |i| {
                let policy = find_mut(&mut i.network_policies, "sandboxes", SANDBOX_NS);
                let rule = &mut policy
                    .spec
                    .as_mut()
                    .and_then(|s| s.ingress.as_mut())
                    .expect("ingress")[0];
                rule.from.as_mut().expect("from")[1].pod_selector = None;
            }),
            ("sandboxes accept each other", |i| {
                let policy = find_mut(&mut i.network_policies, "sandboxes", SANDBOX_NS);
                let rule = &mut policy
                    .spec
                    .as_mut()
                    .and_then(|s| s.ingress.as_mut())
                    .expect("ingress")[0];
                let peer =
                    serde_json::from_value(serde_json::json!({"podSelector": {}})).expect("a peer");
                rule.from.get_or_insert_with(Vec::new).push(peer);
            }),
        ],
    });
}

fn model_gw_egress(install: &Install) -> Vec<String> {
    let Some(me) = service_pod(install, "model-gw", "10.244.7.7") else {
        return vec![]; // no gateway in this install
    };
    let mut forbidden: Vec<Probe> = vec![];
    for m in metadata_addresses() {
        forbidden.extend([80, 443].map(|port| (m.clone(), port, "TCP")));
    }
    forbidden.extend(kube_api().map(|(api, port)| (api, port, "TCP")));
    forbidden.push((sandbox_pod("a", "10.244.1.10"), 8000, "TCP"));
    forbidden.push((
        Endpoint::address("an internal service", "10.1.2.3"),
        443,
        "TCP",
    ));
    forbidden.push((internet(), 22, "TCP"));
    if let Some(runtime_api) = service_pod(install, "runtime-api", "10.244.2.1") {
        let grpc = runtime_api.ports.get("grpc").copied().unwrap_or(50051);
        forbidden.push((runtime_api, grpc, "TCP"));
    }
    let mut needed: Vec<Probe> = vec![(dns_pod(install), 53, "UDP")];
    for port in install.values["modelGwEgress"]["ports"]
        .as_array()
        .expect("sandgate.modelGwEgress.ports")
    {
        needed.push((
            internet(),
            i32::try_from(port.as_i64().expect("a port")).expect("a port"),
            "TCP",
        ));
    }
    if let Some(redis) = install.workloads().into_iter().find(is_redis) {
        needed.push((
            Endpoint::of_workload("the bundled Redis", "10.244.8.8", &redis),
            6379,
            "TCP",
        ));
    }
    let store = &install.values["storeEgress"];
    for cidr in store["cidrs"].as_array().into_iter().flatten() {
        let network: ipnet::IpNet = cidr.as_str().and_then(|c| c.parse().ok()).expect("a CIDR");
        let first = network.hosts().next().expect("a host address");
        let port = i32::try_from(store["port"].as_i64().expect("sandgate.storeEgress.port"))
            .expect("a port");
        needed.push((
            Endpoint::address("the external store", &first.to_string()),
            port,
            "TCP",
        ));
    }
    forbidden_and_needed(install, &me, &forbidden, &needed)
}

#[test]
fn model_gw_reaches_dns_the_store_and_its_providers_only() {
    verify(&Check {
        title: "network policy: model-gw reaches DNS, the store and its providers' ports only",
        run: model_gw_egress,
        profiles: BOTH,
        mutations: &[
            ("model-gw's egress policy is gone", |i| {
                remove(&mut i.network_policies, "model-gw-egress", APP_NS)
            }),
            ("model-gw's provider rule takes every port", |i| {
                let rules = egress_rules_mut(i, "model-gw-egress", APP_NS);
                rules.last_mut().expect("a rule").ports = None;
            }),
            ("the link-local range is no longer blocked", |i| {
                unblock(i, "169.254.0.0/16")
            }),
        ],
    });
}
