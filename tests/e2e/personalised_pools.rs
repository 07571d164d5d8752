//! Warm pools personalised at claim, on the real `sandgate` binary: a pool of real
//! agent-servers started dormant (`OH_DEFERRED_INIT`) is claimed by a start whose
//! environment is not the pool's, and the agent-server takes the start's session key,
//! webhooks and environment before the start answers, and keeps them across a resume; the
//! chart's default pool is claimed by the start the real app server sends; and a start that
//! claims nothing says why, in the pools' listing and in the metrics.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Backend, REAL_CLIENTS, RUNTIME_KEY, SandgateProcess, Steps, serve_args, tool};
use crate::observability::{sample, scrape};
use crate::process_sandboxes::{
    START_WITHIN, act, call, pool_ready, pools, serve_with, until_session,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dormant_warm_agent_server_takes_the_start_s_configuration_at_claim() {
    let _turn = crate::common::real_agent_server_turn().await;
    let python = tool("agent-server-1.58.2/bin/python", REAL_CLIENTS);
    let data = tempfile::tempdir().expect("data dir");
    let command = json!([
        python,
        "-m",
        "openhands.agent_server",
        "--host",
        "127.0.0.1",
        "--port",
        "60000"
    ]);
    let pool_environment = json!({
        "OH_DEFERRED_INIT": "true",
        "OH_ENABLE_VSCODE": "false", "OH_ENABLE_VNC": "false",
        "OPENHANDS_SUPPRESS_BANNER": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "OH_WEBHOOKS_0_BASE_URL": "http://127.0.0.1:9/the-pool-s",
    });
    let warm_runtimes = json!({"count": 1, "configs": [{
        "name": "dormant", "image": "local/agent-server", "working_dir": "/workspace",
        "command": command, "environment": pool_environment,
    }]});
    let file = data.path().join("warm-runtimes.json");
    std::fs::write(&file, warm_runtimes.to_string()).expect("write");
    let mut sandgate = serve_with(
        data.path(),
        "60000",
        &["--warm-runtimes-file", file.to_str().expect("utf-8")],
    )
    .await;
    pool_ready(&sandgate, START_WITHIN).await;

    // A start with the app server's kind of environment: the pool's copied, with its own
    // webhook receiver (Sandgate), its workers and a variable the pool lacks.
    let mut environment = pool_environment.clone();
    environment["OH_WEBHOOKS_0_BASE_URL"] = json!(sandgate.url("/api/v1/webhooks"));
    environment["WORKER_1"] = json!("12000");
    environment["ONLY_IN_THE_START"] = json!("yes");
    let start = json!({
        "image": "local/agent-server", "working_dir": "/workspace", "command": command,
        "environment": environment, "session_id": "personal-1", "resource_factor": 1,
    });
    let (status, started) = call(&sandgate, "/start", Some(start)).await;
    assert_eq!(status, 200, "{started}");
    assert_eq!(started["warm"], true, "{started}\n{}", sandgate.log());
    // Its start's timeline: claimed running, alive once `/api/init` answered.
    let timeline = &started["timeline"];
    assert_eq!(timeline["launch"], "warm", "{started}");
    assert_eq!(
        timeline["running_at_ms"], timeline["started_at_ms"],
        "{started}"
    );
    assert!(
        timeline["alive_at_ms"].as_i64() >= timeline["running_at_ms"].as_i64()
            && timeline["alive_at_ms"].is_i64(),
        "{started}"
    );
    let url = started["url"].as_str().expect("url").to_owned();
    let key = started["session_api_key"].as_str().expect("key").to_owned();
    let runtime_id = started["runtime_id"].as_str().expect("id").to_owned();

    // Initialised before /start answered: the agent-server is ready, with the start's key.
    let client = reqwest::Client::new();
    let init: Value = client
        .get(format!("{url}/api/init"))
        .send()
        .await
        .expect("init status")
        .json()
        .await
        .expect("JSON");
    assert_eq!(init["state"], "ready", "{init}");
    let search = |key: String| {
        let client = client.clone();
        let url = url.clone();
        async move {
            client
                .get(format!("{url}/api/conversations/search"))
                .header("x-session-api-key", key)
                .send()
                .await
                .expect("search")
                .status()
                .as_u16()
        }
    };
    assert_eq!(search(key.clone()).await, 200);
    assert_eq!(search("not-the-key".into()).await, 401);
    // Its processes run with the start's environment, which the pool's lacked.
    let environment_seen = |key: String| {
        let client = client.clone();
        let url = url.clone();
        async move {
            let output: Value = client
                .post(format!("{url}/api/bash/execute_bash_command"))
                .header("x-session-api-key", key)
                .json(&json!({"command": "echo \"$ONLY_IN_THE_START:$WORKER_1\"", "timeout": 60}))
                .send()
                .await
                .expect("bash")
                .json()
                .await
                .expect("JSON");
            output["stdout"]
                .as_str()
                .unwrap_or_default()
                .trim()
                .to_owned()
        }
    };
    assert_eq!(environment_seen(key.clone()).await, "yes:12000");
    // The record now runs the start's spec, less the pool's dormant switch.
    let (_, record) = call(&sandgate, "/sessions/personal-1", None).await;
    assert_eq!(record["pool"], "dormant", "{record}");
    assert!(
        pools(&sandgate).await["pools"][0]["cold_starts"]
            .as_object()
            .is_some_and(serde_json::Map::is_empty)
    );

    // Across a pause and a resume it runs the start's environment, not dormant: its
    // agent-server answers with the new key at once, and has no /api/init.
    assert_eq!(act(&sandgate, "pause", &runtime_id).await, 200);
    assert_eq!(act(&sandgate, "resume", &runtime_id).await, 200);
    let resumed = until_session(&sandgate, "personal-1", "running").await;
    let new_key = resumed["session_api_key"].as_str().expect("key").to_owned();
    assert_ne!(new_key, key);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while search(new_key.clone()).await != 200 {
        assert!(tokio::time::Instant::now() < deadline, "{}", sandgate.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let resumed_init = client
        .get(format!("{url}/api/init"))
        .send()
        .await
        .expect("init status");
    assert_eq!(resumed_init.status(), 404, "not dormant after its resume");
    assert_eq!(environment_seen(new_key).await, "yes:12000");
    sandgate.terminate().await;
}

/// The chart's default warm configurations, as its ConfigMap holds them.
fn chart_warm_runtimes() -> Value {
    let text = std::fs::read_to_string(crate::common::repository("k8s/chart/values.yaml"))
        .expect("values.yaml");
    let values: serde_norway::Value = serde_norway::from_str(&text).expect("YAML");
    let warm = &values["runtime-api"]["warmRuntimes"];
    json!({
        "count": serde_json::to_value(&warm["count"]).expect("count"),
        "configs": serde_json::to_value(&warm["configs"]).expect("configs"),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_s_default_pool_is_claimed_by_the_app_server_s_start_and_cold_starts_say_why() {
    let _turn = crate::common::real_agent_server_turn().await;
    let warm_runtimes = chart_warm_runtimes();
    let file = tempfile::NamedTempFile::new().expect("file");
    std::fs::write(file.path(), warm_runtimes.to_string()).expect("write");
    let mut args = serve_args(&Backend::embedded());
    args.extend(
        [
            "--warm-runtimes-file",
            file.path().to_str().expect("utf-8"),
            "--local-sandbox-start-seconds",
            "1",
        ]
        .map(str::to_owned),
    );
    let mut sandgate = SandgateProcess::spawn(&args, &[]).await;
    pool_ready(&sandgate, Duration::from_secs(30)).await;

    // A start that differs from the pool in its working directory cold-starts, and says
    // why; so does one of an image no pool runs.
    let pool = &warm_runtimes["configs"][0];
    let mut differing = json!({
        "image": pool["image"], "command": pool["command"],
        "working_dir": "/workspace/project", "environment": pool["environment"],
        "run_as_user": 10001, "run_as_group": 10001, "session_id": "cold-1",
    });
    let (status, started) = call(&sandgate, "/start", Some(differing.clone())).await;
    assert_eq!(
        (status, &started["warm"]),
        (200, &json!(false)),
        "{started}"
    );
    differing["image"] = json!("ghcr.io/acme/unpooled:1");
    differing["session_id"] = json!("cold-2");
    let (status, started) = call(&sandgate, "/start", Some(differing)).await;
    assert_eq!(
        (status, &started["warm"]),
        (200, &json!(false)),
        "{started}"
    );
    let listed = pools(&sandgate).await;
    let v1 = &listed["pools"][0];
    assert_eq!(v1["cold_starts"], json!({"working_dir": 1}), "{listed}");
    let last = v1["last_cold_start"].as_str().unwrap_or_default();
    assert!(last.contains("/workspace/project"), "{listed}");
    assert_eq!(listed["cold_starts_without_pool"]["count"], 1, "{listed}");
    let metrics = scrape(&reqwest::Client::new(), &sandgate.url("/metrics")).await;
    for reason in ["working_dir", "no_pool"] {
        assert_eq!(
            sample(
                &metrics,
                "sandgate_sandbox_cold_starts_total",
                &[("reason", reason)]
            ),
            Some(1.0),
            "{reason}: {metrics}"
        );
    }
    assert!(sandgate.log().contains("cold start"), "{}", sandgate.log());

    // The real app server's start of its default spec claims the pool's sandbox.
    let steps = Steps::run(
        tool("app-server/bin/python", REAL_CLIENTS),
        "tests/real_clients/chart_pool_drive.py",
        &["--url", &sandgate.url(""), "--api-key", RUNTIME_KEY],
        String::new,
    )
    .await;
    let id = steps.get("start")["id"].as_str().expect("id").to_owned();
    let (_, record) = call(&sandgate, &format!("/sessions/{id}"), None).await;
    assert_eq!(record["pool"], "v1_current", "{record}\n{}", sandgate.log());
    let listed = pools(&sandgate).await;
    assert_eq!(listed["pools"][0]["cold_starts"], json!({"working_dir": 1}));
    sandgate.terminate().await;
}

/// On Kubernetes: the claim reaches the dormant agent-server at its Service, and a
/// personalised sandbox's resume starts its pod with the start's environment, awake.
#[tokio::test]
async fn a_personalised_kubernetes_sandbox_resumes_awake_with_the_start_s_environment() {
    use sandgate_runtime_api::sandboxes::driver::SandboxDriver;

    use crate::common::fake_kube::DEPLOYMENTS;
    use crate::kubernetes::{KEY, NAMESPACE, keys, object, sandbox, start};

    let (fake, driver) = start().await;
    let mut record = sandbox("p3r50n", Some("v1_current"));
    record
        .spec
        .environment
        .insert("OH_DEFERRED_INIT".into(), "true".into());
    driver.create(&record, &keys(KEY)).await.expect("create");
    assert_eq!(
        driver.init_url(&record).as_deref(),
        Some(format!("http://sandbox-p3r50n.{NAMESPACE}.svc:80").as_str())
    );

    // Claimed: the record runs the start's spec.
    record.personalised = true;
    record.spec.environment = [
        (
            "OH_WEBHOOKS_0_BASE_URL",
            "https://app.example.com/api/v1/webhooks",
        ),
        ("WORKER_1", "12000"),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value.to_owned()))
    .collect();
    driver.pause(&record).await.expect("pause");
    driver
        .resume(&record, &keys("the-resumed-key"))
        .await
        .expect("resume");
    let deployment = object(&fake, DEPLOYMENTS, "sandbox-p3r50n");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let value = |name: &str| {
        container["env"]
            .as_array()
            .expect("env")
            .iter()
            .find(|entry| entry["name"] == name)
            .and_then(|entry| entry["value"].as_str())
            .map(str::to_owned)
    };
    assert_eq!(value("OH_DEFERRED_INIT").as_deref(), Some("false"));
    assert_eq!(
        value("OH_WEBHOOKS_0_BASE_URL").as_deref(),
        Some("https://app.example.com/api/v1/webhooks")
    );
    assert_eq!(value("WORKER_1").as_deref(), Some("12000"));
    assert_eq!(container["image"], "ghcr.io/acme/agent-server:1.4.2");
    assert!(!deployment.to_string().contains("the-resumed-key"));
}
