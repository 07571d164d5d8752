//! Pod security and hygiene of every container the chart runs (Deployments, hook Jobs and
//! `helm test` pods): the restricted Pod Security Standard and more (non-root, read-only
//! root filesystem, no privileges, RuntimeDefault seccomp), resources, probes, pinned
//! images, and an environment without empty or repeated variables.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ExecAction, PodSpec, SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;

/// Every container, with the workload and pod spec it is in.
fn each_container(install: &Install) -> Vec<(Workload<'_>, &Container)> {
    install
        .workloads()
        .into_iter()
        .flat_map(|w| w.containers().map(move |c| (w, c)))
        .collect()
}

fn security_context<'a>(install: &'a mut Install, deployment: &str) -> &'a mut SecurityContext {
    container_mut(install, deployment)
        .security_context
        .get_or_insert_with(Default::default)
}

fn env_values_set(install: &Install) -> Vec<String> {
    let mut out = vec![];
    for (w, c) in each_container(install) {
        let mut seen = BTreeMap::<&str, usize>::new();
        for e in c.env.iter().flatten() {
            *seen.entry(&e.name).or_default() += 1;
            if e.value.as_deref() == Some("") {
                out.push(format!(
                    "{} container {}: {} is empty",
                    w.reference(),
                    c.name,
                    e.name
                ));
            }
        }
        for (name, _) in seen.into_iter().filter(|(_, n)| *n > 1) {
            out.push(format!(
                "{} container {}: {name} is set twice",
                w.reference(),
                c.name
            ));
        }
    }
    out
}

#[test]
fn env_values_are_set_once() {
    verify(&Check {
        title: "no environment variable is set to an empty value, none twice",
        run: env_values_set,
        profiles: BOTH,
        mutations: &[
            ("runtime-api's STORAGE_CLASS is empty", |i| {
                set_env(i, "runtime-api", "STORAGE_CLASS", "")
            }),
            ("the edge sets REDIS_URL twice", |i| {
                let env = container_mut(i, "edge").env.get_or_insert_with(Vec::new);
                env.push(
                    serde_json::from_value(
                        serde_json::json!({"name": "REDIS_URL", "value": "redis://x"}),
                    )
                    .expect("an EnvVar"),
                );
            }),
        ],
    });
}

/// The pod's security context, overridden field by field by the container's.
fn effective<T: Clone>(
    spec: &PodSpec,
    c: &Container,
    pod: impl Fn(&k8s_openapi::api::core::v1::PodSecurityContext) -> Option<T>,
    container: impl Fn(&SecurityContext) -> Option<T>,
) -> Option<T> {
    c.security_context
        .as_ref()
        .and_then(&container)
        .or_else(|| spec.security_context.as_ref().and_then(pod))
}

fn non_root(install: &Install) -> Vec<String> {
    let mut out = vec![];
    for (w, c) in each_container(install) {
        let non_root = effective(w.spec, c, |p| p.run_as_non_root, |s| s.run_as_non_root);
        let uid = effective(w.spec, c, |p| p.run_as_user, |s| s.run_as_user);
        if non_root != Some(true) {
            out.push(format!(
                "{} container {}: runAsNonRoot is not true",
                w.reference(),
                c.name
            ));
        }
        if uid.is_none_or(|uid| uid == 0) {
            out.push(format!(
                "{} container {}: runAsUser is {uid:?}, want a non-root uid",
                w.reference(),
                c.name
            ));
        }
    }
    out
}

#[test]
fn containers_run_as_non_root() {
    verify(&Check {
        title: "every container runs as non-root, with a non-root uid",
        run: non_root,
        profiles: BOTH,
        mutations: &[
            ("edge runs as uid 0", |i| {
                security_context(i, "edge").run_as_user = Some(0)
            }),
            ("model-gw drops runAsNonRoot", |i| {
                security_context(i, "model-gw").run_as_non_root = Some(false)
            }),
        ],
    });
}

fn read_only_root(install: &Install) -> Vec<String> {
    each_container(install)
        .into_iter()
        .filter(|(_, c)| {
            c.security_context
                .as_ref()
                .and_then(|s| s.read_only_root_filesystem)
                != Some(true)
        })
        .map(|(w, c)| {
            format!(
                "{} container {}: readOnlyRootFilesystem is not true",
                w.reference(),
                c.name
            )
        })
        .collect()
}

#[test]
fn root_filesystems_are_read_only() {
    verify(&Check {
        title: "every container has a read-only root filesystem",
        run: read_only_root,
        profiles: BOTH,
        mutations: &[("runtime-api's root filesystem is writable", |i| {
            security_context(i, "runtime-api").read_only_root_filesystem = Some(false)
        })],
    });
}

fn no_privileges(install: &Install) -> Vec<String> {
    let mut out = vec![];
    for (w, c) in each_container(install) {
        let sc = c.security_context.clone().unwrap_or_default();
        let at = format!("{} container {}", w.reference(), c.name);
        if sc.allow_privilege_escalation != Some(false) {
            out.push(format!("{at}: allowPrivilegeEscalation is not false"));
        }
        if sc.privileged == Some(true) {
            out.push(format!("{at}: privileged"));
        }
        let caps = sc.capabilities.unwrap_or_default();
        if !caps.drop.iter().flatten().any(|d| d == "ALL") {
            out.push(format!("{at}: capabilities do not drop ALL"));
        }
        if let Some(add) = caps.add.filter(|a| !a.is_empty()) {
            out.push(format!("{at}: adds capabilities {add:?}"));
        }
    }
    out
}

#[test]
fn containers_have_no_privileges() {
    verify(&Check {
        title: "every container drops ALL capabilities and cannot escalate privileges",
        run: no_privileges,
        profiles: BOTH,
        mutations: &[
            ("edge allows privilege escalation", |i| {
                security_context(i, "edge").allow_privilege_escalation = Some(true)
            }),
            ("model-gw keeps NET_RAW", |i| {
                security_context(i, "model-gw").capabilities = Some(Capabilities {
                    add: Some(vec!["NET_RAW".into()]),
                    drop: None,
                })
            }),
        ],
    });
}

fn seccomp(install: &Install) -> Vec<String> {
    let mut out = vec![];
    for (w, c) in each_container(install) {
        let profile = effective(
            w.spec,
            c,
            |p| p.seccomp_profile.clone(),
            |s| s.seccomp_profile.clone(),
        );
        let kind = profile.map(|p| p.type_);
        if kind.as_deref() != Some("RuntimeDefault") {
            out.push(format!(
                "{} container {}: seccomp profile is {kind:?}",
                w.reference(),
                c.name
            ));
        }
    }
    out
}

#[test]
fn containers_run_under_runtime_default_seccomp() {
    verify(&Check {
        title: "every container runs under the RuntimeDefault seccomp profile",
        run: seccomp,
        profiles: BOTH,
        mutations: &[("runtime-api's pod is Unconfined", |i| {
            let pod = pod_spec_mut(i, "runtime-api")
                .security_context
                .get_or_insert_with(Default::default);
            pod.seccomp_profile = Some(SeccompProfile {
                type_: "Unconfined".into(),
                localhost_profile: None,
            });
        })],
    });
}

fn resources(install: &Install) -> Vec<String> {
    let mut out = vec![];
    for (w, c) in each_container(install) {
        let res = c.resources.clone().unwrap_or_default();
        for (kind, map) in [("request", &res.requests), ("limit", &res.limits)] {
            for r in ["cpu", "memory"] {
                let set = map
                    .as_ref()
                    .and_then(|m| m.get(r))
                    .is_some_and(|q: &Quantity| !q.0.is_empty());
                if !set {
                    out.push(format!(
                        "{} container {}: no {r} {kind}",
                        w.reference(),
                        c.name
                    ));
                }
            }
        }
    }
    out
}

#[test]
fn containers_have_requests_and_limits() {
    verify(&Check {
        title: "every container has cpu and memory requests and limits",
        run: resources,
        profiles: BOTH,
        mutations: &[
            ("edge has no memory limit", |i| {
                let res = container_mut(i, "edge")
                    .resources
                    .as_mut()
                    .expect("resources");
                res.limits.as_mut().expect("limits").remove("memory");
            }),
            ("model-gw has no requests", |i| {
                container_mut(i, "model-gw")
                    .resources
                    .as_mut()
                    .expect("resources")
                    .requests = None
            }),
        ],
    });
}

fn probes(install: &Install) -> Vec<String> {
    let mut out = vec![];
    for w in install
        .workloads()
        .into_iter()
        .filter(Workload::long_running)
    {
        for c in &w.spec.containers {
            for (name, probe) in [
                ("readinessProbe", &c.readiness_probe),
                ("livenessProbe", &c.liveness_probe),
            ] {
                if probe.is_none() {
                    out.push(format!("{} container {}: no {name}", w.reference(), c.name));
                }
            }
        }
    }
    for service in SERVICES {
        let Some(c) = install.service_container(service) else {
            out.push(format!(
                "no Deployment {service} with a container {service}"
            ));
            continue;
        };
        let flag = if service == "edge" {
            "--http"
        } else {
            "--grpc"
        };
        for (name, probe) in [
            ("startupProbe", &c.startup_probe),
            ("readinessProbe", &c.readiness_probe),
            ("livenessProbe", &c.liveness_probe),
        ] {
            let command = probe
                .as_ref()
                .and_then(|p| p.exec.as_ref())
                .and_then(|e| e.command.clone())
                .unwrap_or_default();
            if command.get(..3)
                != Some(
                    &[
                        "/sandgate".to_owned(),
                        "health-check".to_owned(),
                        flag.to_owned(),
                    ][..],
                )
            {
                out.push(format!("Deployment/{service}: {name} runs {command:?}, want /sandgate health-check {flag} ..."));
            }
        }
    }
    out
}

#[test]
fn services_are_probed_with_sandgate_health_check() {
    verify(&Check {
        title: "every serving container has readiness and liveness probes; Sandgate's run `sandgate health-check`",
        run: probes,
        profiles: BOTH,
        mutations: &[
            ("runtime-api has no readiness probe", |i| {
                container_mut(i, "runtime-api").readiness_probe = None
            }),
            ("the edge probes with curl", |i| {
                let probe = container_mut(i, "edge")
                    .liveness_probe
                    .as_mut()
                    .expect("a liveness probe");
                let command = ["curl", "-f", "http://127.0.0.1:8080/health"]
                    .map(String::from)
                    .to_vec();
                probe.exec = Some(ExecAction {
                    command: Some(command),
                });
            }),
        ],
    });
}

fn pinned_images(install: &Install) -> Vec<String> {
    let mut out = vec![];
    for (w, c) in each_container(install) {
        let image = c.image.as_deref().unwrap_or_default();
        let last = image.rsplit('/').next().unwrap_or_default();
        let tag = last.split_once(':').map_or("", |(_, tag)| tag);
        if !image.contains("@sha256:") && matches!(tag, "" | "latest" | "unset") {
            out.push(format!(
                "{} container {}: image {image:?} is not pinned",
                w.reference(),
                c.name
            ));
        }
    }
    out
}

#[test]
fn images_are_pinned() {
    verify(&Check {
        title: "every image is pinned to a tag or digest (not latest)",
        run: pinned_images,
        profiles: BOTH,
        mutations: &[("model-gw runs :latest", |i| {
            container_mut(i, "model-gw").image = Some("registry.example.com/sandgate:latest".into())
        })],
    });
}
