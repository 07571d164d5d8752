//! Warm pools and the sandbox lifecycle on the local driver, driven pass by pass on a
//! clock the test moves: convergence, spec changes, removal, claims, pause and resume,
//! cleanup, and one reconciler at a time across replicas.
//!
//! This file holds the fixture (installer file, replicas over one store, a clock the
//! test moves); the tests are by concern: pools following their configurations
//! (`pools.rs`), claims, pause, resume and cleanup of sandboxes (`lifecycle.rs`), and the
//! reconciler across replicas, its cost and upgrades (`reconciler.rs`).

mod lifecycle;
mod pools;
mod reconciler;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sandgate_proto::sandboxes::v1::ListPoolsRequest;
use sandgate_proto::sandboxes::v1::sandboxes_server::Sandboxes as _;
use sandgate_runtime_api::Authenticator;
use sandgate_runtime_api::admin::installer::InstallerFile;
use sandgate_runtime_api::admin::source::WarmConfigSource;
use sandgate_runtime_api::sandboxes::driver::{LocalDriver, SandboxDriver};
use sandgate_runtime_api::sandboxes::reconciler::Pass;
use sandgate_runtime_api::sandboxes::{Reconciler, SandboxOptions, Sandboxes, SandboxesService};
use sandgate_store::{SandboxSpec, Store, StoredSandbox, StoredWarmConfig};
use serde_json::json;

use crate::common::{Backend, RUNTIME_KEY, TestClock};

const START_MS: i64 = 2_000;
const DAY_MS: i64 = 86_400_000;
pub(crate) const IMAGE: &str = "ghcr.io/acme/agent:1.0";

fn installer(count: i64) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    let text = json!({
        "count": count,
        "configs": [{
            "name": "v1_current", "image": IMAGE, "working_dir": "/workspace",
            "command": ["/usr/local/bin/agent-server", "--port", "8000"],
            "environment": {"OH_WEBHOOKS_0_BASE_URL": "http://app-a/hooks", "LOG_LEVEL": "info"},
        }]
    });
    std::fs::write(file.path(), text.to_string()).expect("write installer file");
    file
}

/// What a start for the installer default asks for.
fn default_spec() -> SandboxSpec {
    SandboxSpec {
        image: IMAGE.into(),
        command: vec![
            "/usr/local/bin/agent-server".into(),
            "--port".into(),
            "8000".into(),
        ],
        working_dir: "/workspace".into(),
        environment: BTreeMap::from([
            ("OH_WEBHOOKS_0_BASE_URL".into(), "http://app-a/hooks".into()),
            ("LOG_LEVEL".into(), "info".into()),
        ]),
        ..SandboxSpec::default()
    }
}

pub(crate) fn saved(image: &str, count: i64) -> StoredWarmConfig {
    let spec = default_spec();
    StoredWarmConfig {
        image: image.into(),
        working_dir: spec.working_dir,
        command: spec.command,
        environment: spec.environment,
        count: Some(count),
        ..StoredWarmConfig::default()
    }
}

/// One replica: the store, the sandboxes over it, its reconciler and service.
pub(crate) struct Replica {
    pub(crate) store: Store,
    pub(crate) sandboxes: Arc<Sandboxes>,
    pub(crate) reconciler: Reconciler,
    pub(crate) service: SandboxesService,
}

pub(crate) struct Fixture {
    pub(crate) clock: Arc<TestClock>,
    file: tempfile::NamedTempFile,
    pub(crate) backend: Backend,
}

impl Fixture {
    pub(crate) fn new(backend: Backend, count: i64) -> Self {
        Self {
            clock: Arc::new(TestClock::at(START_MS)),
            file: installer(count),
            backend,
        }
    }

    pub(crate) async fn replica(&self) -> Replica {
        let store = crate::store_conformance::open(&self.backend).await;
        self.replica_on(store)
    }

    fn replica_on(&self, store: Store) -> Replica {
        let driver = Arc::new(LocalDriver::new(Duration::from_secs(2), self.clock.clone()));
        self.replica_with(store, driver)
    }

    pub(crate) fn replica_with(&self, store: Store, driver: Arc<dyn SandboxDriver>) -> Replica {
        let configs = Arc::new(WarmConfigSource::new(
            store.clone(),
            InstallerFile::open(Some(self.file.path().to_path_buf())).expect("installer"),
            false,
        ));
        let sandboxes = Arc::new(Sandboxes::new(
            store.clone(),
            driver,
            b"a session key secret of 32 bytes",
            self.clock.clone(),
            SandboxOptions {
                base_url: "runtime.example.com".into(),
                ..SandboxOptions::default()
            },
            configs,
        ));
        let auth = Arc::new(Authenticator::new(
            &[],
            &[RUNTIME_KEY.to_owned()],
            store.session_keys.clone(),
        ));
        Replica {
            reconciler: Reconciler::new(sandboxes.clone()),
            service: SandboxesService::new(sandboxes.clone(), auth),
            sandboxes,
            store,
        }
    }
}

impl Replica {
    pub(crate) async fn pass(&self) -> Pass {
        self.reconciler.pass().await.expect("pass")
    }

    /// Warm (unclaimed) sandboxes by pool, with their states.
    pub(crate) async fn warm(&self) -> Vec<StoredSandbox> {
        let mut warm: Vec<_> = self
            .store
            .sandboxes
            .sandboxes()
            .await
            .expect("sandboxes")
            .into_iter()
            .filter(|record| record.session_id.is_none())
            .collect();
        warm.sort_by(|a, b| a.runtime_id.cmp(&b.runtime_id));
        warm
    }

    /// `(name, image, target, ready, starting, failed)` of every pool.
    pub(crate) async fn pools(&self) -> Vec<(String, String, i64, i64, i64, i64)> {
        let mut request = tonic::Request::new(ListPoolsRequest {});
        request
            .metadata_mut()
            .insert("x-api-key", RUNTIME_KEY.parse().expect("metadata"));
        self.service
            .list_pools(request)
            .await
            .expect("pools")
            .into_inner()
            .pools
            .into_iter()
            .map(|pool| {
                (
                    pool.name,
                    pool.image,
                    pool.target,
                    pool.ready,
                    pool.starting,
                    pool.failed,
                )
            })
            .collect()
    }
}

fn pool(
    name: &str,
    image: &str,
    target: i64,
    ready: i64,
    starting: i64,
) -> (String, String, i64, i64, i64, i64) {
    (name.into(), image.into(), target, ready, starting, 0)
}
