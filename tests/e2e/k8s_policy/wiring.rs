//! How the objects fit together: Ingresses served with the wildcard certificate and
//! routed to Services that exist (never to /metrics), Services that select pods and their
//! ports, the preflight hook checking each service with its own environment, and `helm
//! test`'s pods and their NetworkPolicy.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;

fn ingresses(install: &Install) -> Vec<String> {
    let mut out = vec![];
    for name in ["app", "runtime-api"] {
        if find(&install.ingresses, name, APP_NS).is_none() {
            out.push(format!("no Ingress {name}"));
        }
    }
    for ingress in &install.ingresses {
        let at = reference(ingress);
        let spec = ingress.spec.clone().unwrap_or_default();
        let tls_hosts: BTreeSet<String> = spec
            .tls
            .iter()
            .flatten()
            .filter(|t| t.secret_name.as_deref() == Some(TLS_SECRET))
            .flat_map(|t| t.hosts.clone().unwrap_or_default())
            .collect();
        if spec.ingress_class_name.is_none_or(|c| c.is_empty()) {
            out.push(format!("{at}: no ingressClassName"));
        }
        for rule in spec.rules.iter().flatten() {
            let host = rule.host.clone().unwrap_or_default();
            if !tls_hosts.contains(&host) {
                out.push(format!(
                    "{at}: host {host:?} is not served with TLS secret {TLS_SECRET}"
                ));
            }
            for path in rule.http.iter().flat_map(|h| &h.paths) {
                let Some(backend) = &path.backend.service else {
                    continue;
                };
                let Some(service) = find(
                    &install.services,
                    &backend.name,
                    namespace_of(&ingress.metadata),
                ) else {
                    out.push(format!(
                        "{at}: backend Service {:?} does not exist",
                        backend.name
                    ));
                    continue;
                };
                let port = backend.port.clone().unwrap_or_default();
                let mut ports = service.spec.iter().flat_map(|s| s.ports.iter().flatten());
                let served = ports.any(|p| {
                    (port.name.is_some() && port.name == p.name) || port.number == Some(p.port)
                });
                if !served {
                    out.push(format!(
                        "{at}: backend port {port:?} is not a port of {}",
                        reference(service)
                    ));
                }
            }
        }
    }
    out
}

#[test]
fn ingresses_serve_tls_to_existing_backends() {
    verify(&Check {
        title: "ingresses: app and runtime-api hosts, TLS from sandgate-wildcard-tls, backends exist",
        run: ingresses,
        profiles: BOTH,
        mutations: &[
            ("the runtime-api Ingress has no TLS", |i| {
                find_mut(&mut i.ingresses, "runtime-api", APP_NS)
                    .spec
                    .as_mut()
                    .expect("spec")
                    .tls = None
            }),
            ("the app Ingress routes to a missing Service", |i| {
                let app = find_mut(&mut i.ingresses, "app", APP_NS);
                let rule = &mut app
                    .spec
                    .as_mut()
                    .and_then(|s| s.rules.as_mut())
                    .expect("rules")[0];
                let backend = rule.http.as_mut().expect("http").paths[0]
                    .backend
                    .service
                    .as_mut()
                    .expect("a service");
                backend.name = "web".into();
            }),
        ],
    });
}

/// Whether an Ingress path of that type routes the request path `target`.
fn routes(path: &str, path_type: &str, target: &str) -> bool {
    if path_type == "Exact" {
        return path == target;
    }
    let prefix = path.trim_end_matches('/');
    target == prefix || target.starts_with(&format!("{prefix}/"))
}

fn metrics_private(install: &Install) -> Vec<String> {
    let mut out = vec![];
    for ingress in &install.ingresses {
        for rule in ingress.spec.iter().flat_map(|s| s.rules.iter().flatten()) {
            for p in rule.http.iter().flat_map(|h| &h.paths) {
                let path = p.path.as_deref().unwrap_or("/");
                if routes(path, &p.path_type, "/metrics") {
                    let host = rule.host.as_deref().unwrap_or_default();
                    out.push(format!(
                        "{}: {host}{path} ({}) routes /metrics",
                        reference(ingress),
                        p.path_type
                    ));
                }
            }
        }
    }
    out
}

#[test]
fn no_ingress_exposes_metrics() {
    verify(&Check {
        title: "no Ingress exposes /metrics (scraped in-cluster only)",
        run: metrics_private,
        profiles: BOTH,
        mutations: &[("the app Ingress routes every path", |i| {
            let app = find_mut(&mut i.ingresses, "app", APP_NS);
            let http = app
                .spec
                .as_mut()
                .and_then(|s| s.rules.as_mut())
                .expect("rules")[0]
                .http
                .as_mut()
                .expect("http");
            let mut every = http.paths[0].clone();
            every.path = Some("/".into());
            every.path_type = "Prefix".into();
            http.paths.push(every);
        })],
    });
}

fn services_match(install: &Install) -> Vec<String> {
    let mut out = vec![];
    let workloads = install.workloads();
    for service in &install.services {
        let spec = service.spec.clone().unwrap_or_default();
        let selector = spec.selector.clone().filter(|s| !s.is_empty());
        let pods: Vec<&Workload<'_>> = workloads
            .iter()
            .filter(|w| w.namespace() == namespace_of(&service.metadata))
            .filter(|w| {
                selector
                    .as_ref()
                    .is_some_and(|s| s.iter().all(|(k, v)| w.labels.get(k) == Some(v)))
            })
            .collect();
        if pods.is_empty() {
            out.push(format!("{} selects no pods", reference(service)));
            continue;
        }
        let ports: Vec<_> = pods.iter().flat_map(|w| w.ports()).collect();
        for p in spec.ports.iter().flatten() {
            let target = p.target_port.clone().unwrap_or(IntOrString::Int(p.port));
            let declared = match &target {
                IntOrString::Int(n) => ports.iter().any(|c| c.container_port == *n),
                named => port_number(named, &ports).is_some(),
            };
            if !declared {
                out.push(format!(
                    "{}: targetPort {target:?} is not a port of its pods",
                    reference(service)
                ));
            }
        }
    }
    out
}

#[test]
fn services_target_their_pods_ports() {
    verify(&Check {
        title: "every Service selects pods and targets ports they declare",
        run: services_match,
        profiles: BOTH,
        mutations: &[("the model-gw Service targets a port named grcp", |i| {
            let service = find_mut(&mut i.services, "model-gw", APP_NS);
            service
                .spec
                .as_mut()
                .and_then(|s| s.ports.as_mut())
                .expect("ports")[0]
                .target_port = Some(IntOrString::String("grcp".into()));
        })],
    });
}

fn preflight(install: &Install) -> Vec<String> {
    let mut out = vec![];
    let mut checked = BTreeSet::new();
    for job in install
        .jobs
        .iter()
        .filter(|j| namespace_of(&j.metadata) == APP_NS)
    {
        let at = reference(job);
        let workloads = install.workloads();
        let workload = workloads
            .iter()
            .find(|w| std::ptr::eq(w.meta, &job.metadata))
            .expect("the Job's workload");
        if !serde_json::to_string(workload.spec)
            .expect("JSON")
            .contains("check-config")
        {
            continue;
        }
        let containers: Vec<_> = workload.containers().collect();
        let phases: BTreeSet<&str> = hook(&job.metadata).unwrap_or_default().split(',').collect();
        if phases != BTreeSet::from(["pre-install", "pre-upgrade"]) {
            out.push(format!(
                "{at} is hook {:?}, want pre-install,pre-upgrade",
                hook(&job.metadata)
            ));
        }
        let spec = job.spec.clone().unwrap_or_default();
        if spec.backoff_limit != Some(0) || spec.active_deadline_seconds.is_none_or(|s| s == 0) {
            out.push(format!("{at}: want backoffLimit 0 and an activeDeadlineSeconds (a pod that cannot start must fail the install)"));
        }
        for c in containers {
            let args = c.args.clone().unwrap_or_default();
            if args.len() < 3 || args[..2] != ["check-config", "--service"] {
                out.push(format!("{at} container {}: runs {args:?}", c.name));
                continue;
            }
            let service = args[2].as_str();
            checked.insert(service.to_owned());
            let Some(served) = install.service_container(service) else {
                out.push(format!("{at} checks {service}, which is not deployed"));
                continue;
            };
            // What the check adds: the nodes' capacity, which the service never reads.
            let extra = ["NODE_EPHEMERAL_STORAGE", "SANDBOX_NODES"];
            let env: Vec<_> = c
                .env
                .iter()
                .flatten()
                .filter(|e| !extra.contains(&e.name.as_str()))
                .cloned()
                .collect();
            if env != served.env.clone().unwrap_or_default() || c.env_from != served.env_from {
                out.push(format!(
                    "{at} container {}: its environment is not {service}'s",
                    c.name
                ));
            }
        }
    }
    let deployed: BTreeSet<String> = SERVICES
        .iter()
        .filter(|s| install.deployment(s).is_some())
        .map(|s| s.to_string())
        .collect();
    if checked != deployed {
        out.push(format!(
            "the preflight checks {checked:?}, want {deployed:?}"
        ));
    }
    out
}

#[test]
fn preflight_checks_each_service_before_install() {
    verify(&Check {
        title: "the preflight: pre-install/pre-upgrade Jobs run `sandgate check-config` per service with the service's own environment",
        run: preflight,
        profiles: BOTH,
        mutations: &[
            ("the preflight is a post-install hook", |i| {
                let job = find_mut(&mut i.jobs, "preflight", APP_NS);
                job.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert("helm.sh/hook".into(), "post-install".into());
            }),
            ("the runtime-api check lacks STORAGE_CLASS", |i| {
                job_container_mut(i, "preflight")
                    .env
                    .get_or_insert_with(Vec::new)
                    .retain(|e| e.name != "STORAGE_CLASS");
            }),
            ("the preflight retries", |i| {
                find_mut(&mut i.jobs, "preflight", APP_NS)
                    .spec
                    .as_mut()
                    .expect("spec")
                    .backoff_limit = Some(3)
            }),
        ],
    });
}

fn helm_test(install: &Install) -> Vec<String> {
    let mut out = vec![];
    let tests: Vec<_> = install
        .pods
        .iter()
        .filter(|p| namespace_of(&p.metadata) == APP_NS && is_test_hook(&p.metadata))
        .collect();
    let mut targets = BTreeSet::new();
    for pod in &tests {
        for c in pod.spec.iter().flat_map(|s| &s.containers) {
            let args = c.args.clone().unwrap_or_default();
            if args.first().map(String::as_str) == Some("health-check") && args.len() >= 3 {
                let address = args[2]
                    .split_once("//")
                    .map_or(args[2].as_str(), |(_, rest)| rest);
                targets.insert(address.split(':').next().unwrap_or_default().to_owned());
            }
        }
    }
    let deployed: BTreeSet<String> = SERVICES
        .iter()
        .filter(|s| install.deployment(s).is_some())
        .map(|s| s.to_string())
        .collect();
    if targets != deployed {
        out.push(format!("helm test checks {targets:?}, want {deployed:?}"));
    }
    let test_labels: Vec<_> = tests.iter().map(|p| labels(Some(&p.metadata))).collect();
    let serving: Vec<_> = install
        .workloads()
        .into_iter()
        .filter(|w| !is_test_hook(w.meta))
        .collect();
    for policy in install
        .network_policies
        .iter()
        .filter(|p| namespace_of(&p.metadata) == APP_NS)
    {
        let at = reference(policy);
        let rules = policy.spec.iter().flat_map(|s| s.ingress.iter().flatten());
        let peers: Vec<Option<LabelSelector>> = rules
            .clone()
            .flat_map(|r| r.from.iter().flatten().map(|f| f.pod_selector.clone()))
            .collect();
        let lets_tests_in = peers
            .iter()
            .flatten()
            .any(|s| test_labels.iter().any(|l| selector_matches(Some(s), l)));
        if !lets_tests_in {
            continue;
        }
        if !is_test_hook(&policy.metadata) {
            out.push(format!(
                "{at} lets helm test pods in, and is not a test hook: it would stay after the test"
            ));
        } else if !annotation(&policy.metadata, "helm.sh/hook-delete-policy")
            .unwrap_or_default()
            .contains("hook-succeeded")
        {
            out.push(format!(
                "{at} stays after a passed test (no hook-succeeded delete policy)"
            ));
        }
        for rule in rules {
            let from = rule
                .from
                .clone()
                .filter(|f| !f.is_empty())
                .unwrap_or_else(|| vec![Default::default()]);
            for peer in from {
                let admits_more = match &peer.pod_selector {
                    None => true,
                    Some(s) => {
                        test_labels.is_empty()
                            || serving.iter().any(|w| selector_matches(Some(s), w.labels))
                    }
                };
                if admits_more {
                    out.push(format!(
                        "{at} admits more than the helm test pods: {peer:?}"
                    ));
                }
            }
        }
    }
    out
}

#[test]
fn helm_test_checks_each_service() {
    verify(&Check {
        title: "helm test: a pod per service runs `sandgate health-check` on it; the test's NetworkPolicy lets in those pods only, as a test hook",
        run: helm_test,
        profiles: BOTH,
        mutations: &[
            ("the test policy admits every pod", |i| {
                let policy = find_mut(&mut i.network_policies, "helm-test", APP_NS);
                let rule = &mut policy
                    .spec
                    .as_mut()
                    .and_then(|s| s.ingress.as_mut())
                    .expect("ingress")[0];
                rule.from = Some(vec![
                    serde_json::from_value(serde_json::json!({"podSelector": {}})).expect("a peer"),
                ]);
            }),
            ("the test policy is a plain object (always there)", |i| {
                find_mut(&mut i.network_policies, "helm-test", APP_NS)
                    .metadata
                    .annotations = None
            }),
            ("model-gw's test pod is gone", |i| {
                remove(&mut i.pods, "test-model-gw", APP_NS)
            }),
            ("the test policy stays after the test", |i| {
                let policy = find_mut(&mut i.network_policies, "helm-test", APP_NS);
                let annotations = policy
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default);
                annotations.insert(
                    "helm.sh/hook-delete-policy".into(),
                    "before-hook-creation".into(),
                );
            }),
        ],
    });
}
