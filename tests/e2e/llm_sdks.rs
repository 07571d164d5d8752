//! The model gateway against the real LLM SDKs and a real LiteLLM proxy, unchanged:
//! openai and anthropic for Python, litellm's `litellm_proxy/` provider, the openai SDK for
//! node (`tests/real_clients/`), and `litellm[proxy]` as the external gateway Sandgate
//! chains to. `scripts/install-real-clients` installs them into `.tools/` (`scripts/test`
//! runs it).

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::Command;

use crate::common::{Backend, REAL_CLIENTS, Sandgate, driver_report, repository, tool};
use crate::model_gateway::{FakeUpstream, MASTER_KEY, UPSTREAM_KEY};

/// Sandgate with `claude` on a gateway of the same kind and `gpt` on an OpenAI-compatible
/// API, both the fake upstream.
async fn gateway(
    backend: &Backend,
    upstream: &FakeUpstream,
) -> (Sandgate, tempfile::NamedTempFile) {
    let base = upstream.base();
    let config = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(
        config.path(),
        format!(
            r#"model_list:
  - model_name: claude
    litellm_params: {{model: gateway_proxy/claude-sonnet, api_base: "{base}", api_key: {UPSTREAM_KEY}}}
  - model_name: gpt
    litellm_params: {{model: openai/azure/gpt-4o, api_base: "{base}/openai/v1", api_key: {UPSTREAM_KEY}}}
"#
        ),
    )
    .expect("write config");
    let path = config.path().display().to_string();
    let sandgate = Sandgate::start_with(
        backend,
        &["--gateway-config", &path, "--proxy-master-key", MASTER_KEY],
    )
    .await;
    (sandgate, config)
}

async fn spend_logs(sandgate: &Sandgate, count: usize) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
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
        let logs = logs.as_array().cloned().unwrap_or_default();
        if logs.len() >= count || tokio::time::Instant::now() > deadline {
            return logs;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdks_speak_every_api_through_sandgate() {
    let backend = Backend::embedded();
    let upstream = FakeUpstream::start().await;
    let (sandgate, _config) = gateway(&backend, &upstream).await;
    let mut command = Command::new(tool("llm-clients/bin/python", REAL_CLIENTS));
    command
        .arg(repository("tests/real_clients/llm_sdks.py"))
        .args(["--base", &sandgate.url(""), "--key", MASTER_KEY]);
    let report = tokio::time::timeout(Duration::from_secs(300), driver_report(command))
        .await
        .expect("the SDKs finished");
    let passed: Vec<&str> = report["passed"]
        .as_array()
        .expect("passed")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(passed.len() >= 27, "{report}");

    let requests = upstream.all();
    let paths: Vec<&str> = requests
        .iter()
        .map(|request| request.path.as_str())
        .collect();
    for path in [
        "/openai/v1/responses",
        "/openai/v1/embeddings",
        "/openai/v1/completions",
        "/openai/v1/chat/completions",
        "/v1/chat/completions",
        "/v1/messages",
        "/v1/messages/count_tokens",
    ] {
        assert!(paths.contains(&path), "nothing reached {path}: {paths:?}");
    }
    // The master key, in whichever carrier it came, never reaches an upstream.
    for request in &requests {
        for (name, value) in &request.headers {
            assert!(
                !value
                    .as_bytes()
                    .windows(MASTER_KEY.len())
                    .any(|window| window == MASTER_KEY.as_bytes()),
                "the master key went upstream in {name} to {}",
                request.path
            );
        }
        assert_eq!(
            request.headers["authorization"],
            format!("Bearer {UPSTREAM_KEY}")
        );
    }
    // A translated message's tool schema arrived as a chat completion's function.
    let translated = requests
        .iter()
        .find(|request| {
            request.path == "/openai/v1/chat/completions" && request.body.get("tools").is_some()
        })
        .expect("a translated message with tools");
    assert_eq!(translated.body["tools"][0]["function"]["name"], "read");

    let logs = spend_logs(&sandgate, requests.len()).await;
    for call_type in [
        "responses",
        "embedding",
        "text_completion",
        "anthropic_messages",
        "count_tokens",
        "completion",
    ] {
        assert!(
            logs.iter()
                .any(|log| log["call_type"] == call_type && log["status"] == 200),
            "no {call_type} in the spend log"
        );
    }
    // Every successful call's tokens are logged, streams' included.
    for log in logs
        .iter()
        .filter(|log| log["status"] == 200 && log["call_type"] != "count_tokens")
    {
        assert!(
            log["prompt_tokens"].as_u64().is_some(),
            "no tokens in {log}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_openai_sdk_speaks_the_responses_api_through_sandgate() {
    let backend = Backend::embedded();
    let upstream = FakeUpstream::start().await;
    let (sandgate, _config) = gateway(&backend, &upstream).await;
    let mut command = Command::new("node");
    command
        .arg(repository("tests/real_clients/openai_node.cjs"))
        .arg(tool("node-clients", REAL_CLIENTS))
        .args([&sandgate.url(""), MASTER_KEY]);
    let report = tokio::time::timeout(Duration::from_secs(120), driver_report(command))
        .await
        .expect("the SDK finished");
    assert_eq!(
        report["passed"].as_array().map(Vec::len),
        Some(2),
        "{report}"
    );
    assert!(
        upstream
            .all()
            .iter()
            .all(|request| request.path == "/openai/v1/responses")
    );
}

/// A free port for a server that cannot be told to take port 0 (LiteLLM's CLI).
pub(crate) async fn free_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    listener.local_addr().expect("address").port()
}

/// The LiteLLM proxy the callbacks file records to `record`, started on `port` with
/// `models` (LiteLLM's own model list), ready when this returns; killed when dropped.
pub(crate) async fn litellm_proxy(
    dir: &std::path::Path,
    port: u16,
    models: &str,
    record: &std::path::Path,
) -> tokio::process::Child {
    std::fs::write(
        dir.join("recorder.py"),
        format!(
            r#"import json
from litellm.integrations.custom_logger import CustomLogger

class Recorder(CustomLogger):
    def _record(self, kwargs):
        params = kwargs.get("litellm_params") or {{}}
        metadata = params.get("metadata") or {{}}
        with open({record:?}, "a") as out:
            out.write(json.dumps({{
                "session_id": kwargs.get("litellm_session_id") or params.get("litellm_session_id"),
                "spend_logs_metadata": metadata.get("spend_logs_metadata"),
            }}, default=str) + "\n")

    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        self._record(kwargs)

    async def async_log_failure_event(self, kwargs, response_obj, start_time, end_time):
        self._record(kwargs)

recorder = Recorder()
"#
        ),
    )
    .expect("write the callback");
    let config = dir.join("litellm.yaml");
    std::fs::write(
        &config,
        format!(
            "{models}litellm_settings:\n  callbacks: recorder.recorder\n  num_retries: 2\ngeneral_settings:\n  master_key: sk-litellm-master\n"
        ),
    )
    .expect("write the config");
    let child = Command::new(tool("llm-clients/bin/litellm", REAL_CLIENTS))
        .args([
            "--config",
            &config.display().to_string(),
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ])
        .current_dir(dir)
        .env("LITELLM_LOG", "ERROR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start litellm");
    let client = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let ready = client
            .get(format!("http://127.0.0.1:{port}/health/liveliness"))
            .send()
            .await
            .is_ok_and(|response| response.status().is_success());
        if ready {
            return child;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "litellm did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sandgate → a real LiteLLM proxy → the fake provider: LiteLLM's own callback sees the
/// client's session id and spend metadata (sent under the spec's names), and a provider
/// failure costs the calls LiteLLM's retries make, not those times Sandgate's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_through_a_real_litellm_proxy_carries_the_session_and_does_not_multiply_retries() {
    let upstream = FakeUpstream::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let record = dir.path().join("record.jsonl");
    let port = free_port().await;
    let base = upstream.base();
    let models = format!(
        "model_list:\n  - model_name: chained\n    litellm_params: {{model: openai/up-model, api_base: \"{base}/provider/v1\", api_key: {UPSTREAM_KEY}}}\n  - model_name: failing\n    litellm_params: {{model: openai/overloaded, api_base: \"{base}/provider/v1\", api_key: {UPSTREAM_KEY}}}\n"
    );
    let _litellm = litellm_proxy(dir.path(), port, &models, &record).await;

    let backend = Backend::embedded();
    let config = dir.path().join("sandgate.yaml");
    std::fs::write(
        &config,
        format!(
            "model_list:\n  - model_name: chained\n    litellm_params: {{model: gateway_proxy/chained, api_base: \"http://127.0.0.1:{port}\", api_key: sk-litellm-master}}\n  - model_name: failing\n    litellm_params: {{model: gateway_proxy/failing, api_base: \"http://127.0.0.1:{port}\", api_key: sk-litellm-master}}\ngeneral_settings:\n  forward_client_headers_to_llm_api: true\n"
        ),
    )
    .expect("write config");
    let path = config.display().to_string();
    let sandgate = Sandgate::start_with(
        &backend,
        &[
            "--gateway-config",
            &path,
            "--proxy-master-key",
            MASTER_KEY,
            "--gateway-retries",
            "2",
        ],
    )
    .await;
    let chat = |model: &str| {
        sandgate
            .client
            .post(sandgate.url("/v1/chat/completions"))
            .bearer_auth(MASTER_KEY)
            .header("x-gateway-session-id", "conversation-42")
            .header("x-gateway-spend-logs-metadata", r#"{"team":"agents"}"#)
            .json(&json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}))
            .send()
    };
    let answer = chat("chained").await.expect("request");
    assert_eq!(answer.status(), 200);
    assert!(
        answer
            .headers()
            .keys()
            .any(|name| name.as_str().starts_with("x-litellm-")),
        "LiteLLM's own headers reach the client: {:?}",
        answer.headers()
    );
    let body: Value = answer.json().await.expect("JSON");
    assert_eq!(body["model"], "chained", "{body}");
    assert_eq!(upstream.last().path, "/provider/v1/chat/completions");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let recorded = loop {
        let text = std::fs::read_to_string(&record).unwrap_or_default();
        if let Some(line) = text.lines().next() {
            break serde_json::from_str::<Value>(line).expect("a JSON record");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "LiteLLM's callback never ran"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(recorded["session_id"], "conversation-42", "{recorded}");
    assert_eq!(
        recorded["spend_logs_metadata"],
        json!({"team": "agents"}),
        "{recorded}"
    );

    // The provider fails: LiteLLM retries it (num_retries: 2); Sandgate does not retry
    // LiteLLM's answer on top.
    let before = upstream.count();
    let answer = chat("failing").await.expect("request");
    assert!(answer.status().is_server_error(), "{}", answer.status());
    let provider_calls = upstream.count() - before;
    assert!(
        (1..=3).contains(&provider_calls),
        "{provider_calls} provider calls for one client call"
    );
}
