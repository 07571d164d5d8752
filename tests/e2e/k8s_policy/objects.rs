//! The rendered install as typed Kubernetes objects (k8s-openapi), and the lookups the
//! policy's rules share: workloads and their pod specs, containers' environment, label
//! selectors, the secrets a pod reads. The `*_mut` helpers are for the rules' mutations.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, ContainerPort, EnvVar, Pod, PodSpec, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::{Metadata, Resource};
use serde_json::Value;

pub const RELEASE: &str = "sandgate";
pub const APP_NS: &str = "sandgate";
pub const SANDBOX_NS: &str = "sandgate-sandboxes";
pub const SERVICES: [&str; 3] = ["edge", "runtime-api", "model-gw"];
pub const TLS_SECRET: &str = "sandgate-wildcard-tls";

/// One rendering of the chart: its objects by kind, and the `sandgate:` values it had.
#[derive(Clone, Debug)]
pub struct Install {
    /// The values file's name: dev, prod.
    pub name: String,
    pub values: Value,
    pub deployments: Vec<Deployment>,
    pub jobs: Vec<Job>,
    pub pods: Vec<Pod>,
    pub services: Vec<Service>,
    pub ingresses: Vec<Ingress>,
    pub network_policies: Vec<NetworkPolicy>,
    pub roles: Vec<Role>,
    pub role_bindings: Vec<RoleBinding>,
    pub cluster_roles: Vec<ClusterRole>,
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    pub service_accounts: Vec<ServiceAccount>,
    pub secrets: Vec<Secret>,
    pub config_maps: Vec<ConfigMap>,
    pub autoscalers: Vec<HorizontalPodAutoscaler>,
    pub disruption_budgets: Vec<PodDisruptionBudget>,
    /// Objects no rule looks into (a PersistentVolumeClaim, an HPA of another API version).
    pub others: Vec<Value>,
}

fn typed<K: serde::de::DeserializeOwned>(doc: Value) -> K {
    let what = format!("{} {}", doc["kind"], doc["metadata"]["name"]);
    serde_json::from_value(doc).unwrap_or_else(|error| panic!("{what}: {error}"))
}

impl Install {
    /// Reads each rendered document into its type, by apiVersion and kind. A workload of a
    /// kind the rules cannot look into fails, so that nothing escapes them unseen.
    pub fn parse(name: &str, values: Value, docs: Vec<Value>) -> Install {
        let mut install = Install {
            name: name.to_owned(),
            values,
            deployments: vec![],
            jobs: vec![],
            pods: vec![],
            services: vec![],
            ingresses: vec![],
            network_policies: vec![],
            roles: vec![],
            role_bindings: vec![],
            cluster_roles: vec![],
            cluster_role_bindings: vec![],
            service_accounts: vec![],
            secrets: vec![],
            config_maps: vec![],
            autoscalers: vec![],
            disruption_budgets: vec![],
            others: vec![],
        };
        for doc in docs {
            let api = doc["apiVersion"].as_str().unwrap_or_default().to_owned();
            let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
            let i = &mut install;
            match (api.as_str(), kind.as_str()) {
                ("apps/v1", "Deployment") => i.deployments.push(typed(doc)),
                ("batch/v1", "Job") => i.jobs.push(typed(doc)),
                ("v1", "Pod") => i.pods.push(typed(doc)),
                ("v1", "Service") => i.services.push(typed(doc)),
                ("v1", "ServiceAccount") => i.service_accounts.push(typed(doc)),
                ("v1", "Secret") => i.secrets.push(typed(doc)),
                ("v1", "ConfigMap") => i.config_maps.push(typed(doc)),
                ("networking.k8s.io/v1", "Ingress") => i.ingresses.push(typed(doc)),
                ("networking.k8s.io/v1", "NetworkPolicy") => i.network_policies.push(typed(doc)),
                ("rbac.authorization.k8s.io/v1", "Role") => i.roles.push(typed(doc)),
                ("rbac.authorization.k8s.io/v1", "RoleBinding") => i.role_bindings.push(typed(doc)),
                ("rbac.authorization.k8s.io/v1", "ClusterRole") => i.cluster_roles.push(typed(doc)),
                ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                    i.cluster_role_bindings.push(typed(doc))
                }
                ("autoscaling/v2", "HorizontalPodAutoscaler") => i.autoscalers.push(typed(doc)),
                ("policy/v1", "PodDisruptionBudget") => i.disruption_budgets.push(typed(doc)),
                (_, "StatefulSet" | "DaemonSet" | "ReplicaSet" | "CronJob" | "Job" | "Pod") => {
                    panic!(
                        "{name}: a {api} {kind} the policy tests cannot look into: teach tests/e2e/k8s_policy/objects.rs"
                    )
                }
                _ => i.others.push(doc),
            }
        }
        install
    }

    /// Every workload: Deployments, hook Jobs and `helm test` Pods.
    pub fn workloads(&self) -> Vec<Workload<'_>> {
        let mut out: Vec<Workload<'_>> = self
            .deployments
            .iter()
            .map(Workload::of_deployment)
            .collect();
        out.extend(self.jobs.iter().map(|job| {
            let template = job.spec.as_ref().map(|spec| &spec.template);
            Workload {
                kind: "Job",
                meta: &job.metadata,
                labels: labels(template.and_then(|t| t.metadata.as_ref())),
                spec: template.and_then(|t| t.spec.as_ref()).unwrap_or(&EMPTY_POD),
            }
        }));
        out.extend(self.pods.iter().map(|pod| Workload {
            kind: "Pod",
            meta: &pod.metadata,
            labels: labels(Some(&pod.metadata)),
            spec: pod.spec.as_ref().unwrap_or(&EMPTY_POD),
        }));
        out
    }

    pub fn deployment(&self, name: &str) -> Option<&Deployment> {
        find(&self.deployments, name, APP_NS)
    }

    /// The container named after the service in its Deployment.
    pub fn service_container(&self, service: &str) -> Option<&Container> {
        let deployment = Workload::of_deployment(self.deployment(service)?);
        deployment
            .spec
            .containers
            .iter()
            .find(|c| c.name == service)
    }

    /// A service's container's variable, "" when unset.
    pub fn service_env(&self, service: &str, name: &str) -> Option<&str> {
        env_value(self.service_container(service)?, name)
    }
}

static EMPTY_POD: LazyLock<PodSpec> = LazyLock::new(PodSpec::default);
static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

pub fn labels(meta: Option<&ObjectMeta>) -> &BTreeMap<String, String> {
    meta.and_then(|m| m.labels.as_ref()).unwrap_or(&NO_LABELS)
}

/// A pod template of some kind of workload: what every container rule looks into.
#[derive(Clone, Copy)]
pub struct Workload<'a> {
    pub kind: &'static str,
    pub meta: &'a ObjectMeta,
    /// Its pods' labels.
    pub labels: &'a BTreeMap<String, String>,
    pub spec: &'a PodSpec,
}

impl<'a> Workload<'a> {
    pub fn of_deployment(deployment: &'a Deployment) -> Workload<'a> {
        let template = Some(&deployment.spec.template);
        Workload {
            kind: "Deployment",
            meta: &deployment.metadata,
            labels: labels(template.and_then(|t| t.metadata.as_ref())),
            spec: template.and_then(|t| t.spec.as_ref()).unwrap_or(&EMPTY_POD),
        }
    }

    pub fn name(&self) -> &'a str {
        name_of(self.meta)
    }

    pub fn namespace(&self) -> &'a str {
        namespace_of(self.meta)
    }

    pub fn reference(&self) -> String {
        reference_of(self.kind, self.meta)
    }

    /// Init containers first, then the others.
    pub fn containers(self) -> impl Iterator<Item = &'a Container> {
        self.spec
            .init_containers
            .iter()
            .flatten()
            .chain(&self.spec.containers)
    }

    /// A workload that serves (a Deployment's pods), not a hook's Job or a test pod.
    pub fn long_running(&self) -> bool {
        self.kind == "Deployment" && hook(self.meta).is_none()
    }

    pub fn ports(&self) -> Vec<&'a ContainerPort> {
        self.containers()
            .flat_map(|c| c.ports.iter().flatten())
            .collect()
    }
}

pub fn name_of(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or("?")
}

pub fn namespace_of(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or("")
}

/// `Kind/name (namespace)`: how a problem names an object.
pub fn reference_of(kind: &str, meta: &ObjectMeta) -> String {
    match meta.namespace.as_deref() {
        Some(ns) => format!("{kind}/{} ({ns})", name_of(meta)),
        None => format!("{kind}/{}", name_of(meta)),
    }
}

pub fn reference<K: Resource + Metadata<Ty = ObjectMeta>>(object: &K) -> String {
    reference_of(K::KIND, object.metadata())
}

pub fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The Helm hook an object is (`test`, `pre-install,pre-upgrade`, ...), or None.
pub fn hook(meta: &ObjectMeta) -> Option<&str> {
    annotation(meta, "helm.sh/hook")
}

pub fn is_test_hook(meta: &ObjectMeta) -> bool {
    hook(meta) == Some("test")
}

pub fn find<'a, K: Metadata<Ty = ObjectMeta>>(
    list: &'a [K],
    name: &str,
    ns: &str,
) -> Option<&'a K> {
    list.iter()
        .find(|o| name_of(o.metadata()) == name && namespace_of(o.metadata()) == ns)
}

/// For mutations: the object, which the rendering must have.
pub fn find_mut<'a, K: Resource + Metadata<Ty = ObjectMeta>>(
    list: &'a mut [K],
    name: &str,
    ns: &str,
) -> &'a mut K {
    list.iter_mut()
        .find(|o| name_of(o.metadata()) == name && namespace_of(o.metadata()) == ns)
        .unwrap_or_else(|| panic!("mutation: no {} {name} in {ns}", K::KIND))
}

/// For mutations: takes the object out.
pub fn remove<K: Resource + Metadata<Ty = ObjectMeta>>(list: &mut Vec<K>, name: &str, ns: &str) {
    let before = list.len();
    list.retain(|o| !(name_of(o.metadata()) == name && namespace_of(o.metadata()) == ns));
    assert!(
        list.len() < before,
        "mutation: no {} {name} in {ns}",
        K::KIND
    );
}

/// For mutations: the pod spec of a Deployment of the app namespace.
pub fn pod_spec_mut<'a>(install: &'a mut Install, deployment: &str) -> &'a mut PodSpec {
    let d = find_mut(&mut install.deployments, deployment, APP_NS);
    d.spec.template.spec.as_mut().expect("mutation: a pod spec")
}

/// For mutations: the first container of a Deployment of the app namespace.
pub fn container_mut<'a>(install: &'a mut Install, deployment: &str) -> &'a mut Container {
    &mut pod_spec_mut(install, deployment).containers[0]
}

/// For mutations: the first container of a Job of the app namespace.
pub fn job_container_mut<'a>(install: &'a mut Install, job: &str) -> &'a mut Container {
    let j = find_mut(&mut install.jobs, job, APP_NS);
    let spec = j.spec.as_mut().and_then(|s| s.template.spec.as_mut());
    &mut spec.expect("mutation: a pod spec").containers[0]
}

/// For mutations: sets a variable a Deployment's container already has.
pub fn set_env(install: &mut Install, deployment: &str, name: &str, value: &str) {
    let env = container_mut(install, deployment)
        .env
        .as_mut()
        .expect("mutation: env");
    let var = env.iter_mut().find(|e| e.name == name);
    var.unwrap_or_else(|| panic!("mutation: {deployment} has no {name}"))
        .value = Some(value.to_owned());
}

pub fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    serde_json::from_value(serde_json::json!({
        "name": name,
        "valueFrom": {"secretKeyRef": {"name": secret, "key": key}},
    }))
    .expect("an EnvVar")
}

pub fn env_var<'a>(container: &'a Container, name: &str) -> Option<&'a EnvVar> {
    container.env.iter().flatten().find(|e| e.name == name)
}

/// A literal variable's value (None when unset, or taken from a secret or field).
pub fn env_value<'a>(container: &'a Container, name: &str) -> Option<&'a str> {
    env_var(container, name)?.value.as_deref()
}

/// The port of a listen address `host:port`.
pub fn listen_port(address: Option<&str>) -> Option<i32> {
    address?.rsplit_once(':')?.1.parse().ok()
}

/// A port by number, or by the name of one of the containers' ports.
pub fn port_number(port: &IntOrString, ports: &[&ContainerPort]) -> Option<i32> {
    match port {
        IntOrString::Int(n) => Some(*n),
        IntOrString::String(name) => ports
            .iter()
            .find(|p| p.name.as_deref() == Some(name))
            .map(|p| p.container_port),
    }
}

/// Kubernetes label selector semantics; an empty selector matches everything.
pub fn selector_matches(
    selector: Option<&LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> bool {
    let Some(selector) = selector else {
        return false;
    };
    let by_label = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    by_label
        && selector.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            let value = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => !value.is_some_and(|v| values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

/// A selector of exactly these labels, as `matchLabels`.
pub fn match_labels(pairs: &BTreeMap<String, String>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(pairs.clone()),
        match_expressions: None,
    }
}

/// Names of the secrets a pod spec pulls in (env, envFrom, volumes).
pub fn secret_refs(spec: &PodSpec) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
    {
        for e in c.env.iter().flatten() {
            if let Some(r) = e
                .value_from
                .as_ref()
                .and_then(|v| v.secret_key_ref.as_ref())
            {
                names.insert(r.name.clone());
            }
        }
        for from in c.env_from.iter().flatten() {
            if let Some(r) = &from.secret_ref {
                names.insert(r.name.clone());
            }
        }
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(name) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            names.insert(name);
        }
        for source in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(s) = &source.secret {
                names.insert(s.name.clone());
            }
        }
    }
    names
}

/// Whether a workload runs Redis (an image whose repository's name starts with redis).
pub fn is_redis(workload: &Workload<'_>) -> bool {
    workload.containers().any(|c| {
        let image = c.image.as_deref().unwrap_or_default();
        let image = image.split('@').next().unwrap_or_default();
        let repository = image.rsplit('/').next().unwrap_or_default();
        repository
            .split(':')
            .next()
            .unwrap_or_default()
            .starts_with("redis")
    })
}
