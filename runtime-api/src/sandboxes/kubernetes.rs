//! The `kubernetes` driver: each sandbox is a Deployment of one pod, a claim for its
//! workspace, and a Service and an Ingress that route its host to it, all in one namespace
//! and all labelled with the sandbox's id so that the driver finds them again.
//!
//! The Deployment's pod template and its pods carry the session key in their environment,
//! so their bodies are never logged: the driver sends its requests and reads the answers
//! itself rather than through kube's typed calls, which log a body they cannot parse.

mod objects;
mod observe;

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::Resource;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ObjectList, Request};
use serde::Serialize;

use super::driver::{DriverError, Observed, SandboxDriver};
use crate::store::StoredSandbox;

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

    fn request<K: Resource<DynamicType = ()>>(&self) -> Request {
        Request::new(K::url_path(&(), Some(&self.options.namespace)))
    }

    /// `action` on the object `kind/name` failed with `err`: a message that names both and
    /// carries the API's reason (never a body, which may hold a session key).
    fn failed(&self, action: &str, kind: &str, name: &str, err: kube::Error) -> DriverError {
        let namespace = &self.options.namespace;
        let why = match err {
            kube::Error::Api(status) => {
                let reason = if status.reason.is_empty() {
                    "Failure"
                } else {
                    &status.reason
                };
                format!("{reason} ({}): {}", status.code, status.message)
            }
            other => other.to_string(),
        };
        DriverError(format!("cannot {action} {kind} {namespace}/{name}: {why}"))
    }

    /// Sends `request`, reads and drops the answer (it may hold a session key).
    async fn send(&self, request: http::Request<Vec<u8>>) -> Result<(), kube::Error> {
        self.client.request_text(request).await.map(drop)
    }

    /// Creates `object`; one that exists already counts as created, so that a retry after
    /// a partial create completes it.
    async fn create<K>(&self, object: &K) -> Result<(), DriverError>
    where
        K: Resource<DynamicType = ()> + Serialize,
    {
        let kind = K::kind(&());
        let name = object.meta().name.as_deref().unwrap_or_default();
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        let body = serde_json::to_vec(object)
            .map_err(|err| DriverError(format!("cannot encode {kind} {name}: {err}")))?;
        let request = self
            .request::<K>()
            .create(&params, body)
            .map_err(|err| self.failed("create", &kind, name, kube::Error::BuildRequest(err)))?;
        match self.send(request).await {
            Ok(()) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(err) => Err(self.failed("create", &kind, name, err)),
        }
    }

    async fn patch<K>(
        &self,
        name: &str,
        patch: &Patch<serde_json::Value>,
    ) -> Result<(), DriverError>
    where
        K: Resource<DynamicType = ()>,
    {
        let kind = K::kind(&());
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let request = self
            .request::<K>()
            .patch(name, &params, patch)
            .map_err(|err| self.failed("patch", &kind, name, kube::Error::BuildRequest(err)))?;
        self.send(request)
            .await
            .map_err(|err| self.failed("patch", &kind, name, err))
    }

    /// Deletes `name`; one already gone counts as deleted. Dependents (the Deployment's
    /// ReplicaSet and pods) go in the background.
    async fn delete<K>(&self, name: &str) -> Result<(), DriverError>
    where
        K: Resource<DynamicType = ()>,
    {
        let kind = K::kind(&());
        let request = self
            .request::<K>()
            .delete(name, &DeleteParams::background())
            .map_err(|err| self.failed("delete", &kind, name, kube::Error::BuildRequest(err)))?;
        match self.send(request).await {
            Ok(()) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(err) => Err(self.failed("delete", &kind, name, err)),
        }
    }

    /// Every pod of every sandbox in the namespace, in one call.
    /// Sandgate's pods in the namespace; only `runtime_id`'s when given, so that reading
    /// one sandbox's status does not list (and decode) every sandbox's pod.
    async fn pods(&self, runtime_id: Option<&str>) -> Result<Vec<Pod>, DriverError> {
        let mut selector = format!("{}={}", objects::MANAGED_BY, objects::MANAGER);
        if let Some(runtime_id) = runtime_id {
            selector = format!("{selector},{}={runtime_id}", objects::RUNTIME_ID);
        }
        let request = self
            .request::<Pod>()
            .list(&ListParams::default().labels(&selector))
            .map_err(|err| {
                self.failed("list", "pods", &selector, kube::Error::BuildRequest(err))
            })?;
        let text = self
            .client
            .request_text(request)
            .await
            .map_err(|err| self.failed("list", "pods", &selector, err))?;
        // The error names where the answer broke, never what it held (pods' keys).
        let list: ObjectList<Pod> = serde_json::from_str(&text).map_err(|err| {
            DriverError(format!(
                "cannot read the pod list of namespace {}: {:?} error at line {} column {}",
                self.options.namespace,
                err.classify(),
                err.line(),
                err.column()
            ))
        })?;
        Ok(list.items)
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
    async fn create(&self, sandbox: &StoredSandbox, session_key: &str) -> Result<(), DriverError> {
        let options = &self.options;
        let deployment = objects::deployment(sandbox, session_key, options);
        let service = objects::service(sandbox, options);
        let ingress = objects::ingress(sandbox, options);
        let claim = async {
            if objects::has_claim(sandbox) {
                self.create(&objects::claim(sandbox, options)).await
            } else {
                Ok(())
            }
        };
        // Independent objects, created at once: a cold start waits for the slowest only.
        let (claim, deployment, service, ingress) = tokio::join!(
            claim,
            self.create(&deployment),
            self.create(&service),
            self.create(&ingress),
        );
        all_ok([claim, deployment, service, ingress])?;
        tracing::debug!(runtime_id = %sandbox.runtime_id, namespace = %options.namespace, "sandbox created");
        Ok(())
    }

    async fn pause(&self, sandbox: &StoredSandbox) -> Result<(), DriverError> {
        let scale_down = serde_json::json!({ "spec": { "replicas": 0 } });
        self.patch::<Deployment>(
            &objects::name(&sandbox.runtime_id),
            &Patch::Merge(scale_down),
        )
        .await
    }

    async fn resume(&self, sandbox: &StoredSandbox, session_key: &str) -> Result<(), DriverError> {
        // A strategic merge patch merges the container and its environment by name: only
        // the key and the replica count change, the image stays the one created with.
        let restart = serde_json::json!({
            "spec": {
                "replicas": 1,
                "template": { "spec": { "containers": [{
                    "name": objects::CONTAINER,
                    "env": [{ "name": objects::SESSION_KEY_ENV, "value": session_key }],
                }] } }
            }
        });
        self.patch::<Deployment>(
            &objects::name(&sandbox.runtime_id),
            &Patch::Strategic(restart),
        )
        .await
    }

    async fn delete(&self, sandbox: &StoredSandbox) -> Result<(), DriverError> {
        let name = objects::name(&sandbox.runtime_id);
        let claim_name = objects::claim_name(&sandbox.runtime_id);
        let (deployment, service, ingress, claim) = tokio::join!(
            self.delete::<Deployment>(&name),
            self.delete::<Service>(&name),
            self.delete::<Ingress>(&name),
            // Asked for even when the sandbox has no claim (a FUSE mount): a 404 costs one
            // call, and a branch here could leave a claim behind.
            self.delete::<PersistentVolumeClaim>(&claim_name),
        );
        all_ok([deployment, service, ingress, claim])
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
        Ok(observe::observed(&self.pods(only).await?, sandboxes))
    }
}
