//! The app server's own runtime API client, unchanged, against Sandgate: openhands-ai
//! 1.11.0's `RemoteSandboxService` and `DynamicRemoteSandboxSpecService` (installed from
//! PyPI into `.tools/app-server` by `scripts/install-real-clients`), driven by
//! `tests/real_clients/runtime_client_drive.py` through the specs it reads from the warm
//! runtime configurations, a warm start of the default spec and a cold one (`command:
//! null`), get, batch, search, pause, resume with a new key, delete, and its sandbox limit
//! with a paused sandbox.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Backend, REAL_CLIENTS, RUNTIME_KEY, Sandgate, Steps, tool};

const WARM_IMAGE: &str = "ghcr.io/acme/agent:warm";
const COLD_IMAGE: &str = "ghcr.io/acme/agent:cold";

/// What the client's start of a warm spec sends, as a pool configuration: its command, the
/// working directory and worker ports it always sets.
fn warm_runtimes() -> Value {
    json!({"count": 1, "configs": [{
        "name": "v1_current", "image": WARM_IMAGE, "working_dir": "/workspace",
        "command": ["/usr/local/bin/agent-server", "--port", "60000"],
        "environment": {"WORKER_1": "12000", "WORKER_2": "12001"},
    }]})
}

/// Runs the driver against `sandgate`; its steps.
async fn drive(sandgate: &Sandgate) -> Steps {
    let url = sandgate.url("");
    Steps::run(
        tool("app-server/bin/python", REAL_CLIENTS),
        "tests/real_clients/runtime_client_drive.py",
        &[
            "--url",
            &url,
            "--api-key",
            RUNTIME_KEY,
            "--warm-image",
            WARM_IMAGE,
            "--cold-image",
            COLD_IMAGE,
        ],
        String::new,
    )
    .await
}

async fn remote_sandbox_service(backend: Backend) {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), warm_runtimes().to_string()).expect("write");
    let path = file.path().display().to_string();
    let sandgate = Sandgate::start_with(
        &backend,
        &[
            "--warm-runtimes-file",
            &path,
            "--local-sandbox-start-seconds",
            "1",
        ],
    )
    .await;
    // The warm sandbox is ready before the client starts one.
    sandgate.first_pool_ready(1, Duration::from_secs(15)).await;

    let steps = drive(&sandgate).await;
    let step = |name: &str| steps.get(name);
    // The app server's spec service reads the warm configuration back as a spec, and its
    // default (`v1_current`) is what the warm start runs.
    let specs = step("specs");
    assert_eq!(specs["ids"], json!([WARM_IMAGE]), "{specs}");
    assert_eq!(specs["default"], WARM_IMAGE);
    assert_eq!(specs["command"], warm_runtimes()["configs"][0]["command"]);
    assert_eq!(specs["working_dir"], "/workspace");
    assert_eq!(specs["found"], true);
    assert_eq!(
        step("start_warm")["status"],
        "RUNNING",
        "claimed: already up"
    );
    assert_eq!(step("start_warm")["has_key"], true);
    assert_eq!(
        step("start_cold")["status"],
        "STARTING",
        "{}",
        step("start_cold")
    );
    assert_eq!(step("get")["same_key"], true);
    assert_eq!(
        step("batch")["statuses"],
        json!(["RUNNING", "STARTING", null])
    );
    assert_eq!(step("search")["ids"].as_array().map(Vec::len), Some(2));
    assert_eq!(step("pause")["ok"], true);
    assert_eq!(step("paused")["status"], "PAUSED");
    assert_eq!(step("resume")["ok"], true);
    assert_eq!(step("resumed")["key_rotated"], true);
    // The limit (3): the paused third sandbox does not count, so the fourth start pauses
    // none of the running ones.
    let limit = &step("limit")["statuses"];
    assert_eq!(limit["warm"], "RUNNING", "{limit}");
    assert_ne!(limit["cold"], "PAUSED", "{limit}");
    assert_eq!(limit["third"], "PAUSED", "{limit}");
    assert_ne!(limit["fourth"], "PAUSED", "{limit}");
    assert_eq!(step("delete")["ok"], true);
    assert_eq!(step("deleted")["found"], false);

    // Sandgate's side: the warm start claimed the pool's sandbox, the cold one did not.
    let warm_id = step("start_warm")["id"].as_str().expect("id");
    let cold_id = step("start_cold")["id"].as_str().expect("id");
    for (id, pool) in [(warm_id, json!("v1_current")), (cold_id, Value::Null)] {
        let runtime: Value = sandgate
            .client
            .get(sandgate.url(&format!("/sessions/{id}")))
            .header("x-api-key", RUNTIME_KEY)
            .send()
            .await
            .expect("session")
            .json()
            .await
            .expect("JSON");
        assert_eq!(runtime["pool"], pool, "{runtime}");
    }
}

// On the embedded store and on Redis (the client's calls are the same on the others).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_sandbox_service_on_the_embedded_store() {
    remote_sandbox_service(Backend::embedded()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_sandbox_service_on_redis() {
    remote_sandbox_service(Backend::redis().await).await;
}
