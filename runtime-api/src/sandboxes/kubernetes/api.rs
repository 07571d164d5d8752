//! The driver's calls to the Kubernetes API: each request built from the resource's path,
//! sent, and its answer read by the driver itself rather than through kube's typed calls,
//! which log a body they cannot parse (Secrets, and the Deployments of older releases,
//! hold session keys). Errors name the object and carry the API's reason, never a body.

use k8s_openapi::api::apps::v1::Deployment;
use kube::Resource;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ObjectList, Request};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{FIELD_MANAGER, KubernetesDriver, objects};
use crate::sandboxes::driver::DriverError;

impl KubernetesDriver {
    pub(super) fn request<K: Resource<DynamicType = ()>>(&self) -> Request {
        Request::new(K::url_path(&(), Some(&self.options.namespace)))
    }

    /// `action` on the object `kind/name` failed with `err`: a message that names both and
    /// carries the API's reason (never a body, which may hold a session key).
    pub(super) fn failed(
        &self,
        action: &str,
        kind: &str,
        name: &str,
        err: kube::Error,
    ) -> DriverError {
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
    pub(super) async fn send(&self, request: http::Request<Vec<u8>>) -> Result<(), kube::Error> {
        self.client.request_text(request).await.map(drop)
    }

    /// Reads `text`, an answer about `what`; the error names where it broke, never what it
    /// held (a session key, in an older release's Deployment).
    pub(super) fn decode<T: DeserializeOwned>(
        &self,
        text: &str,
        what: &str,
    ) -> Result<T, DriverError> {
        serde_json::from_str(text).map_err(|err| {
            DriverError(format!(
                "cannot read {what} in namespace {}: {:?} error at line {} column {}",
                self.options.namespace,
                err.classify(),
                err.line(),
                err.column()
            ))
        })
    }

    /// The object `name` as the API server has it.
    pub(super) async fn get<K>(&self, name: &str) -> Result<K, DriverError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        let kind = K::kind(&());
        let request = self
            .request::<K>()
            .get(name, &kube::api::GetParams::default())
            .map_err(|err| self.failed("get", &kind, name, kube::Error::BuildRequest(err)))?;
        let text = self
            .client
            .request_text(request)
            .await
            .map_err(|err| self.failed("get", &kind, name, err))?;
        self.decode(&text, &format!("{kind} {name}"))
    }

    /// Creates the sandbox's Deployment, or finds the one a partial create left; the
    /// Deployment as the API server has it, whose uid its dependents name.
    pub(super) async fn create_deployment(
        &self,
        deployment: &Deployment,
    ) -> Result<Deployment, DriverError> {
        let name = deployment.metadata.name.as_deref().unwrap_or_default();
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        let body = serde_json::to_vec(deployment)
            .map_err(|err| DriverError(format!("cannot encode Deployment {name}: {err}")))?;
        let request = self
            .request::<Deployment>()
            .create(&params, body)
            .map_err(|err| {
                self.failed("create", "Deployment", name, kube::Error::BuildRequest(err))
            })?;
        match self.client.request_text(request).await {
            Ok(text) => self.decode(&text, &format!("Deployment {name}")),
            Err(kube::Error::Api(status)) if status.code == 409 => self.get(name).await,
            Err(err) => Err(self.failed("create", "Deployment", name, err)),
        }
    }

    /// Creates `object`; one that exists already counts as created, so that a retry after
    /// a partial create completes it.
    pub(super) async fn create<K>(&self, object: &K) -> Result<(), DriverError>
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

    pub(super) async fn patch<K>(
        &self,
        name: &str,
        patch: &Patch<serde_json::Value>,
    ) -> Result<(), DriverError>
    where
        K: Resource<DynamicType = ()>,
    {
        self.try_patch::<K>(name, patch)
            .await
            .map_err(|err| self.failed("patch", &K::kind(&()), name, err))
    }

    /// [`Self::patch`], with the API's own error, for a caller that handles one.
    pub(super) async fn try_patch<K>(
        &self,
        name: &str,
        patch: &Patch<serde_json::Value>,
    ) -> Result<(), kube::Error>
    where
        K: Resource<DynamicType = ()>,
    {
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let request = self
            .request::<K>()
            .patch(name, &params, patch)
            .map_err(kube::Error::BuildRequest)?;
        self.send(request).await
    }

    /// Deletes `name`; one already gone counts as deleted. Dependents (the Deployment's
    /// ReplicaSet and pods) go in the background.
    pub(super) async fn delete<K>(&self, name: &str) -> Result<(), DriverError>
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

    /// Sandgate's objects of kind `K` in the namespace; only `runtime_id`'s when given, so
    /// that reading one sandbox's status does not list (and decode) every sandbox's.
    pub(super) async fn list<K>(&self, runtime_id: Option<&str>) -> Result<Vec<K>, DriverError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned + Clone,
    {
        let plural = K::plural(&());
        let mut selector = format!("{}={}", objects::MANAGED_BY, objects::MANAGER);
        if let Some(runtime_id) = runtime_id {
            selector = format!("{selector},{}={runtime_id}", objects::RUNTIME_ID);
        }
        let request = self
            .request::<K>()
            .list(&ListParams::default().labels(&selector))
            .map_err(|err| {
                self.failed("list", &plural, &selector, kube::Error::BuildRequest(err))
            })?;
        let text = self
            .client
            .request_text(request)
            .await
            .map_err(|err| self.failed("list", &plural, &selector, err))?;
        let list: ObjectList<K> = self.decode(&text, &format!("the {plural} list"))?;
        Ok(list.items)
    }
}
