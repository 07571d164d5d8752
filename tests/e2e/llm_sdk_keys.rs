//! Virtual keys with the real SDKs (openai, anthropic, litellm) through Sandgate chained to
//! a real LiteLLM proxy: a key generated with LiteLLM's documented body drives chat,
//! responses and messages, is refused a model outside its list and, past its budget,
//! gets the error LiteLLM gives (tests/real_clients/llm_sdk_keys.py).

use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

use crate::common::{Backend, REAL_CLIENTS, Sandgate, driver_report, file_with, repository, tool};
use crate::llm_sdks::{free_port, litellm_proxy};
use crate::model_gateway::{FakeUpstream, MASTER_KEY, UPSTREAM_KEY};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_key_drives_the_real_sdks_within_its_models_and_budget() {
    let upstream = FakeUpstream::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port().await;
    let base = upstream.base();
    let models = format!(
        "model_list:\n  - model_name: gpt-up\n    litellm_params: {{model: openai/up-model, api_base: \"{base}/provider/v1\", api_key: {UPSTREAM_KEY}}}\n"
    );
    let _litellm = litellm_proxy(dir.path(), port, &models, &dir.path().join("record.jsonl")).await;
    let litellm = format!("http://127.0.0.1:{port}");
    let prices = "model_info: {input_cost_per_token: 0.001, output_cost_per_token: 0.002}";
    let config = file_with(&format!(
        "model_list:\n  - model_name: gpt\n    litellm_params: {{model: gateway_proxy/gpt-up, api_base: \"{litellm}\", api_key: sk-litellm-master}}\n    {prices}\n  - model_name: claude\n    litellm_params: {{model: gateway_proxy/gpt-up, api_base: \"{litellm}\", api_key: sk-litellm-master}}\n    {prices}\n  - model_name: other\n    litellm_params: {{model: openai/other, api_base: \"{base}/openai/v1\", api_key: {UPSTREAM_KEY}}}\n"
    ));
    let path = config.path().display().to_string();
    let backend = Backend::embedded();
    let sandgate = Sandgate::start_with(
        &backend,
        &["--gateway-config", &path, "--proxy-master-key", MASTER_KEY],
    )
    .await;
    let before = upstream.count();
    let mut command = Command::new(tool("llm-clients/bin/python", REAL_CLIENTS));
    command
        .arg(repository("tests/real_clients/llm_sdk_keys.py"))
        .args([
            "--base",
            &sandgate.url(""),
            "--master",
            MASTER_KEY,
            "--budget",
            "0.1",
        ]);
    let report = tokio::time::timeout(Duration::from_secs(300), driver_report(command))
        .await
        .expect("the SDKs finished");
    let passed: Vec<&str> = report["passed"]
        .as_array()
        .expect("passed")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(passed.len() >= 13, "{report}");
    // The calls went through LiteLLM to the provider; the refused ones did not.
    assert!(upstream.count() > before, "nothing reached the provider");
    assert!(
        upstream
            .all()
            .iter()
            .all(|request| request.body["model"] != "other"),
        "a model outside the key's list was called"
    );
    // The budget held: spend past it by at most the call in flight when it was reached.
    let spend = report["spend"].as_f64().expect("spend");
    assert!((0.1..0.1 + 0.05).contains(&spend), "{report}");
    // The spend log names the key's token on each of its calls.
    let token = report["token"].as_str().expect("token");
    let logs: Value = sandgate
        .client
        .get(sandgate.url("/spend/logs?limit=1000"))
        .bearer_auth(MASTER_KEY)
        .send()
        .await
        .expect("spend logs")
        .json()
        .await
        .expect("JSON");
    let charged = logs
        .as_array()
        .expect("entries")
        .iter()
        .filter(|entry| entry["api_key"] == token && entry["status"] == 200)
        .count();
    assert!(charged >= 5, "{logs}");
}
