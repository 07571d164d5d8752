//! What a sandbox's pod says of it: running, still starting (and why, when it waits: an
//! image that cannot be pulled, a container that cannot be created or keeps crashing, a
//! pod the scheduler cannot place), or failed (an image name that can never be pulled, the
//! pod itself). A waiting sandbox stays starting, with the reason as its detail, since the
//! kubelet keeps trying; past the start timeout the service calls it failed. And for
//! a sandbox without a pod, what its Deployment and ReplicaSet say: the cluster refusing
//! to create the pod (admission, quota), or a Deployment past its progress deadline.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::objects::RUNTIME_ID;
use crate::sandboxes::driver::Observed;
use sandgate_store::{Restarts, SandboxState, StoredSandbox};

/// Waiting reasons that no retry of the kubelet fixes: failed at once.
const HOPELESS: &[&str] = &["InvalidImageName"];

/// Waiting reasons the kubelet retries (a registry back, a pull secret fixed, a tag
/// pushed): the sandbox stays starting with the reason, until the start timeout.
const IMAGE_PULL_WAITS: &[&str] = &["ErrImagePull", "ImagePullBackOff"];

/// The container cannot be made or run as configured (a missing Secret, an image whose
/// user is root under `runAsNonRoot`): retried too, so starting, with the reason.
const CREATE_WAITS: &[&str] = &[
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// Each of `sandboxes` that has a pod in `pods`, as its pod says. When a sandbox has
/// several pods, the newest that is not terminating speaks for it (during a restart the
/// old one is on its way out).
pub fn observed(pods: &[Pod], sandboxes: &[StoredSandbox]) -> HashMap<String, Observed> {
    let wanted: HashSet<&str> = sandboxes
        .iter()
        .map(|sandbox| sandbox.runtime_id.as_str())
        .collect();
    let mut newest: HashMap<&str, &Pod> = HashMap::new();
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(id) = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(RUNTIME_ID))
            .filter(|id| wanted.contains(id.as_str()))
        else {
            continue;
        };
        let slot = newest.entry(id.as_str()).or_insert(pod);
        if pod.metadata.creation_timestamp > slot.metadata.creation_timestamp {
            *slot = pod;
        }
    }
    newest
        .into_iter()
        .map(|(id, pod)| (id.to_owned(), pod_state(pod)))
        .collect()
}

fn observed_as(state: SandboxState, detail: Option<String>) -> Observed {
    Observed::new(state, detail)
}

/// How many of a restart's reasons are kept: the pod's containers each remember only their
/// last termination.
const RESTART_REASONS: usize = 5;

/// The restarts of the pod's containers and, for each that ended before, how.
fn restarts(containers: &[&ContainerStatus]) -> Restarts {
    let count = containers
        .iter()
        .map(|container| u32::try_from(container.restart_count).unwrap_or(0))
        .sum();
    let reasons = containers
        .iter()
        .filter(|container| container.restart_count > 0)
        .filter_map(|container| container.last_state.as_ref()?.terminated.as_ref())
        .map(|ended| match ended.reason.as_deref() {
            Some(reason) => format!("{reason} (exit code {})", ended.exit_code),
            None => format!("exit code {}", ended.exit_code),
        })
        .take(RESTART_REASONS)
        .collect();
    Restarts { count, reasons }
}

/// `reason: message`, or whichever of the two there is.
fn reason_message(reason: Option<&str>, message: Option<&str>) -> String {
    match (
        reason.filter(|r| !r.is_empty()),
        message.filter(|m| !m.is_empty()),
    ) {
        (Some(reason), Some(message)) => format!("{reason}: {message}"),
        (Some(text), None) | (None, Some(text)) => text.to_owned(),
        (None, None) => "no reason given".to_owned(),
    }
}

/// What one pod says of its sandbox, its containers' restarts included.
pub fn pod_state(pod: &Pod) -> Observed {
    let mut observed = pod_condition(pod);
    if let Some(status) = &pod.status {
        let containers: Vec<&ContainerStatus> = status
            .init_container_statuses
            .iter()
            .chain(&status.container_statuses)
            .flatten()
            .collect();
        observed.restarts = restarts(&containers);
        // The pod's IP: what its connections to Sandgate come from (pods reach Services
        // without address translation of their source).
        observed.source_address = status
            .pod_ip
            .as_deref()
            .and_then(|ip| ip.parse::<std::net::IpAddr>().ok())
            .map(|ip| ip.to_canonical().to_string());
    }
    observed
}

/// The state and detail one pod gives its sandbox.
fn pod_condition(pod: &Pod) -> Observed {
    let Some(status) = &pod.status else {
        return observed_as(SandboxState::Starting, None);
    };
    if status.phase.as_deref() == Some("Failed") {
        let why = reason_message(status.reason.as_deref(), status.message.as_deref());
        return observed_as(SandboxState::Error, Some(format!("pod failed: {why}")));
    }
    let containers: Vec<&ContainerStatus> = status
        .init_container_statuses
        .iter()
        .chain(&status.container_statuses)
        .flatten()
        .collect();
    for container in &containers {
        let Some(waiting) = container
            .state
            .as_ref()
            .and_then(|state| state.waiting.as_ref())
        else {
            continue;
        };
        let reason = waiting.reason.as_deref().unwrap_or_default();
        let why = reason_message(Some(reason), waiting.message.as_deref());
        if HOPELESS.contains(&reason) {
            return observed_as(
                SandboxState::Error,
                Some(format!("image pull failed: {why}")),
            );
        }
        if IMAGE_PULL_WAITS.contains(&reason) {
            return observed_as(
                SandboxState::Starting,
                Some(format!("image pull failing: {why}")),
            );
        }
        if CREATE_WAITS.contains(&reason) {
            return observed_as(
                SandboxState::Starting,
                Some(format!(
                    "the container cannot be created: {why}{}",
                    create_hint(waiting.message.as_deref().unwrap_or_default())
                )),
            );
        }
        if reason == "CrashLoopBackOff" {
            return observed_as(
                SandboxState::Starting,
                Some(format!(
                    "container keeps crashing: {why}{}",
                    last_exit(container)
                )),
            );
        }
    }
    let ready = status
        .container_statuses
        .as_ref()
        .is_some_and(|statuses| !statuses.is_empty() && statuses.iter().all(|c| c.ready));
    if ready {
        return observed_as(SandboxState::Running, None);
    }
    let unschedulable = status.conditions.iter().flatten().find(|condition| {
        condition.type_ == "PodScheduled"
            && condition.status == "False"
            && condition.reason.as_deref() == Some("Unschedulable")
    });
    if let Some(condition) = unschedulable {
        let message = condition.message.as_deref().unwrap_or("no node fits");
        return observed_as(
            SandboxState::Starting,
            Some(format!("unschedulable: {message}")),
        );
    }
    observed_as(SandboxState::Starting, None)
}

/// What to change, for the kubelet's refusals that name their remedy: an image whose user
/// is root (or not numeric) under `runAsNonRoot`.
fn create_hint(message: &str) -> &'static str {
    if message.contains("runAsNonRoot") {
        " (give the sandbox a non-zero run_as_user, use an image with a numeric non-root \
         user, or allow root with SANDBOX_POD_SECURITY=baseline)"
    } else {
        ""
    }
}

/// How the container's previous run ended, for a crash loop's detail.
fn last_exit(container: &ContainerStatus) -> String {
    container
        .last_state
        .as_ref()
        .and_then(|state| state.terminated.as_ref())
        .map(|ended| match ended.reason.as_deref() {
            Some(reason) => format!(" (last exit code {}: {reason})", ended.exit_code),
            None => format!(" (last exit code {})", ended.exit_code),
        })
        .unwrap_or_default()
}

/// The sandbox an object belongs to, by its label.
fn runtime_id(metadata: &ObjectMeta) -> Option<&str> {
    metadata
        .labels
        .as_ref()?
        .get(RUNTIME_ID)
        .map(String::as_str)
}

/// Each of `sandboxes` without a pod (not in `seen`) whose Deployment or ReplicaSets say
/// why: a `ReplicaFailure` (the cluster refused the pod: it keeps trying, so the sandbox
/// is still starting, with the refusal as its detail), or a Deployment that made no
/// progress within its deadline (in error).
pub fn without_pods(
    deployments: &[Deployment],
    replica_sets: &[ReplicaSet],
    sandboxes: &[StoredSandbox],
    seen: &HashMap<String, Observed>,
) -> HashMap<String, Observed> {
    // (sandbox, type, status, why) of every condition of their Deployments and ReplicaSets.
    let deployment_conditions = deployments.iter().flat_map(|deployment| {
        let id = runtime_id(&deployment.metadata);
        let conditions = deployment
            .status
            .iter()
            .flat_map(|status| status.conditions.iter().flatten());
        conditions.map(move |c| (id, &c.type_, &c.status, &c.reason, &c.message))
    });
    let set_conditions = replica_sets.iter().flat_map(|set| {
        let id = runtime_id(&set.metadata);
        let conditions = set
            .status
            .iter()
            .flat_map(|status| status.conditions.iter().flatten());
        conditions.map(move |c| (id, &c.type_, &c.status, &c.reason, &c.message))
    });
    let mut refused: HashMap<&str, String> = HashMap::new();
    let mut stalled: HashMap<&str, String> = HashMap::new();
    for (id, kind, status, reason, message) in deployment_conditions.chain(set_conditions) {
        let Some(id) = id else { continue };
        let why = reason_message(reason.as_deref(), message.as_deref());
        match (kind.as_deref(), status.as_deref()) {
            (Some("ReplicaFailure"), Some("True")) => {
                refused.insert(id, why);
            }
            (Some("Progressing"), Some("False")) => {
                stalled.insert(id, why);
            }
            _ => {}
        }
    }
    sandboxes
        .iter()
        .filter(|sandbox| !seen.contains_key(&sandbox.runtime_id))
        .filter_map(|sandbox| {
            let id = sandbox.runtime_id.as_str();
            let refusal = refused
                .get(id)
                .map(|why| format!("the cluster refuses to create its pod: {why}"));
            let observed = match (stalled.get(id), refusal) {
                (Some(stall), refusal) => observed_as(
                    SandboxState::Error,
                    Some(match refusal {
                        Some(refusal) => format!("{refusal} (no progress: {stall})"),
                        None => format!("the deployment made no progress: {stall}"),
                    }),
                ),
                (None, Some(refusal)) => observed_as(SandboxState::Starting, Some(refusal)),
                (None, None) => return None,
            };
            Some((sandbox.runtime_id.clone(), observed))
        })
        .collect()
}
