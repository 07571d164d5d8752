//! The gateway as processes of its own: `sandgate model-gw` and `sandgate edge --model-gw`
//! with keys from the environment, and an unset variable refused at start.

use futures::StreamExt;
use serde_json::Value;

use super::*;

/// `sandgate model-gw` and `sandgate edge --model-gw`, as real processes, with the master
/// key and an upstream key taken from the environment.
#[tokio::test]
async fn model_gw_and_edge_run_apart_with_keys_from_the_environment() {
    let upstream = FakeUpstream::start().await;
    let data = tempfile::tempdir().expect("temp dir");
    let config = crate::common::file_with(&format!(
        "model_list:\n  - model_name: claude\n    gateway_params: {{model: gateway_proxy/claude-sonnet, api_base: \"{}\", api_key: os.environ/TEST_GATEWAY_KEY}}\n",
        upstream.base()
    ));
    let gateway_args = [
        "model-gw",
        "--grpc-listen",
        "127.0.0.1:0",
        "--data-dir",
        &data.path().display().to_string(),
        "--gateway-config",
        &config.path().display().to_string(),
    ]
    .map(str::to_owned);
    let model_gw = crate::common::SandgateProcess::spawn(
        &gateway_args,
        &[
            ("PROXY_MASTER_KEY", MASTER_KEY),
            ("TEST_GATEWAY_KEY", "sk-from-env"),
        ],
    )
    .await;
    let edge_args = [
        "edge".to_owned(),
        "--listen".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--runtime-api".to_owned(),
        format!("http://{}", model_gw.address),
        "--model-gw".to_owned(),
        format!("http://{}", model_gw.address),
    ];
    let edge = crate::common::SandgateProcess::spawn(&edge_args, &[]).await;
    let client = reqwest::Client::new();
    let (status, body) = json_of(
        client
            .post(edge.url("/v1/chat/completions"))
            .bearer_auth(MASTER_KEY)
            .body(chat_body("claude").to_string())
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "claude");
    assert_eq!(
        upstream.last().headers["authorization"],
        "Bearer sk-from-env"
    );
    assert!(!model_gw.log().contains("sk-from-env"));
    assert!(!model_gw.log().contains(MASTER_KEY));

    // An edge older than the Call rpc, during a rolling upgrade, still gets its chat
    // completions through the deprecated ChatCompletion rpc.
    #[expect(deprecated, reason = "what an older edge calls")]
    {
        use sandgate_proto::models::v1::ChatCompletionRequest;
        use sandgate_proto::models::v1::model_gateway_client::ModelGatewayClient;
        let channel =
            tonic::transport::Endpoint::from_shared(format!("http://{}", model_gw.address))
                .expect("endpoint")
                .connect()
                .await
                .expect("connect");
        let mut request = tonic::Request::new(ChatCompletionRequest {
            body: chat_body("claude").to_string().into(),
        });
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {MASTER_KEY}").parse().expect("metadata"),
        );
        let mut answer = ModelGatewayClient::new(channel)
            .chat_completion(request)
            .await
            .expect("the deprecated rpc answers")
            .into_inner();
        let first = answer.next().await.expect("a message").expect("no error");
        assert_eq!(first.status, 200);
        let mut body = first.chunk.to_vec();
        while let Some(message) = answer.next().await {
            body.extend_from_slice(&message.expect("no error").chunk);
        }
        let body: Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(body["model"], "claude");
    }
}

/// A configuration naming an unset variable stops the start, naming the entry.
#[tokio::test]
async fn an_unset_variable_is_a_start_error_naming_the_entry() {
    let config = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(
        config.path(),
        "model_list:\n  - model_name: claude\n    gateway_params: {model: gateway_proxy/c, api_base: \"http://127.0.0.1:9\", api_key: os.environ/SANDGATE_TEST_NEVER_SET}\n",
    )
    .expect("write config");
    let data = tempfile::tempdir().expect("temp dir");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_sandgate"))
        .args(["model-gw", "--grpc-listen", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .arg("--gateway-config")
        .arg(config.path())
        .env_remove("SANDGATE_TEST_NEVER_SET")
        .output()
        .await
        .expect("run sandgate");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("model_list[0] (claude)"), "{stderr}");
    assert!(stderr.contains("SANDGATE_TEST_NEVER_SET"), "{stderr}");
}
