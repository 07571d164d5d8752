//! Which connections a rendered install's NetworkPolicies allow.
//!
//! A connection is a source pod, a destination (a pod, or an address outside the cluster)
//! and a port. It is allowed when the policies selecting the source let it out (or none of
//! them restricts egress) and the policies selecting a destination pod let it in (or none
//! restricts ingress), as Kubernetes defines it: rules are additive, a rule without `to` /
//! `from` takes every peer, a rule without `ports` every port. A pod also has an address,
//! which ipBlocks match (as most network plugins do for pods, and always for Services' and
//! nodes' addresses). `allowed_in` lists, for the rules about one service, every peer and
//! port its pods accept.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{
    Install, Workload, is_test_hook, name_of, namespace_of, port_number, selector_matches,
};

/// A pod (namespace and labels set) or an address outside the cluster (namespace None).
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// For messages: "another sandbox", "the metadata address", ...
    pub what: String,
    pub ip: IpAddr,
    pub namespace: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// Its containers' named ports, which policies may name.
    pub ports: BTreeMap<String, i32>,
}

impl Endpoint {
    pub fn address(what: &str, ip: &str) -> Endpoint {
        Endpoint {
            what: what.to_owned(),
            ip: ip.parse().expect("an IP address"),
            namespace: None,
            labels: BTreeMap::new(),
            ports: BTreeMap::new(),
        }
    }

    pub fn pod(what: &str, ip: &str, namespace: &str, labels: &[(&str, &str)]) -> Endpoint {
        Endpoint {
            namespace: Some(namespace.to_owned()),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Endpoint::address(what, ip)
        }
    }

    /// A pod of a workload of the install, its labels and named ports.
    pub fn of_workload(what: &str, ip: &str, workload: &Workload<'_>) -> Endpoint {
        let ports = workload
            .ports()
            .into_iter()
            .filter_map(|p| Some((p.name.clone()?, p.container_port)));
        Endpoint {
            namespace: Some(workload.namespace().to_owned()),
            labels: workload.labels.clone(),
            ports: ports.collect(),
            ..Endpoint::address(what, ip)
        }
    }
}

/// A rule's ports and peers, of either direction.
type Rule = (
    Option<Vec<NetworkPolicyPort>>,
    Option<Vec<NetworkPolicyPeer>>,
);

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Ingress,
    Egress,
}

fn network(cidr: &str) -> Option<IpNet> {
    cidr.parse::<IpNet>()
        .ok()
        .or_else(|| cidr.parse::<IpAddr>().ok().map(IpNet::from))
}

fn peer_matches(peer: &NetworkPolicyPeer, policy_ns: &str, other: &Endpoint) -> bool {
    if let Some(block) = &peer.ip_block {
        let inside = |cidr: &str| network(cidr).is_some_and(|n| n.contains(&other.ip));
        return inside(&block.cidr) && !block.except.iter().flatten().any(|e| inside(e));
    }
    let Some(namespace) = &other.namespace else {
        return false; // pod and namespace selectors pick pods only
    };
    match &peer.namespace_selector {
        Some(selector) => {
            // The label Kubernetes sets on every namespace; policies select namespaces by it.
            let labels =
                BTreeMap::from([("kubernetes.io/metadata.name".to_owned(), namespace.clone())]);
            if !selector_matches(Some(selector), &labels) {
                return false;
            }
        }
        None if namespace != policy_ns => return false,
        None => {}
    }
    peer.pod_selector.is_none() || selector_matches(peer.pod_selector.as_ref(), &other.labels)
}

fn port_matches(
    ports: Option<&Vec<NetworkPolicyPort>>,
    port: i32,
    protocol: &str,
    named: &BTreeMap<String, i32>,
) -> bool {
    let Some(ports) = ports.filter(|p| !p.is_empty()) else {
        return true;
    };
    ports.iter().any(|p| {
        if p.protocol.as_deref().unwrap_or("TCP") != protocol {
            return false;
        }
        match &p.port {
            None => true,
            // A named port is the destination pod's; one it does not have matches nothing.
            Some(IntOrString::String(name)) => named.get(name) == Some(&port),
            Some(IntOrString::Int(start)) => *start <= port && port <= p.end_port.unwrap_or(*start),
        }
    })
}

/// The policies of a namespace that stay: `helm test`'s are deleted once the test passed.
fn policies<'a>(
    install: &'a Install,
    namespace: &'a str,
) -> impl Iterator<Item = &'a NetworkPolicy> {
    install
        .network_policies
        .iter()
        .filter(move |p| namespace_of(&p.metadata) == namespace && !is_test_hook(&p.metadata))
}

/// Whether the policies of `pod` let `other` through in `direction` (Ingress: other
/// connects to pod's port; Egress: pod connects to other's port).
fn allowed_by(
    install: &Install,
    direction: Direction,
    pod: &Endpoint,
    other: &Endpoint,
    port: i32,
    protocol: &str,
) -> bool {
    let namespace = pod.namespace.as_deref().unwrap_or_default();
    let mut selected = false;
    for policy in policies(install, namespace) {
        let spec = policy.spec.clone().unwrap_or_default();
        let has_egress = spec.egress.is_some();
        let types = spec.policy_types.clone().unwrap_or_else(|| {
            let mut types = vec!["Ingress".to_owned()];
            if has_egress {
                types.push("Egress".to_owned());
            }
            types
        });
        let name = if direction == Direction::Ingress {
            "Ingress"
        } else {
            "Egress"
        };
        if !types.iter().any(|t| t == name)
            || !selector_matches(
                Some(&spec.pod_selector.clone().unwrap_or_default()),
                &pod.labels,
            )
        {
            continue;
        }
        selected = true;
        let rules: Vec<Rule> = match direction {
            Direction::Ingress => spec
                .ingress
                .into_iter()
                .flatten()
                .map(|r| (r.ports, r.from))
                .collect(),
            Direction::Egress => spec
                .egress
                .into_iter()
                .flatten()
                .map(|r| (r.ports, r.to))
                .collect(),
        };
        let destination = if direction == Direction::Ingress {
            pod
        } else {
            other
        };
        for (ports, peers) in rules {
            if !port_matches(ports.as_ref(), port, protocol, &destination.ports) {
                continue;
            }
            match peers.filter(|p| !p.is_empty()) {
                None => return true,
                Some(peers) if peers.iter().any(|p| peer_matches(p, namespace, other)) => {
                    return true;
                }
                Some(_) => {}
            }
        }
    }
    !selected
}

/// Whether the source's own policies let the connection out, whatever the destination's
/// say: isolation must not rest on the other end's policy alone.
pub fn leaves(
    install: &Install,
    source: &Endpoint,
    destination: &Endpoint,
    port: i32,
    protocol: &str,
) -> bool {
    allowed_by(
        install,
        Direction::Egress,
        source,
        destination,
        port,
        protocol,
    )
}

/// Whether the destination pod's own policies let the connection in.
pub fn admits(install: &Install, destination: &Endpoint, source: &Endpoint, port: i32) -> bool {
    allowed_by(
        install,
        Direction::Ingress,
        destination,
        source,
        port,
        "TCP",
    )
}

/// Whether the policies let `source` (a pod) open a connection to `destination`.
pub fn connects(
    install: &Install,
    source: &Endpoint,
    destination: &Endpoint,
    port: i32,
    protocol: &str,
) -> bool {
    leaves(install, source, destination, port, protocol)
        && (destination.namespace.is_none()
            || allowed_by(
                install,
                Direction::Ingress,
                destination,
                source,
                port,
                protocol,
            ))
}

/// Whether a policy of `namespace` selects every pod for `direction` and allows nothing.
pub fn default_denies(install: &Install, namespace: &str, direction: Direction) -> bool {
    install
        .network_policies
        .iter()
        .filter(|p| namespace_of(&p.metadata) == namespace)
        .any(|p| {
            let spec = p.spec.clone().unwrap_or_default();
            let name = if direction == Direction::Ingress {
                "Ingress"
            } else {
                "Egress"
            };
            let everyone = spec.pod_selector == Some(LabelSelector::default());
            let rules = match direction {
                Direction::Ingress => spec.ingress.is_some_and(|r| !r.is_empty()),
                Direction::Egress => spec.egress.is_some_and(|r| !r.is_empty()),
            };
            everyone && spec.policy_types.iter().flatten().any(|t| t == name) && !rules
        })
}

/// Who a rule lets in, as the policy rules about a service compare it.
#[derive(Clone, Debug, PartialEq)]
pub enum Peer {
    Anyone,
    /// Pods of the policy's namespace, by selector.
    Pods(LabelSelector),
    /// Namespaces named explicitly (by kubernetes.io/metadata.name).
    Namespaces(BTreeSet<String>),
    IpBlock(String),
    /// A namespace selector by other labels: no name to judge it by.
    Unknown(String),
}

/// A port a rule opens: a number, every port, or a name the pods do not declare.
#[derive(Clone, Debug, PartialEq)]
pub enum Port {
    Number(i32),
    Every,
    Unknown(String),
}

impl Port {
    pub fn covers(&self, port: i32) -> bool {
        matches!(self, Port::Every) || *self == Port::Number(port)
    }
}

/// The explicit namespace names a namespaceSelector picks, or None when it picks by anything
/// but kubernetes.io/metadata.name (or picks every namespace).
fn namespace_names(selector: &LabelSelector) -> Option<BTreeSet<String>> {
    const KEY: &str = "kubernetes.io/metadata.name";
    let mut names: Option<BTreeSet<String>> = None;
    let mut narrow = |set: BTreeSet<String>| {
        names = Some(match names.take() {
            None => set,
            Some(old) => old.intersection(&set).cloned().collect(),
        });
    };
    for (key, value) in selector.match_labels.iter().flatten() {
        if key != KEY {
            return None;
        }
        narrow(BTreeSet::from([value.clone()]));
    }
    for e in selector.match_expressions.iter().flatten() {
        if e.key != KEY || e.operator != "In" {
            return None;
        }
        narrow(e.values.iter().flatten().cloned().collect());
    }
    names
}

/// Every (peer, port) the ingress policies let reach the workload's pods; None when no
/// policy selects the pods (then anyone may connect).
pub fn allowed_in(install: &Install, workload: &Workload<'_>) -> Option<Vec<(Peer, Port)>> {
    let ports = workload.ports();
    let mut selected = false;
    let mut allowed = vec![];
    for policy in policies(install, workload.namespace()) {
        let spec = policy.spec.clone().unwrap_or_default();
        let types = spec
            .policy_types
            .clone()
            .unwrap_or_else(|| vec!["Ingress".to_owned()]);
        if !types.iter().any(|t| t == "Ingress")
            || !selector_matches(
                Some(&spec.pod_selector.clone().unwrap_or_default()),
                workload.labels,
            )
        {
            continue;
        }
        selected = true;
        for rule in spec.ingress.into_iter().flatten() {
            let mut opened: Vec<Port> = rule
                .ports
                .iter()
                .flatten()
                .map(|p| match &p.port {
                    None => Port::Every,
                    Some(port) => match port_number(port, &ports) {
                        Some(n) => Port::Number(n),
                        None => Port::Unknown(format!("{port:?}")),
                    },
                })
                .collect();
            if opened.is_empty() {
                opened.push(Port::Every);
            }
            let from = rule.from.unwrap_or_default();
            let peers: Vec<Peer> = if from.is_empty() {
                vec![Peer::Anyone]
            } else {
                from.iter()
                    .filter_map(|f| {
                        if let Some(block) = &f.ip_block {
                            Some(Peer::IpBlock(block.cidr.clone()))
                        } else if let Some(selector) = &f.namespace_selector {
                            Some(namespace_names(selector).map_or_else(
                                || Peer::Unknown(format!("namespaceSelector {selector:?}")),
                                Peer::Namespaces,
                            ))
                        } else {
                            f.pod_selector.clone().map(Peer::Pods)
                        }
                    })
                    .collect()
            };
            for peer in &peers {
                allowed.extend(opened.iter().map(|port| (peer.clone(), port.clone())));
            }
        }
    }
    selected.then_some(allowed)
}

/// Names of the workloads of `namespace` whose pods a same-namespace pod selector picks.
pub fn selected_workloads(
    install: &Install,
    selector: &LabelSelector,
    namespace: &str,
) -> BTreeSet<String> {
    install
        .workloads()
        .iter()
        .filter(|w| w.namespace() == namespace && selector_matches(Some(selector), w.labels))
        .map(|w| name_of(w.meta).to_owned())
        .collect()
}

pub fn describe(install: &Install, peer: &Peer, namespace: &str) -> String {
    match peer {
        Peer::Pods(selector) => {
            let names: Vec<String> = selected_workloads(install, selector, namespace)
                .into_iter()
                .collect();
            format!(
                "pods of {}",
                if names.is_empty() {
                    "nothing".to_owned()
                } else {
                    names.join(", ")
                }
            )
        }
        Peer::Namespaces(names) => format!(
            "namespace {}",
            names.iter().cloned().collect::<Vec<_>>().join(", ")
        ),
        Peer::IpBlock(cidr) => format!("ipBlock {cidr}"),
        Peer::Anyone => "anyone".to_owned(),
        Peer::Unknown(detail) => detail.clone(),
    }
}
