//! The `kubernetes` driver's failures through the real binary on the fake API server, as
//! an operator and the app server's client see them: the pools' listing and the metrics
//! agree on what failed and why, and a failed start recovers through the REST edge.

use std::path::Path;

use axum::http::Method;
use serde_json::json;

use crate::common::fake_kube::{DEPLOYMENTS, FakeKube, INGRESSES, PODS, SERVICES};
use crate::common::{RUNTIME_KEY, SandgateProcess};
use crate::kubernetes::{NAMESPACE, objects_of, pod, waiting};

/// `sandgate serve` on the Kubernetes driver, finding `kube` through a kubeconfig written
/// in `dir`, with `extra` flags.
async fn serve(kube: &FakeKube, dir: &Path, extra: &[&str]) -> SandgateProcess {
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"http://{}\"}}\nusers:\n- name: fake\n  user: {{}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: fake}}\ncurrent-context: fake\n",
            kube.address
        ),
    )
    .expect("kubeconfig");
    let data = dir.join("data");
    let mut args: Vec<String> = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().expect("utf-8"),
        "--default-api-key",
        RUNTIME_KEY,
        "--sandbox-driver",
        "kubernetes",
        "--sandbox-namespace",
        NAMESPACE,
        "--storage-class",
        "fast-ssd",
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend(extra.iter().map(|arg| (*arg).to_owned()));
    let kubeconfig = kubeconfig.display().to_string();
    SandgateProcess::spawn(&args, &[("KUBECONFIG", &kubeconfig)]).await
}

/// The real binary on the fake cluster: a warm configuration the pod security level
/// refuses, and one whose create the API refuses, show as failed with their reasons in
/// the pools' listing, as many as the failed-sandboxes gauge says; the refusal, the same
/// every pass, is logged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pools_listing_and_the_gauges_agree_on_failures_and_say_why() {
    let kube = FakeKube::start().await;
    for _ in 0..5 {
        kube.fail_next(
            Method::POST,
            DEPLOYMENTS,
            403,
            "Forbidden",
            "deployments.apps is forbidden: exceeded quota: sandboxes",
        );
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let warm = dir.path().join("warm.json");
    std::fs::write(
        &warm,
        json!({"configs": [
            {"name": "as_root", "image": "agent:1", "working_dir": "/workspace",
             "command": ["/agent"], "environment": {}, "run_as_user": 0, "count": 2},
            {"name": "quota", "image": "agent:2", "working_dir": "/workspace",
             "command": ["/agent"], "environment": {}, "count": 1},
        ]})
        .to_string(),
    )
    .expect("warm runtimes file");
    let sandgate = serve(
        &kube,
        dir.path(),
        &[
            "--warm-runtimes-file",
            warm.to_str().expect("utf-8"),
            "--reconcile-interval",
            "1",
        ],
    )
    .await;
    let client = reqwest::Client::new();

    // (pool, failed) as listed and as gauged, until they agree on what is expected: the
    // listing and the gauges are read one after the other while passes run.
    let expected = [("as_root".to_owned(), 2.0), ("quota".to_owned(), 1.0)];
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let (listed, passes) = loop {
        let listed: serde_json::Value = client
            .get(sandgate.url("/api/warm-runtime-pools"))
            .header("x-api-key", RUNTIME_KEY)
            .send()
            .await
            .expect("pools")
            .json()
            .await
            .expect("JSON");
        let metrics = crate::observability::scrape(&client, &sandgate.url("/metrics")).await;
        let gauge = |pool: &str| {
            crate::observability::sample(
                &metrics,
                "sandgate_warm_pool_sandboxes",
                &[("pool", pool), ("state", "failed")],
            )
        };
        let mut in_listing: Vec<(String, f64)> = listed["pools"]
            .as_array()
            .expect("pools")
            .iter()
            .map(|pool| {
                (
                    pool["name"].as_str().unwrap_or_default().to_owned(),
                    pool["failed"].as_f64().unwrap_or_default(),
                )
            })
            .collect();
        in_listing.sort_by(|a, b| a.0.cmp(&b.0));
        let in_gauges: Vec<(String, f64)> = expected
            .iter()
            .map(|(pool, _)| (pool.clone(), gauge(pool).unwrap_or(-1.0)))
            .collect();
        let passes = crate::observability::sample(
            &metrics,
            "sandgate_reconcile_duration_seconds_count",
            &[],
        )
        .unwrap_or(0.0);
        if in_listing == expected && in_gauges == expected && passes >= 3.0 {
            break (listed, passes);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "listing {in_listing:?}, gauges {in_gauges:?} after {passes} passes\n{}",
            sandgate.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let pool = |name: &str| {
        listed["pools"]
            .as_array()
            .and_then(|pools| pools.iter().find(|pool| pool["name"] == name))
            .cloned()
            .unwrap_or_default()
    };
    let reasons = pool("as_root")["failures"].to_string();
    assert!(
        reasons.contains("run_as_user") && reasons.contains("SANDBOX_POD_SECURITY=baseline"),
        "{reasons}"
    );
    let reasons = pool("quota")["failures"].to_string();
    assert!(reasons.contains("exceeded quota"), "{reasons}");
    assert_eq!(pool("as_root")["state"], "refused");
    assert_eq!(pool("quota")["state"], "backing_off");

    let log = sandgate.log();
    let refusals = log
        .lines()
        .filter(|line| line.contains("refuses this warm configuration"))
        .count();
    assert_eq!(
        refusals, 1,
        "{passes} passes, the refusal logged {refusals} times:\n{log}"
    );
}

/// The same recoveries through the REST edge of the real binary, as the app server's
/// client makes them: a start the cluster fails answers 502 with the reason; the same
/// start again answers the same sandbox, starting; its resume, once in error, answers 200
/// with a new key (the client keeps the new key's hash), not 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_start_recovers_through_the_rest_edge() {
    let kube = FakeKube::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let sandgate = serve(&kube, dir.path(), &[]).await;
    let client = reqwest::Client::new();
    let post = |path: &'static str, body: serde_json::Value| {
        let request = client
            .post(sandgate.url(path))
            .header("x-api-key", RUNTIME_KEY)
            .json(&body);
        async move {
            let response = request.send().await.expect(path);
            let status = response.status().as_u16();
            (
                status,
                response.json::<serde_json::Value>().await.expect("JSON"),
            )
        }
    };
    let start = json!({
        "image": "ghcr.io/acme/agent-server:2.0", "command": ["/agent"],
        "working_dir": "/workspace", "environment": {}, "session_id": "conv-edge",
        "run_as_user": 10001, "resource_factor": 1,
    });

    // (kube's client retries a 503 itself: a 500 is what reaches the driver.)
    kube.fail_next(
        Method::POST,
        SERVICES,
        500,
        "InternalError",
        "etcdserver: request timed out",
    );
    let (status, body) = post("/start", start.clone()).await;
    assert_eq!(status, 502, "{body}");
    assert!(body.to_string().contains("request timed out"), "{body}");

    let (status, started) = post("/start", start.clone()).await;
    assert_eq!(status, 200, "{started}");
    assert_eq!(started["status"], "starting");
    let id = started["runtime_id"]
        .as_str()
        .expect("runtime_id")
        .to_owned();
    for (resource, found) in objects_of(&kube, &id) {
        assert!(
            found.is_some(),
            "{resource} is missing after the retried start"
        );
    }

    kube.put(
        PODS,
        pod(
            &format!("sandbox-{id}-x1"),
            &id,
            waiting("InvalidImageName", "couldn't parse image name"),
        ),
    );
    let session: serde_json::Value = client
        .get(sandgate.url("/sessions/conv-edge"))
        .header("x-api-key", RUNTIME_KEY)
        .send()
        .await
        .expect("session")
        .json()
        .await
        .expect("JSON");
    assert_eq!(session["status"], "error", "{session}");
    kube.remove(PODS, NAMESPACE, &format!("sandbox-{id}-x1"));
    kube.remove(INGRESSES, NAMESPACE, &format!("sandbox-{id}"));
    let (status, resumed) = post("/resume", json!({ "runtime_id": id })).await;
    assert_eq!(status, 200, "{resumed}");
    assert_eq!(resumed["status"], "starting");
    assert_ne!(resumed["session_api_key"], started["session_api_key"]);
    assert!(
        kube.object(INGRESSES, NAMESPACE, &format!("sandbox-{id}"))
            .is_some()
    );
}

/// A refused warm create heals within its backoff once the fault clears, in real time: the
/// reconciler wakes for the replacement rather than waiting for its next interval (here an
/// hour).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_warm_create_heals_within_its_backoff_not_the_next_interval() {
    let kube = FakeKube::start().await;
    kube.fail_next(
        Method::POST,
        DEPLOYMENTS,
        403,
        "Forbidden",
        "deployments.apps is forbidden: exceeded quota: sandboxes",
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let warm = dir.path().join("warm.json");
    std::fs::write(
        &warm,
        json!({"configs": [
            {"name": "quota", "image": "agent:2", "working_dir": "/workspace",
             "command": ["/agent"], "environment": {}, "count": 1},
        ]})
        .to_string(),
    )
    .expect("warm runtimes file");
    let sandgate = serve(
        &kube,
        dir.path(),
        &[
            "--warm-runtimes-file",
            warm.to_str().expect("utf-8"),
            "--reconcile-interval",
            "3600",
        ],
    )
    .await;
    let backoff = sandgate_runtime_api::sandboxes::pools::HEAL_BACKOFF_BASE;
    let deadline = tokio::time::Instant::now() + backoff + std::time::Duration::from_secs(10);
    loop {
        let creates = kube
            .requests()
            .iter()
            .filter(|request| {
                request.method == Method::POST && request.path.ends_with("/deployments")
            })
            .count();
        // The pass that replaced the failed sandbox says so once it is over, after the
        // Deployment's create.
        let replaced = sandgate.log().contains("replaced=1");
        if creates >= 2 && !kube.names(DEPLOYMENTS, NAMESPACE).is_empty() && replaced {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{creates} create(s), the failed sandbox replaced: {replaced}\n{}",
            sandgate.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
