//! The app namespace's NetworkPolicies: ingress denied by default, each service open to
//! exactly its callers (the ingress controller for the edge, the edge for the gRPC
//! services, the monitoring namespace for metrics), and dev's bundled Redis to the
//! services alone.

use std::collections::BTreeSet;

use super::network::{Peer, Port, allowed_in, describe, selected_workloads};
use super::*;

fn value<'a>(install: &'a Install, key: &str) -> &'a str {
    install.values[key]
        .as_str()
        .unwrap_or_else(|| panic!("sandgate.{key} in the values"))
}

fn policy_rules_mut<'a>(
    install: &'a mut Install,
    name: &str,
) -> &'a mut Vec<k8s_openapi::api::networking::v1::NetworkPolicyIngressRule> {
    let policy = find_mut(&mut install.network_policies, name, APP_NS);
    policy
        .spec
        .as_mut()
        .and_then(|s| s.ingress.as_mut())
        .expect("ingress rules")
}

fn pods_peer() -> k8s_openapi::api::networking::v1::NetworkPolicyPeer {
    serde_json::from_value(serde_json::json!({"podSelector": {}})).expect("a peer")
}

fn default_deny(install: &Install) -> Vec<String> {
    let denies = install
        .network_policies
        .iter()
        .filter(|p| namespace_of(&p.metadata) == APP_NS)
        .any(|p| {
            let spec = p.spec.clone().unwrap_or_default();
            spec.pod_selector == Some(Default::default())
                && spec.policy_types.iter().flatten().any(|t| t == "Ingress")
                && spec.ingress.is_none_or(|r| r.is_empty())
        });
    if denies {
        vec![]
    } else {
        vec![format!(
            "no NetworkPolicy in {APP_NS} selects every pod and allows no ingress"
        )]
    }
}

#[test]
fn app_namespace_denies_ingress_by_default() {
    verify(&Check {
        title: "network policy: ingress is denied by default in the app namespace",
        run: default_deny,
        profiles: BOTH,
        mutations: &[("the default-deny policy is gone", |i| {
            remove(&mut i.network_policies, "default-deny-ingress", APP_NS)
        })],
    });
}

/// The pods of `service` accept, on port `served`, only the peers `serving` accepts; on
/// its metrics port only the monitoring namespace; nothing else. Each of `wanted` may
/// connect to `served`.
fn service_policy_problems(
    install: &Install,
    service: &str,
    served: i32,
    serving: &dyn Fn(&Peer) -> bool,
    serving_what: &str,
    wanted: &[Peer],
) -> Vec<String> {
    let Some(deployment) = install.deployment(service) else {
        return vec![format!("no Deployment {service}")];
    };
    let at = reference(deployment);
    let Some(allowed) = allowed_in(install, &Workload::of_deployment(deployment)) else {
        return vec![format!(
            "{at}: no NetworkPolicy selects its pods: anyone may connect"
        )];
    };
    let container = install.service_container(service);
    let metrics =
        listen_port(install.service_env(service, "SANDGATE_METRICS_LISTEN")).unwrap_or(served);
    let monitoring_namespace = value(install, "monitoringNamespace");
    let monitoring = Peer::Namespaces(BTreeSet::from([monitoring_namespace.to_owned()]));
    let mut out = vec![];
    for (peer, port) in &allowed {
        let ports: Vec<i32> = match port {
            Port::Every => container
                .iter()
                .flat_map(|c| c.ports.iter().flatten())
                .map(|p| p.container_port)
                .collect(),
            Port::Number(n) => vec![*n],
            Port::Unknown(name) => {
                out.push(format!(
                    "{at}: {} may connect to port {name}, which its pods do not declare",
                    describe(install, peer, APP_NS)
                ));
                continue;
            }
        };
        for p in ports {
            let ok = (p == served && serving(peer)) || (p == metrics && *peer == monitoring);
            if !ok {
                let who = describe(install, peer, APP_NS);
                out.push(format!("{at}: {who} may connect to port {p} (want {serving_what} on {served}, {monitoring_namespace} on {metrics})"));
            }
        }
    }
    for peer in wanted {
        if !allowed
            .iter()
            .any(|(p, port)| p == peer && port.covers(served))
        {
            out.push(format!(
                "{at}: {} may not connect to port {served}",
                describe(install, peer, APP_NS)
            ));
        }
    }
    out
}

fn grpc_from_edge(install: &Install) -> Vec<String> {
    let mut out = vec![];
    let edge_only = |peer: &Peer| match peer {
        Peer::Pods(selector) => {
            selected_workloads(install, selector, APP_NS) == BTreeSet::from(["edge".to_owned()])
        }
        _ => false,
    };
    for service in ["runtime-api", "model-gw"] {
        let Some(grpc) = listen_port(install.service_env(service, "SANDGATE_GRPC_LISTEN")) else {
            out.push(format!(
                "Deployment/{service}: SANDGATE_GRPC_LISTEN has no port"
            ));
            continue;
        };
        out.extend(service_policy_problems(
            install,
            service,
            grpc,
            &edge_only,
            "the edge",
            &[],
        ));
        let allowed = install
            .deployment(service)
            .and_then(|d| allowed_in(install, &Workload::of_deployment(d)))
            .unwrap_or_default();
        let edge_in = allowed.iter().any(|(peer, port)| {
            matches!(peer, Peer::Pods(s) if selected_workloads(install, s, APP_NS).contains("edge"))
                && port.covers(grpc)
        });
        if !edge_in {
            out.push(format!(
                "Deployment/{service}: the edge may not connect to port {grpc}"
            ));
        }
    }
    out
}

#[test]
fn grpc_services_accept_the_edge_only() {
    verify(&Check {
        title: "network policy: runtime-api and model-gw accept gRPC from the edge only",
        run: grpc_from_edge,
        profiles: BOTH,
        mutations: &[
            ("runtime-api accepts every pod of the namespace", |i| {
                policy_rules_mut(i, "runtime-api")[0].from = Some(vec![pods_peer()])
            }),
            ("model-gw's gRPC rule has no from (anyone)", |i| {
                policy_rules_mut(i, "model-gw")[0].from = None
            }),
        ],
    });
}

fn edge_from_ingress(install: &Install) -> Vec<String> {
    let Some(port) = listen_port(install.service_env("edge", "SANDGATE_LISTEN")) else {
        return vec!["Deployment/edge: SANDGATE_LISTEN has no port".into()];
    };
    let controller = value(install, "ingressControllerNamespace").to_owned();
    let allowed: BTreeSet<String> = [
        controller.as_str(),
        SANDBOX_NS,
        value(install, "monitoringNamespace"),
    ]
    .map(String::from)
    .into();
    let serving =
        |peer: &Peer| matches!(peer, Peer::Namespaces(names) if names.is_subset(&allowed));
    let wanted = [Peer::Namespaces(BTreeSet::from([controller]))];
    service_policy_problems(
        install,
        "edge",
        port,
        &serving,
        &format!("namespaces {allowed:?}"),
        &wanted,
    )
}

#[test]
fn edge_accepts_the_ingress_controller() {
    verify(&Check {
        title: "network policy: the edge accepts the ingress controller's namespace (and sandboxes, monitoring) only",
        run: edge_from_ingress,
        profiles: BOTH,
        mutations: &[("the edge accepts 0.0.0.0/0", |i| {
            let peer =
                serde_json::from_value(serde_json::json!({"ipBlock": {"cidr": "0.0.0.0/0"}}))
                    .expect("a peer");
            policy_rules_mut(i, "edge")[0]
                .from
                .get_or_insert_with(Vec::new)
                .push(peer);
        })],
    });
}

fn metrics_reachable(install: &Install) -> Vec<String> {
    let mut out = vec![];
    let monitoring = value(install, "monitoringNamespace");
    for service in SERVICES {
        let listen = install
            .service_env(service, "SANDGATE_METRICS_LISTEN")
            .or(install.service_env(service, "SANDGATE_LISTEN"));
        let (Some(deployment), Some(port)) = (install.deployment(service), listen_port(listen))
        else {
            out.push(format!("Deployment/{service}: no metrics port"));
            continue;
        };
        let allowed = allowed_in(install, &Workload::of_deployment(deployment)).unwrap_or_default();
        let reached = allowed.iter().any(|(peer, p)| {
            matches!(peer, Peer::Namespaces(n) if n.contains(monitoring)) && p.covers(port)
        });
        if !reached {
            out.push(format!(
                "{}: namespace {monitoring} may not reach /metrics on port {port}",
                reference(deployment)
            ));
        }
    }
    out
}

#[test]
fn metrics_are_open_to_monitoring() {
    verify(&Check {
        title: "network policy: every service's metrics port is open to the monitoring namespace",
        run: metrics_reachable,
        profiles: BOTH,
        mutations: &[("model-gw's metrics rule is gone", |i| {
            policy_rules_mut(i, "model-gw").truncate(1)
        })],
    });
}

fn redis_policy(install: &Install) -> Vec<String> {
    let mut out = vec![];
    let services: BTreeSet<String> = SERVICES.map(String::from).into();
    for w in install.workloads().into_iter().filter(is_redis) {
        let Some(allowed) = allowed_in(install, &w) else {
            out.push(format!(
                "{}: no NetworkPolicy selects its pods",
                w.reference()
            ));
            continue;
        };
        let mut reached = BTreeSet::new();
        for (peer, _) in &allowed {
            let Peer::Pods(selector) = peer else {
                out.push(format!(
                    "{}: {} may connect",
                    w.reference(),
                    describe(install, peer, w.namespace())
                ));
                continue;
            };
            let names = selected_workloads(install, selector, w.namespace());
            let strangers: Vec<&String> = names.difference(&services).collect();
            if !strangers.is_empty() {
                out.push(format!(
                    "{}: pods of {strangers:?} may connect",
                    w.reference()
                ));
            }
            reached.extend(names);
        }
        if reached != services {
            out.push(format!(
                "{}: {:?} may not connect",
                w.reference(),
                services.difference(&reached).collect::<Vec<_>>()
            ));
        }
    }
    out
}

#[test]
fn bundled_redis_accepts_the_services_only() {
    verify(&Check {
        title: "network policy: the bundled Redis accepts the three services only",
        run: redis_policy,
        profiles: DEV,
        mutations: &[("redis accepts every pod", |i| {
            policy_rules_mut(i, "redis")[0].from = Some(vec![pods_peer()])
        })],
    });
}
