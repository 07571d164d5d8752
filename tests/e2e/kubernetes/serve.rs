//! `sandgate serve` with the kubernetes driver, driving the cluster its kubeconfig names.

use serde_json::{Value, json};

use crate::common::fake_kube::{DEPLOYMENTS, FakeKube, INGRESSES, PODS, SECRETS};

use super::*;

/// The real binary with `--sandbox-driver kubernetes`, finding the (fake) cluster through
/// its kubeconfig: a start creates the sandbox's objects before it answers, a pause scales
/// it to zero, and the URL answered is the Ingress's host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_drives_the_cluster_its_kubeconfig_names() {
    let kube = FakeKube::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"http://{}\"}}\nusers:\n- name: fake\n  user: {{}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: fake}}\ncurrent-context: fake\n",
            kube.address
        ),
    )
    .expect("kubeconfig");
    let data = dir.path().join("data");
    let args: Vec<String> = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().expect("utf-8"),
        "--default-api-key",
        crate::common::RUNTIME_KEY,
        "--sandbox-driver",
        "kubernetes",
        "--sandbox-namespace",
        NAMESPACE,
        "--storage-class",
        "fast-ssd",
        "--runtime-base-url",
        "runtime.example.com",
        "--runtime-disable-ssl",
        "false",
    ]
    .map(str::to_owned)
    .to_vec();
    let kubeconfig = kubeconfig.display().to_string();
    let sandgate =
        crate::common::SandgateProcess::spawn(&args, &[("KUBECONFIG", &kubeconfig)]).await;
    let client = reqwest::Client::new();

    let started: Value = client
        .post(sandgate.url("/start"))
        .header("x-api-key", crate::common::RUNTIME_KEY)
        .json(&json!({
            "image": "ghcr.io/acme/agent-server:2.0", "command": ["/agent"],
            "working_dir": "/workspace", "environment": {}, "session_id": "conv-k8s",
        }))
        .send()
        .await
        .expect("start")
        .json()
        .await
        .expect("JSON");
    let id = started["runtime_id"].as_str().expect("runtime_id");
    assert_eq!(started["url"], format!("https://{id}-runtime.example.com"));
    let name = format!("sandbox-{id}");
    let deployment = kube
        .object(DEPLOYMENTS, NAMESPACE, &name)
        .expect("deployment created");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "ghcr.io/acme/agent-server:2.0"
    );
    assert!(kube.object(INGRESSES, NAMESPACE, &name).is_some());
    let key = started["session_api_key"].as_str().expect("key");
    assert!(!deployment.to_string().contains(key), "{deployment}");
    let secret = kube
        .object(SECRETS, NAMESPACE, &format!("{name}-session"))
        .expect("the key's Secret");
    assert_eq!(secret["stringData"]["SESSION_API_KEY"], key);

    // The pod restarted twice (out of memory): the legacy fields the SDK logs say so.
    kube.put(
        PODS,
        pod(
            &format!("{name}-7d9f-x1"),
            id,
            json!({
                "phase": "Running",
                "containerStatuses": [{
                    "name": "sandbox", "image": "ghcr.io/acme/agent-server:2.0", "imageID": "",
                    "ready": true, "restartCount": 2, "started": true,
                    "state": { "running": { "startedAt": "2026-01-01T00:03:00Z" } },
                    "lastState": { "terminated": { "exitCode": 137, "reason": "OOMKilled" } },
                }],
            }),
        ),
    );
    let session: Value = client
        .get(sandgate.url("/sessions/conv-k8s"))
        .header("x-api-key", crate::common::RUNTIME_KEY)
        .send()
        .await
        .expect("session")
        .json()
        .await
        .expect("JSON");
    assert_eq!(session["pod_status"], "ready", "{session}");
    assert_eq!(session["restart_count"], 2, "{session}");
    assert_eq!(
        session["restart_reasons"],
        json!(["OOMKilled (exit code 137)"])
    );

    // Root, under the default restricted standard: refused before anything is made.
    let refused = client
        .post(sandgate.url("/start"))
        .header("x-api-key", crate::common::RUNTIME_KEY)
        .json(&json!({
            "image": "ghcr.io/acme/agent-server:2.0", "command": ["/agent"],
            "working_dir": "/workspace", "environment": {}, "session_id": "conv-root",
            "run_as_user": 0,
        }))
        .send()
        .await
        .expect("start as root");
    assert_eq!(refused.status(), 422);
    let body: Value = refused.json().await.expect("JSON");
    assert_eq!(
        body["detail"][0]["loc"],
        json!(["body", "run_as_user"]),
        "{body}"
    );
    assert_eq!(
        body["detail"][0]["input"], 0,
        "the input echoed, as FastAPI does"
    );
    assert!(
        body["detail"][0]["msg"]
            .as_str()
            .is_some_and(|msg| msg.contains("SANDBOX_POD_SECURITY")),
        "{body}"
    );
    assert_eq!(kube.names(DEPLOYMENTS, NAMESPACE).len(), 1);

    let paused = client
        .post(sandgate.url("/pause"))
        .header("x-api-key", crate::common::RUNTIME_KEY)
        .json(&json!({ "runtime_id": id }))
        .send()
        .await
        .expect("pause");
    assert_eq!(paused.status(), 200);
    let deployment = kube
        .object(DEPLOYMENTS, NAMESPACE, &name)
        .expect("deployment kept");
    assert_eq!(deployment["spec"]["replicas"], 0);
}
