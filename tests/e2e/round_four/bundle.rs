//! The support bundle quotes no value a client or a file chose, with a value planted in
//! each place one can come from: an upstream key in a configured entry's URL query (`?key=`,
//! as Gemini takes it), in an added model's (`&code=`, as Azure Functions), a URL's
//! userinfo, a failing call's model name, and a broken configuration file's value (in
//! `check-config`'s finding and in the log line of its failed reload).

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{SandgateProcess, run_sandgate};

const JWT_SECRET: &str = "planted-bundle-jwt-secret-0123456789abcdef0123";
const MASTER_KEY: &str = "planted-bundle-master-key-77";
const QUERY_KEY: &str = "planted-query-key-in-config-a1";
const ADDED_CODE: &str = "planted-azure-code-added-b2";
const ADDED_TOKEN: &str = "planted-token-added-c3";
const USERINFO: &str = "planted-userinfo-password-d4";
const CLIENT_MODEL: &str = "planted-client-model-name-e5";
const FILE_VALUE: &str = "planted-broken-file-value-f6";

#[tokio::test]
async fn the_bundle_quotes_no_value_a_client_or_a_file_chose() {
    let dir = tempfile::tempdir().expect("temp dir");
    let gateway = dir.path().join("gateway.yaml");
    std::fs::write(
        &gateway,
        format!(
            "model_list:\n  - model_name: gemini\n    litellm_params: {{model: openai/gemini-pro, api_base: \"http://127.0.0.1:9/v1beta/openai/v1?key={QUERY_KEY}\", api_key: k}}\n"
        ),
    )
    .expect("gateway config");
    let data_dir = dir.path().join("data").display().to_string();
    let gateway_path = gateway.display().to_string();
    let runtime_base_url = format!("http://admin:{USERINFO}@sandboxes.example/");
    let server = SandgateProcess::spawn(
        &["serve", "--listen", "127.0.0.1:0"].map(str::to_owned),
        &[
            ("SANDGATE_DATA_DIR", data_dir.as_str()),
            ("JWT_SECRET", JWT_SECRET),
            ("ADMIN_PASSWORD", "planted-bundle-admin-password"),
            ("PROXY_MASTER_KEY", MASTER_KEY),
            ("GATEWAY_ALLOWED_UPSTREAM_HOSTS", "127.0.0.1"),
            ("GATEWAY_CONFIG", gateway_path.as_str()),
            // A URL with userinfo that the process logs at start: where a URL's password
            // can reach the bundle's log lines and settings.
            ("RUNTIME_BASE_URL", runtime_base_url.as_str()),
        ],
    )
    .await;
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let post = |path: &str, body: Value| {
        client
            .post(server.url(path))
            .bearer_auth(MASTER_KEY)
            .json(&body)
            .send()
    };
    let added = post(
        "/model/new",
        json!({"model_name": "azure-fn", "gateway_params": {
            "model": "openai/fn",
            "api_base": format!("http://127.0.0.1:9/api/v1?code={ADDED_CODE}&token={ADDED_TOKEN}"),
            "api_key": "k",
        }}),
    )
    .await
    .expect("add");
    assert_eq!(
        added.status(),
        200,
        "{}",
        added.text().await.unwrap_or_default()
    );
    // A call for a model no entry has: a failing call whose name the client chose.
    let refused = post(
        "/v1/chat/completions",
        json!({"model": CLIENT_MODEL, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await
    .expect("chat");
    assert_eq!(refused.status(), 404);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let logs: Value = client
            .get(server.url("/spend/logs"))
            .bearer_auth(MASTER_KEY)
            .send()
            .await
            .expect("spend logs")
            .json()
            .await
            .expect("JSON");
        if logs.to_string().contains(CLIENT_MODEL) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no spend log entry: {logs}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The file broken, with a value where a number belongs; the next read of it logs why.
    std::fs::write(
        &gateway,
        format!(
            "model_list:\n  - model_name: gemini\n    litellm_params: {{model: openai/gemini-pro, api_base: \"http://127.0.0.1:9/v1\", timeout: \"{FILE_VALUE}\"}}\n"
        ),
    )
    .expect("break the file");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !server.log().contains("keeping the last good one") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the reload failure is logged"
        );
        let _ = client
            .get(server.url("/v1/models"))
            .bearer_auth(MASTER_KEY)
            .send()
            .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        server.log().contains(FILE_VALUE),
        "the log line quotes the value"
    );

    let run = run_sandgate(
        &[
            "support-bundle",
            "--url",
            &server.url(""),
            "--sign-with-jwt-secret",
            "--json",
            "--output",
            "-",
        ],
        &[("JWT_SECRET", JWT_SECRET)],
    )
    .await;
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let files: std::collections::BTreeMap<String, String> =
        serde_json::from_slice(&run.stdout).expect("the files as one JSON object");
    // What the bundle still says: where each entry goes, that a call failed, that the
    // file is broken.
    let gateway_json = &files["sandgate-support-bundle/gateway.json"];
    assert!(
        gateway_json.contains("/v1beta/openai/v1?key=[redacted]"),
        "{gateway_json}"
    );
    assert!(
        gateway_json.contains("?code=[redacted]&token=[redacted]"),
        "{gateway_json}"
    );
    let errors = &files["sandgate-support-bundle/upstream-errors.json"];
    assert!(errors.contains("404"), "{errors}");
    let findings = &files["sandgate-support-bundle/check-config.json"];
    assert!(findings.contains("GATEWAY_CONFIG"), "{findings}");
    for (name, text) in &files {
        for planted in [
            QUERY_KEY,
            ADDED_CODE,
            ADDED_TOKEN,
            USERINFO,
            CLIENT_MODEL,
            FILE_VALUE,
        ] {
            assert!(!text.contains(planted), "{planted} in {name}:\n{text}");
        }
    }
}
