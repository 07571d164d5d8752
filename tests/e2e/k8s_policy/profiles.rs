//! What each example values file is for: prod runs every service twice or more, with
//! disruption budgets that allow a drain, autoscalers that own their replica counts and an
//! external store; dev bundles a Redis, password-protected, behind its own Service.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;

/// The fewest replicas a service runs: its HPA's minimum, or its Deployment's count.
fn min_replicas(install: &Install, service: &str) -> i32 {
    let Some(deployment) = install.deployment(service) else {
        return 0;
    };
    let autoscaler = install
        .autoscalers
        .iter()
        .find(|h| namespace_of(&h.metadata) == APP_NS && h.spec.scale_target_ref.name == service);
    match autoscaler {
        Some(hpa) => hpa.spec.min_replicas.unwrap_or(1),
        None => deployment.spec.replicas.unwrap_or(1),
    }
}

fn prod_replicas(install: &Install) -> Vec<String> {
    SERVICES
        .iter()
        .filter(|s| min_replicas(install, s) < 2)
        .map(|s| {
            format!(
                "Deployment/{s}: at least {} replica(s), want 2 or more",
                min_replicas(install, s)
            )
        })
        .collect()
}

#[test]
fn prod_runs_two_replicas_or_more() {
    verify(&Check {
        title: "edge, runtime-api and model-gw keep at least 2 replicas",
        run: prod_replicas,
        profiles: PROD,
        mutations: &[("runtime-api has 1 replica", |i| {
            find_mut(&mut i.deployments, "runtime-api", APP_NS)
                .spec
                .replicas = Some(1)
        })],
    });
}

fn prod_pdbs(install: &Install) -> Vec<String> {
    let mut out = vec![];
    for service in SERVICES {
        let workload = install.deployment(service).map(Workload::of_deployment);
        let budgets: Vec<_> = install
            .disruption_budgets
            .iter()
            .filter(|p| namespace_of(&p.metadata) == APP_NS)
            .filter(|p| {
                workload.is_some_and(|w| {
                    selector_matches(p.spec.as_ref().and_then(|s| s.selector.as_ref()), w.labels)
                })
            })
            .collect();
        if budgets.is_empty() {
            out.push(format!(
                "Deployment/{service}: no PodDisruptionBudget selects its pods"
            ));
        }
        let replicas = min_replicas(install, service);
        for budget in budgets {
            let spec = budget.spec.clone().unwrap_or_default();
            let blocks = match (&spec.min_available, &spec.max_unavailable) {
                (Some(IntOrString::Int(n)), _) if *n >= replicas => true,
                (Some(IntOrString::String(p)), _) if p == "100%" => true,
                (_, Some(IntOrString::Int(0))) => true,
                (_, Some(IntOrString::String(p))) if p == "0%" || p == "0" => true,
                _ => false,
            };
            if blocks {
                out.push(format!(
                    "{}: blocks every eviction at {replicas} replicas",
                    reference(budget)
                ));
            }
        }
    }
    out
}

#[test]
fn prod_disruption_budgets_allow_a_drain() {
    verify(&Check {
        title: "a PodDisruptionBudget per service that selects its pods and allows a drain",
        run: prod_pdbs,
        profiles: PROD,
        mutations: &[
            ("model-gw's PDB is gone", |i| {
                remove(&mut i.disruption_budgets, "model-gw", APP_NS)
            }),
            ("the edge's PDB wants all replicas up", |i| {
                let budget = find_mut(&mut i.disruption_budgets, "edge", APP_NS)
                    .spec
                    .as_mut()
                    .expect("spec");
                budget.min_available = Some(IntOrString::Int(2));
                budget.max_unavailable = None;
            }),
        ],
    });
}

fn prod_hpas(install: &Install) -> Vec<String> {
    let mut out = vec![];
    for service in ["edge", "model-gw"] {
        // Only autoscaling/v2 is read into a HorizontalPodAutoscaler (objects.rs).
        let Some(hpa) = find(&install.autoscalers, service, APP_NS) else {
            out.push(format!(
                "Deployment/{service}: no autoscaling/v2 HorizontalPodAutoscaler named {service}"
            ));
            continue;
        };
        let spec = hpa.spec.clone();
        let target = &spec.scale_target_ref;
        if (target.kind.as_str(), target.name.as_str()) != ("Deployment", service) {
            out.push(format!(
                "{} scales {} {}, want Deployment {service}",
                reference(hpa),
                target.kind,
                target.name
            ));
        }
        let min = spec.min_replicas.unwrap_or(1);
        if min < 2 || spec.max_replicas < min {
            out.push(format!(
                "{}: minReplicas {min} / maxReplicas {}",
                reference(hpa),
                spec.max_replicas
            ));
        }
        if install
            .deployment(service)
            .is_some_and(|d| d.spec.replicas.is_some())
        {
            out.push(format!(
                "Deployment/{service} sets replicas: re-applying would reset what its HPA chose"
            ));
        }
    }
    out
}

#[test]
fn prod_autoscalers_own_replica_counts() {
    verify(&Check {
        title: "autoscaling/v2 HPAs for the edge and model-gw, which own their replica counts",
        run: prod_hpas,
        profiles: PROD,
        mutations: &[
            ("the edge's HPA is gone", |i| {
                remove(&mut i.autoscalers, "edge", APP_NS)
            }),
            ("model-gw's Deployment sets replicas under its HPA", |i| {
                find_mut(&mut i.deployments, "model-gw", APP_NS)
                    .spec
                    .replicas = Some(2)
            }),
        ],
    });
}

/// The host of a `redis[s]://[user:password@]host:port/db` URL.
fn redis_host(url: &str) -> &str {
    let rest = url
        .strip_prefix("rediss://")
        .or_else(|| url.strip_prefix("redis://"))
        .unwrap_or(url);
    let rest = rest.split_once('@').map_or(rest, |(_, host)| host);
    rest.split([':', '/']).next().unwrap_or_default()
}

fn prod_no_redis(install: &Install) -> Vec<String> {
    let mut out: Vec<String> = install
        .workloads()
        .iter()
        .filter(|w| is_redis(w))
        .map(|w| format!("{} runs Redis", w.reference()))
        .collect();
    let local = [
        "redis",
        "redis.sandgate",
        "redis.sandgate.svc",
        "redis.sandgate.svc.cluster.local",
        "localhost",
        "127.0.0.1",
    ];
    for service in SERVICES {
        let host = redis_host(
            install
                .service_env(service, "REDIS_URL")
                .unwrap_or_default(),
        );
        if local.contains(&host) {
            out.push(format!(
                "Deployment/{service}: REDIS_URL points at {host:?}, not an external Redis"
            ));
        }
    }
    out
}

#[test]
fn prod_store_is_external() {
    verify(&Check {
        title: "no bundled Redis; the store is external",
        run: prod_no_redis,
        profiles: PROD,
        mutations: &[("a redis Deployment is rendered", |i| {
            let mut redis = find_mut(&mut i.deployments, "model-gw", APP_NS).clone();
            redis.metadata.name = Some("redis".into());
            let spec = redis.spec.template.spec.as_mut().expect("a pod spec");
            spec.containers[0].image = Some("docker.io/library/redis:7.4-alpine".into());
            i.deployments.push(redis);
        })],
    });
}

/// `redis://:$(REDIS_PASSWORD)@redis[.<namespace...>]:6379[/<db>]`: the bundled Service.
fn is_bundled_url(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("redis://:$(REDIS_PASSWORD)@redis") else {
        return false;
    };
    let (host_tail, rest) = rest.split_once(":6379").unwrap_or(("?", ""));
    let host_ok = host_tail.is_empty()
        || (host_tail.starts_with('.')
            && host_tail[1..]
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'.' || b == b'-'));
    let db_ok = rest.is_empty()
        || rest
            .strip_prefix('/')
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
    host_ok && db_ok
}

fn dev_redis(install: &Install) -> Vec<String> {
    let workloads = install.workloads();
    let Some(redis) = workloads.iter().find(|w| is_redis(w)) else {
        return vec!["no Redis workload".into()];
    };
    let mut out = vec![];
    let service = find(&install.services, "redis", APP_NS);
    let selects = service
        .and_then(|s| s.spec.as_ref()?.selector.as_ref())
        .is_some_and(|selector| selector_matches(Some(&match_labels(selector)), redis.labels));
    if !selects {
        out.push("no Service redis selecting the Redis pods".into());
    }
    for s in SERVICES {
        let url = install.service_env(s, "REDIS_URL").unwrap_or_default();
        if !is_bundled_url(url) {
            out.push(format!(
                "Deployment/{s}: REDIS_URL {url:?} is not the bundled redis Service"
            ));
        }
    }
    let words: Vec<&String> = redis
        .containers()
        .flat_map(|c| c.args.iter().flatten().chain(c.command.iter().flatten()))
        .collect();
    let joined = words
        .iter()
        .map(|w| w.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    if !joined.contains("--requirepass") || !joined.contains("$(REDIS_PASSWORD)") {
        out.push(format!(
            "{}: the bundled Redis does not require the password of secret cache",
            redis.reference()
        ));
    }
    out
}

#[test]
fn dev_bundles_a_password_protected_redis() {
    verify(&Check {
        title: "a bundled Redis with its Service and volume, and the services use it",
        run: dev_redis,
        profiles: DEV,
        mutations: &[("the redis Deployment is gone", |i| {
            remove(&mut i.deployments, "redis", APP_NS)
        })],
    });
}
