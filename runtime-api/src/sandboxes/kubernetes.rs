//! The `kubernetes` driver: each sandbox is a Deployment of one pod, a Secret with its
//! session key and secret key, a claim for its workspace, and a Service and an Ingress that route its host
//! to it, all in one namespace, all labelled with the sandbox's id so that the driver finds
//! them again, and all but the Deployment owned by it.
//!
//! Secrets and the Deployments of older releases carry session keys, so bodies are never
//! logged: the driver sends its requests and reads the answers itself (`api.rs`) rather
//! than through kube's typed calls, which log a body they cannot parse.
//!
//! A failed sandbox is recovered by making again what is missing of it, keeping what
//! exists (its workspace claim above all), then restarting its pod with a new key.

mod api;
mod objects;
mod observe;

pub use objects::refusal;

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::Patch;

use super::driver::{DriverError, Observed, Refusal, SECRET_KEY_ENV, SandboxDriver, SandboxKeys};
use super::matching::DEFERRED_INIT_ENV;
use sandgate_store::{SandboxSpec, StoredSandbox};

/// How much the sandboxes' pods may do, as the Pod Security Standards name the levels
/// (`SANDBOX_POD_SECURITY`). The sandbox namespace can enforce the same level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PodSecurity {
    /// No root, no capabilities, no privilege escalation, the runtime's seccomp profile: a
    /// start asking for user 0 or a FUSE mount is refused.
    #[default]
    Restricted,
    /// Root allowed, with the runtime's default capabilities; still no escalation.
    Baseline,
    /// As baseline, and FUSE S3 mounts run privileged (`/dev/fuse`, CAP_SYS_ADMIN).
    Privileged,
}

impl std::str::FromStr for PodSecurity {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "restricted" => Ok(Self::Restricted),
            "baseline" => Ok(Self::Baseline),
            "privileged" => Ok(Self::Privileged),
            other => Err(format!(
                "{other:?} is not a Pod Security Standard level (restricted, baseline, privileged)"
            )),
        }
    }
}

/// Where and how sandboxes run on the cluster.
#[derive(Clone, Debug)]
pub struct KubernetesOptions {
    /// `SANDBOX_NAMESPACE`: every sandbox object lives here.
    pub namespace: String,
    /// `STORAGE_CLASS` of the workspace claims; `None`: the cluster's default class.
    pub storage_class: Option<String>,
    /// `EPHEMERAL_STORAGE_SIZE`, a Kubernetes quantity such as `25Gi`: the scratch disk
    /// (image layers written to, `/tmp`) a sandbox may use outside its workspace.
    pub ephemeral_storage: String,
    /// The port the agent server listens on inside the sandbox.
    pub port: u16,
    /// The Ingress class; `None`: the cluster's default.
    pub ingress_class: Option<String>,
    /// The TLS secret (a wildcard certificate for the sandbox hosts); `None`: no TLS on
    /// the Ingress, e.g. when TLS ends at a load balancer in front of it.
    pub tls_secret: Option<String>,
    /// `RUNTIME_BASE_URL`: a sandbox's host is `{runtime_id}{separator}{base_url}`.
    pub base_url: String,
    /// `RUNTIME_URL_SEPARATOR`.
    pub separator: String,
    /// `SANDBOX_POD_SECURITY`.
    pub pod_security: PodSecurity,
}

impl Default for KubernetesOptions {
    fn default() -> Self {
        Self {
            namespace: "sandgate-sandboxes".into(),
            storage_class: None,
            ephemeral_storage: "25Gi".into(),
            port: 8000,
            ingress_class: None,
            tls_secret: None,
            base_url: "runtime.localhost".into(),
            separator: "-".into(),
            pod_security: PodSecurity::Restricted,
        }
    }
}

/// How long one API call may take before the driver gives up on it.
const API_TIMEOUT: Duration = Duration::from_secs(30);

/// Who the API server records as the author of the driver's writes (`managedFields`).
const FIELD_MANAGER: &str = "sandgate";

pub struct KubernetesDriver {
    client: kube::Client,
    options: KubernetesOptions,
}

impl KubernetesDriver {
    /// A driver on the cluster this process finds: `KUBECONFIG` (or `~/.kube/config`)
    /// when there is one, else the pod's in-cluster service account.
    pub async fn connect(options: KubernetesOptions) -> Result<Self, DriverError> {
        let mut config = kube::Config::infer().await.map_err(|err| {
            DriverError(format!(
                "cannot find the Kubernetes API (no usable kubeconfig, not in a cluster): {err}"
            ))
        })?;
        // Every call the driver makes is short (no watches): a stalled API server fails
        // the lifecycle call that waits on it instead of holding it without end.
        config.read_timeout = Some(API_TIMEOUT);
        config.write_timeout = Some(API_TIMEOUT);
        config.reset_reader_on_write = true;
        let client = kube::Client::try_from(config)
            .map_err(|err| DriverError(format!("cannot build the Kubernetes API client: {err}")))?;
        Ok(Self::with_client(client, options))
    }

    /// A driver on `client`: tests point one at a fake API server.
    pub fn with_client(client: kube::Client, options: KubernetesOptions) -> Self {
        Self { client, options }
    }

    /// Removes every object of the sandbox `runtime_id`; one already gone is no error.
    async fn remove(&self, runtime_id: &str) -> Result<(), DriverError> {
        let name = objects::name(runtime_id);
        let secret_name = objects::secret_name(runtime_id);
        let claim_name = objects::claim_name(runtime_id);
        let (deployment, secret, service, ingress, claim) = tokio::join!(
            self.delete::<Deployment>(&name),
            self.delete::<Secret>(&secret_name),
            self.delete::<Service>(&name),
            self.delete::<Ingress>(&name),
            // Asked for even when the sandbox has no claim (a FUSE mount): a 404 costs one
            // call, and a branch here could leave a claim behind.
            self.delete::<PersistentVolumeClaim>(&claim_name),
        );
        all_ok([deployment, secret, service, ingress, claim])
    }

    /// Puts the keys in the sandbox's Secret, creating it (owned by the Deployment) when it
    /// is missing: a sandbox an older release made kept its key in the Deployment.
    async fn store_key(
        &self,
        sandbox: &StoredSandbox,
        keys: &SandboxKeys,
    ) -> Result<(), DriverError> {
        let name = objects::secret_name(&sandbox.runtime_id);
        let replace = serde_json::json!({ "stringData": objects::secret_data(keys) });
        match self
            .try_patch::<Secret>(&name, &Patch::Merge(replace))
            .await
        {
            Ok(()) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => {
                let deployment: Deployment = self.get(&objects::name(&sandbox.runtime_id)).await?;
                let owner = objects::owned_by(&deployment).ok_or_else(|| {
                    DriverError("the API answered a Deployment without a uid".into())
                })?;
                self.create(&objects::secret(sandbox, keys, &self.options, &owner))
                    .await
            }
            Err(err) => Err(self.failed("patch", "Secret", &name, err)),
        }
    }

    /// Makes the sandbox's objects, each that exists already counting as made. `cleanup`:
    /// a failure removes what was made (a first create), rather than keeping it (a
    /// recovery, whose workspace may hold work).
    async fn make(
        &self,
        sandbox: &StoredSandbox,
        keys: &SandboxKeys,
        cleanup: bool,
    ) -> Result<(), DriverError> {
        let options = &self.options;
        // The Deployment first: the rest are its dependents, named by its uid. Its pod
        // waits for its Secret and claim, which follow at once.
        let deployment = self
            .create_deployment(&objects::deployment(sandbox, options))
            .await?;
        let owner = objects::owned_by(&deployment)
            .ok_or_else(|| DriverError("the API answered a Deployment without a uid".into()))?;
        let claim = async {
            if objects::has_claim(sandbox) {
                self.create(&objects::claim(sandbox, options, &owner)).await
            } else {
                Ok(())
            }
        };
        // Independent objects, created at once: a cold start waits for the slowest only.
        let secret = objects::secret(sandbox, keys, options, &owner);
        let service = objects::service(sandbox, options, &owner);
        let ingress = objects::ingress(sandbox, options, &owner);
        let (secret, claim, service, ingress) = tokio::join!(
            self.create(&secret),
            claim,
            self.create(&service),
            self.create(&ingress),
        );
        if let Err(failed) = all_ok([secret, claim, service, ingress]) {
            if !cleanup {
                return Err(failed);
            }
            // Half made: nothing is left behind to wait for a retry that may never come
            // (a claim that holds a volume, a Service routing nowhere).
            return Err(match self.remove(&sandbox.runtime_id).await {
                Ok(()) => DriverError(format!("{failed}; the half-made sandbox was removed")),
                Err(cleanup) => DriverError(format!(
                    "{failed}; removing the half-made sandbox failed too ({cleanup}), the orphan sweep retries"
                )),
            });
        }
        tracing::debug!(runtime_id = %sandbox.runtime_id, namespace = %options.namespace, "sandbox created");
        Ok(())
    }
}

/// `Ok` when every call succeeded, else every failure, one after the other.
fn all_ok(results: impl IntoIterator<Item = Result<(), DriverError>>) -> Result<(), DriverError> {
    let failures: Vec<String> = results
        .into_iter()
        .filter_map(|result| result.err().map(|err| err.0))
        .collect();
    if failures.is_empty() {
        Ok(())
    } else {
        Err(DriverError(failures.join("; ")))
    }
}

#[async_trait]
impl SandboxDriver for KubernetesDriver {
    fn admit(&self, spec: &SandboxSpec) -> Result<(), Refusal> {
        match objects::refusal(spec, self.options.pod_security) {
            Some(refusal) => Err(refusal),
            None => Ok(()),
        }
    }

    async fn create(&self, sandbox: &StoredSandbox, keys: &SandboxKeys) -> Result<(), DriverError> {
        self.make(sandbox, keys, true).await
    }

    async fn recover(
        &self,
        sandbox: &StoredSandbox,
        keys: &SandboxKeys,
    ) -> Result<(), DriverError> {
        // What exists is kept (a 409 counts as made): the workspace claim above all. A
        // part that cannot be made leaves the rest for the next attempt, not deleted.
        self.make(sandbox, keys, false).await?;
        self.resume(sandbox, keys).await
    }

    async fn pause(&self, sandbox: &StoredSandbox) -> Result<(), DriverError> {
        let scale_down = serde_json::json!({ "spec": { "replicas": 0 } });
        self.patch::<Deployment>(
            &objects::name(&sandbox.runtime_id),
            &Patch::Merge(scale_down),
        )
        .await
    }

    async fn resume(&self, sandbox: &StoredSandbox, keys: &SandboxKeys) -> Result<(), DriverError> {
        self.store_key(sandbox, keys).await?;
        // A strategic merge patch merges the container and its environment by name: the
        // image stays the one created with. The key's version in the pod template starts a
        // new pod, which reads the new key, even when one still runs (a sandbox in error);
        // the keys' entries are the Secret's, also in a Deployment an older release made
        // with the key in clear (its `value` goes) or without a secret key.
        let from_secret = |name: &str| {
            serde_json::json!({
                "name": name,
                "value": null,
                "valueFrom": { "secretKeyRef": {
                    "name": objects::secret_name(&sandbox.runtime_id),
                    "key": name,
                    "optional": false,
                } },
            })
        };
        let mut env = vec![
            from_secret(objects::SESSION_KEY_ENV),
            from_secret(SECRET_KEY_ENV),
        ];
        if sandbox.personalised {
            // Made dormant with its pool's environment, personalised at its claim: the new
            // pod runs the start's environment instead, awake (the pool's other keys stay,
            // under the start's values wherever it names them).
            env.extend(
                sandbox
                    .spec
                    .environment
                    .iter()
                    .filter(|(name, _)| {
                        ![objects::SESSION_KEY_ENV, SECRET_KEY_ENV, DEFERRED_INIT_ENV]
                            .contains(&name.as_str())
                    })
                    .map(|(name, value)| serde_json::json!({ "name": name, "value": value })),
            );
            env.push(serde_json::json!({ "name": DEFERRED_INIT_ENV, "value": "false" }));
        }
        let restart = serde_json::json!({
            "spec": {
                "replicas": 1,
                "template": {
                    "metadata": { "annotations": { objects::KEY_VERSION: sandbox.key_nonce } },
                    "spec": { "containers": [{
                        "name": objects::CONTAINER,
                        "env": env,
                    }] },
                },
            }
        });
        self.patch::<Deployment>(
            &objects::name(&sandbox.runtime_id),
            &Patch::Strategic(restart),
        )
        .await
    }

    async fn delete(&self, runtime_id: &str) -> Result<(), DriverError> {
        self.remove(runtime_id).await
    }

    fn init_url(&self, sandbox: &StoredSandbox) -> Option<String> {
        Some(objects::internal_url(
            &sandbox.runtime_id,
            &self.options.namespace,
        ))
    }

    /// Secrets are not listed: the driver may write them, never read them (the chart's
    /// Role), and each is its Deployment's dependent, which the cluster deletes with it;
    /// a sweep's delete removes one by name all the same.
    async fn workloads(&self) -> Result<HashMap<String, i64>, DriverError> {
        let (deployments, services, ingresses, claims) = tokio::join!(
            self.list::<Deployment>(None),
            self.list::<Service>(None),
            self.list::<Ingress>(None),
            self.list::<PersistentVolumeClaim>(None),
        );
        let metadata = deployments?
            .into_iter()
            .map(|object| object.metadata)
            .chain(services?.into_iter().map(|object| object.metadata))
            .chain(ingresses?.into_iter().map(|object| object.metadata))
            .chain(claims?.into_iter().map(|object| object.metadata));
        let mut workloads: HashMap<String, i64> = HashMap::new();
        for meta in metadata {
            let Some(id) = meta
                .labels
                .as_ref()
                .and_then(|labels| labels.get(objects::RUNTIME_ID))
            else {
                continue;
            };
            // An object without a creation time counts as new: it is kept.
            let created = meta
                .creation_timestamp
                .map_or(i64::MAX, |time| time.0.as_millisecond());
            workloads
                .entry(id.clone())
                .and_modify(|oldest| *oldest = (*oldest).min(created))
                .or_insert(created);
        }
        Ok(workloads)
    }

    async fn observe(
        &self,
        sandboxes: &[StoredSandbox],
    ) -> Result<HashMap<String, Observed>, DriverError> {
        if sandboxes.is_empty() {
            return Ok(HashMap::new());
        }
        let only = match sandboxes {
            [one] => Some(one.runtime_id.as_str()),
            _ => None,
        };
        let mut observed = observe::observed(&self.list::<Pod>(only).await?, sandboxes);
        if observed.len() < sandboxes.len() {
            // Sandboxes without a pod: the cluster may be refusing to create it
            // (admission, quota), which only their Deployment and ReplicaSet say.
            let (deployments, replica_sets) =
                tokio::join!(self.list::<Deployment>(only), self.list::<ReplicaSet>(only));
            observed.extend(observe::without_pods(
                &deployments?,
                &replica_sets?,
                sandboxes,
                &observed,
            ));
        }
        Ok(observed)
    }
}
