//! The Kubernetes objects of one sandbox: a Deployment running its image, a Secret holding
//! its session key and its secret key, a claim for its workspace, and a Service and an Ingress that route
//! `{runtime_id}{separator}{base_url}` to it. Built from the store's record alone, so a
//! retry builds the same objects; all but the Deployment are owned by it, so that deleting
//! it deletes them too (the cluster's garbage collector).
//!
//! The pods meet the `restricted` Pod Security Standard unless the installation says that
//! its sandboxes need more ([`PodSecurity`], `security.rs`).

mod security;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, Secret, SecretKeySelector, Service, ServicePort, ServiceSpec,
    TCPSocketAction, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec, IngressTLS, ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::KubernetesOptions;
use crate::sandboxes::driver::{SECRET_KEY_ENV, SandboxKeys, is_foreign_session_key};
use sandgate_store::StoredSandbox;
pub use security::refusal;
use security::{container_security_context, pod_security_context};

/// Label on every object Sandgate creates: the one selector `observe` lists pods by.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGER: &str = "sandgate";
/// Label naming the sandbox an object belongs to.
pub const RUNTIME_ID: &str = "sandgate.dev/runtime-id";
/// Label naming the warm pool the sandbox was started for, or `cold`.
pub const POOL: &str = "sandgate.dev/pool";
/// The sandbox's container, which `resume` patches by name.
pub const CONTAINER: &str = "sandbox";
/// The environment variable that carries the session key, and its key in the Secret.
pub const SESSION_KEY_ENV: &str = "SESSION_API_KEY";
/// The pod template's annotation a resume sets to the key's nonce (public: the key derives
/// from it and a secret), so that the Deployment starts a new pod, which reads the new key,
/// even when one is still running.
pub const KEY_VERSION: &str = "sandgate.dev/session-key-version";
/// The volume mounted at the working directory.
const WORKSPACE_VOLUME: &str = "workspace";
/// Where the workspace is mounted for a sandbox whose working directory is the root.
const ROOT_WORKSPACE: &str = "/workspace";
/// Size of a workspace claim.
const WORKSPACE_SIZE: &str = "10Gi";
/// The Service's port, which the Ingress routes to.
const SERVICE_PORT: i32 = 80;

/// Resources of a sandbox at `resource_factor` 1. A sandbox mostly waits on its model, so
/// the request (what the scheduler reserves) is a modest floor that lets a node pack many
/// sandboxes, while the limit leaves room for the bursts of a build or a test run.
const CPU_REQUEST_MILLIS: f64 = 1000.0;
const CPU_LIMIT_MILLIS: f64 = 2000.0;
const MEMORY_REQUEST_MIB: f64 = 2048.0;
const MEMORY_LIMIT_MIB: f64 = 4096.0;

/// Name of the sandbox's Deployment, Service and Ingress.
pub fn name(runtime_id: &str) -> String {
    format!("sandbox-{runtime_id}")
}

/// Where runtime-api reaches the sandbox's agent-server inside the cluster: its Service
/// (the sandbox namespace's policy lets runtime-api in).
pub fn internal_url(runtime_id: &str, namespace: &str) -> String {
    format!("http://{}.{namespace}.svc:{SERVICE_PORT}", name(runtime_id))
}

/// Name of the sandbox's workspace claim.
pub fn claim_name(runtime_id: &str) -> String {
    format!("sandbox-{runtime_id}-workspace")
}

/// Name of the Secret holding the sandbox's session key.
pub fn secret_name(runtime_id: &str) -> String {
    format!("sandbox-{runtime_id}-session")
}

/// The sandbox's public host.
pub fn host(runtime_id: &str, options: &KubernetesOptions) -> String {
    format!("{runtime_id}{}{}", options.separator, options.base_url)
}

/// The labels of every object of `sandbox`. Pool names are valid label values: a
/// configuration's name is checked as one when it is saved (`admin::configs::check_name`).
pub fn labels(sandbox: &StoredSandbox) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY.to_owned(), MANAGER.to_owned()),
        (RUNTIME_ID.to_owned(), sandbox.runtime_id.clone()),
        (
            POOL.to_owned(),
            sandbox.pool.clone().unwrap_or_else(|| "cold".to_owned()),
        ),
    ])
}

fn metadata(name: String, sandbox: &StoredSandbox, options: &KubernetesOptions) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(options.namespace.clone()),
        labels: Some(labels(sandbox)),
        ..ObjectMeta::default()
    }
}

/// The metadata of an object the sandbox's Deployment owns.
fn owned_metadata(
    name: String,
    sandbox: &StoredSandbox,
    options: &KubernetesOptions,
    owner: &OwnerReference,
) -> ObjectMeta {
    ObjectMeta {
        owner_references: Some(vec![owner.clone()]),
        ..metadata(name, sandbox, options)
    }
}

/// The reference that makes an object the dependent of the Deployment `deployment`.
pub fn owned_by(deployment: &Deployment) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: "apps/v1".to_owned(),
        kind: "Deployment".to_owned(),
        name: deployment.metadata.name.clone()?,
        uid: deployment.metadata.uid.clone()?,
        ..OwnerReference::default()
    })
}

/// What selects the sandbox's pods: its id, and Sandgate as their manager so that a
/// foreign pod that happens to carry the id is never routed to.
fn selector(sandbox: &StoredSandbox) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY.to_owned(), MANAGER.to_owned()),
        (RUNTIME_ID.to_owned(), sandbox.runtime_id.clone()),
    ])
}

/// `base` scaled by the sandbox's resource factor; at least 1 unit, so a tiny factor
/// never asks for nothing.
fn scaled(base: f64, factor: Option<f64>) -> i64 {
    let factor = factor.filter(|factor| factor.is_finite() && *factor > 0.0);
    ((base * factor.unwrap_or(1.0)).round() as i64).max(1)
}

fn resources(sandbox: &StoredSandbox, options: &KubernetesOptions) -> ResourceRequirements {
    let factor = sandbox.spec.resource_factor;
    let cpu = |millis| Quantity(format!("{}m", scaled(millis, factor)));
    let memory = |mib| Quantity(format!("{}Mi", scaled(mib, factor)));
    // Ephemeral storage is requested and capped at the same size: the scheduler places a
    // sandbox where that much disk is free, and the kubelet evicts one that writes more
    // rather than let it fill the node's disk under its neighbours.
    let disk = Quantity(options.ephemeral_storage.clone());
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_owned(), cpu(CPU_REQUEST_MILLIS)),
            ("memory".to_owned(), memory(MEMORY_REQUEST_MIB)),
            ("ephemeral-storage".to_owned(), disk.clone()),
        ])),
        limits: Some(BTreeMap::from([
            ("cpu".to_owned(), cpu(CPU_LIMIT_MILLIS)),
            ("memory".to_owned(), memory(MEMORY_LIMIT_MIB)),
            ("ephemeral-storage".to_owned(), disk),
        ])),
        ..ResourceRequirements::default()
    }
}

/// The spec's environment and the session and secret keys, which win over same-named
/// entries and come from the sandbox's Secret: never in clear in the Deployment, its
/// ReplicaSets or its pods, which the built-in `view` role reads.
fn environment(sandbox: &StoredSandbox) -> Vec<EnvVar> {
    let from_secret = |name: &str| EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret_name(&sandbox.runtime_id),
                key: name.to_owned(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    };
    sandbox
        .spec
        .environment
        .iter()
        .filter(|(name, _)| {
            ![SESSION_KEY_ENV, SECRET_KEY_ENV].contains(&name.as_str())
                && !is_foreign_session_key(name)
        })
        .map(|(name, value)| env(name, value))
        .chain([from_secret(SESSION_KEY_ENV), from_secret(SECRET_KEY_ENV)])
        .collect()
}

/// The Secret's data: both keys, under the names of the variables they fill.
pub fn secret_data(keys: &SandboxKeys) -> BTreeMap<String, String> {
    BTreeMap::from([
        (SESSION_KEY_ENV.to_owned(), keys.session.clone()),
        (SECRET_KEY_ENV.to_owned(), keys.secret.clone()),
    ])
}

/// The Secret holding the sandbox's keys, owned by its Deployment.
pub fn secret(
    sandbox: &StoredSandbox,
    keys: &SandboxKeys,
    options: &KubernetesOptions,
    owner: &OwnerReference,
) -> Secret {
    Secret {
        metadata: owned_metadata(secret_name(&sandbox.runtime_id), sandbox, options, owner),
        type_: Some("Opaque".to_owned()),
        string_data: Some(secret_data(keys)),
        ..Secret::default()
    }
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        ..EnvVar::default()
    }
}

/// The workspace: the claim, or with a FUSE S3 mount (the workspace lives in the bucket)
/// a scratch directory that goes with the pod.
fn workspace_volume(sandbox: &StoredSandbox) -> Volume {
    if sandbox.spec.fuse_s3_mount == Some(true) {
        Volume {
            name: WORKSPACE_VOLUME.to_owned(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        }
    } else {
        Volume {
            name: WORKSPACE_VOLUME.to_owned(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(&sandbox.runtime_id),
                ..PersistentVolumeClaimVolumeSource::default()
            }),
            ..Volume::default()
        }
    }
}

/// Where the workspace is mounted: the working directory, unless that is the root (the
/// SDK's `APIRemoteWorkspace` asks for `/`, its image's WORKDIR): mounted there, the
/// volume would hide the image's every file and the container could never start.
pub fn workspace_path(working_dir: &str) -> &str {
    let names_root = working_dir
        .split('/')
        .all(|part| matches!(part, "" | "." | ".."));
    if names_root {
        ROOT_WORKSPACE
    } else {
        working_dir
    }
}

/// Whether the sandbox keeps its workspace in a claim.
pub fn has_claim(sandbox: &StoredSandbox) -> bool {
    sandbox.spec.fuse_s3_mount != Some(true)
}

pub fn deployment(sandbox: &StoredSandbox, options: &KubernetesOptions) -> Deployment {
    let spec = &sandbox.spec;
    let container = Container {
        name: CONTAINER.to_owned(),
        image: Some(spec.image.clone()),
        command: (!spec.command.is_empty()).then(|| spec.command.clone()),
        working_dir: (!spec.working_dir.is_empty()).then(|| spec.working_dir.clone()),
        env: Some(environment(sandbox)),
        ports: Some(vec![ContainerPort {
            name: Some("http".to_owned()),
            container_port: i32::from(options.port),
            ..ContainerPort::default()
        }]),
        // Ready once the agent server accepts connections, so that `observe` reports
        // running only when the sandbox's URL answers.
        readiness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(i32::from(options.port)),
                ..TCPSocketAction::default()
            }),
            period_seconds: Some(2),
            ..Probe::default()
        }),
        resources: Some(resources(sandbox, options)),
        security_context: Some(container_security_context(spec, options.pod_security)),
        volume_mounts: Some(vec![VolumeMount {
            name: WORKSPACE_VOLUME.to_owned(),
            mount_path: workspace_path(&spec.working_dir).to_owned(),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    };
    let pod = PodSpec {
        containers: vec![container],
        volumes: Some(vec![workspace_volume(sandbox)]),
        security_context: Some(pod_security_context(spec, options.pod_security)),
        // The agent runs code it was asked to write: it gets no Kubernetes API token.
        automount_service_account_token: Some(false),
        // Without this every Service in the namespace (one per sandbox) becomes
        // environment variables of every new pod.
        enable_service_links: Some(false),
        ..PodSpec::default()
    };
    Deployment {
        metadata: metadata(name(&sandbox.runtime_id), sandbox, options),
        spec: DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(selector(sandbox)),
                ..LabelSelector::default()
            },
            // The workspace claim is ReadWriteOnce: a rolling update's second pod could
            // not mount it on another node, so the old pod goes first.
            strategy: Some(DeploymentStrategy {
                type_: Some("Recreate".to_owned()),
                ..DeploymentStrategy::default()
            }),
            // Each resume rolls a new ReplicaSet; nothing ever rolls a sandbox back, so
            // one old one is kept rather than ten (what `observe` lists stays small).
            revision_history_limit: Some(1),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(sandbox)),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..DeploymentSpec::default()
        },
        ..Deployment::default()
    }
}

pub fn claim(
    sandbox: &StoredSandbox,
    options: &KubernetesOptions,
    owner: &OwnerReference,
) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: owned_metadata(claim_name(&sandbox.runtime_id), sandbox, options, owner),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            storage_class_name: options.storage_class.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(WORKSPACE_SIZE.to_owned()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

pub fn service(
    sandbox: &StoredSandbox,
    options: &KubernetesOptions,
    owner: &OwnerReference,
) -> Service {
    Service {
        metadata: owned_metadata(name(&sandbox.runtime_id), sandbox, options, owner),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            selector: Some(selector(sandbox)),
            ports: Some(vec![ServicePort {
                name: Some("http".to_owned()),
                port: SERVICE_PORT,
                target_port: Some(IntOrString::Int(i32::from(options.port))),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

pub fn ingress(
    sandbox: &StoredSandbox,
    options: &KubernetesOptions,
    owner: &OwnerReference,
) -> Ingress {
    let host = host(&sandbox.runtime_id, options);
    let backend = IngressBackend {
        service: Some(IngressServiceBackend {
            name: name(&sandbox.runtime_id),
            port: Some(ServiceBackendPort {
                number: Some(SERVICE_PORT),
                ..ServiceBackendPort::default()
            }),
        }),
        ..IngressBackend::default()
    };
    Ingress {
        metadata: owned_metadata(name(&sandbox.runtime_id), sandbox, options, owner),
        spec: Some(IngressSpec {
            ingress_class_name: options.ingress_class.clone(),
            tls: options.tls_secret.as_ref().map(|secret| {
                vec![IngressTLS {
                    hosts: Some(vec![host.clone()]),
                    secret_name: Some(secret.clone()),
                }]
            }),
            rules: Some(vec![IngressRule {
                host: Some(host),
                http: Some(HTTPIngressRuleValue {
                    paths: vec![HTTPIngressPath {
                        path: Some("/".to_owned()),
                        path_type: "Prefix".to_owned(),
                        backend,
                    }],
                }),
            }]),
            ..IngressSpec::default()
        }),
        ..Ingress::default()
    }
}
