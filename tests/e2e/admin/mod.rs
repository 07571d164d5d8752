//! Runtime management over REST: admin login, API keys, warm runtime configurations, and
//! the `sandgate admin` client, with the statuses and bodies of design.md.
//!
//! By concern: login and API keys (`login.rs`), the warm runtime configurations
//! (`warm_configs.rs`) and the `sandgate admin` client (`cli.rs`).

mod cli;
mod login;
mod warm_configs;

use reqwest::StatusCode;
use sandgate_runtime_api::admin::login::login_hash;
use serde_json::{Value, json};

use crate::common::{Backend, RUNTIME_KEY, Sandgate};

pub(crate) const PASSWORD: &str = "correct horse battery staple";
const JWT_SECRET: &str = "an HMAC key of at least thirty-two bytes";
/// Few iterations: the tests exercise the protocol, not the cost.
const ITERATIONS: &str = "1000";

const V1_CURRENT: &str = "ghcr.io/openhands/runtime:1.0";

/// An installer file: the default `v1_current` and an installer-wide count of 2.
fn installer_file(image: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    write_installer(file.path(), image);
    file
}

fn write_installer(path: &std::path::Path, image: &str) {
    let text = json!({
        "count": 2,
        "configs": [{
            "name": "v1_current", "image": image, "working_dir": "/workspace",
            "command": ["/usr/local/bin/openhands-agent-server", "--port", "60000"],
            "environment": {"OH_WEBHOOKS_0_BASE_URL": "http://app/api/v1/webhooks", "CA_BUNDLE": "/etc/ca.pem"},
            "run_as_user": 1000, "run_as_group": 1000, "fs_group": 1000
        }]
    });
    std::fs::write(path, text.to_string()).expect("write installer file");
}

/// Sandgate with an admin password, the installer file (if any) and `extra` flags.
pub async fn start(
    backend: &Backend,
    file: Option<&tempfile::NamedTempFile>,
    extra: &[&str],
) -> Sandgate {
    let path = file.map(|file| file.path().display().to_string());
    let mut args = vec![
        "--admin-password",
        PASSWORD,
        "--jwt-secret",
        JWT_SECRET,
        "--pbkdf2-iterations",
        ITERATIONS,
    ];
    // These tests log in many times from one address; the rate has tests of its own
    // (login_rate.rs).
    if !extra.contains(&"--admin-login-rate") {
        args.extend(["--admin-login-rate", "0", "--admin-login-account-rate", "0"]);
    }
    if let Some(path) = &path {
        args.extend(["--warm-runtimes-file", path.as_str()]);
    }
    args.extend(extra);
    Sandgate::start_with(backend, &args).await
}

async fn json_of(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let text = response.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    (status, body)
}

async fn challenge(sandgate: &Sandgate) -> Value {
    let (status, body) = json_of(
        sandgate
            .client
            .get(sandgate.url("/api/admin/challenge"))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

fn answer(challenge: &Value, password: &str) -> Value {
    let hash = login_hash(
        password,
        challenge["salt"].as_str().expect("salt"),
        challenge["challenge"].as_str().expect("challenge"),
        challenge["iterations"].as_u64().expect("iterations") as u32,
    );
    json!({ "challenge": challenge["challenge"], "hash": hash })
}

async fn post_login(sandgate: &Sandgate, body: &Value) -> (StatusCode, Value) {
    json_of(
        sandgate
            .client
            .post(sandgate.url("/api/admin/login"))
            .json(body)
            .send()
            .await
            .expect("request"),
    )
    .await
}

pub async fn login(sandgate: &Sandgate) -> String {
    let challenge = challenge(sandgate).await;
    let (status, body) = post_login(sandgate, &answer(&challenge, PASSWORD)).await;
    assert_eq!(status, 200, "{body}");
    body["token"].as_str().expect("token").to_owned()
}

pub async fn put(
    sandgate: &Sandgate,
    token: &str,
    name: &str,
    body: &Value,
) -> (StatusCode, Value) {
    json_of(
        sandgate
            .client
            .put(sandgate.url(&format!("/api/admin/warm-runtime-configs/{name}")))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .expect("request"),
    )
    .await
}

async fn delete(sandgate: &Sandgate, token: &str, name: &str) -> (StatusCode, Value) {
    json_of(
        sandgate
            .client
            .delete(sandgate.url(&format!("/api/admin/warm-runtime-configs/{name}")))
            .bearer_auth(token)
            .send()
            .await
            .expect("request"),
    )
    .await
}

/// The effective configurations as `(name, source, image, count)`.
async fn listed(sandgate: &Sandgate) -> Vec<(String, String, String, i64)> {
    let (status, body) = json_of(
        sandgate
            .client
            .get(sandgate.url("/api/warm-runtime-configs"))
            .header("x-api-key", RUNTIME_KEY)
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["configs"]
        .as_array()
        .expect("configs")
        .iter()
        .map(|entry| {
            (
                entry["name"].as_str().expect("name").to_owned(),
                entry["source"].as_str().expect("source").to_owned(),
                entry["image"].as_str().expect("image").to_owned(),
                entry["count"].as_i64().expect("count"),
            )
        })
        .collect()
}

fn entry(name: &str, source: &str, image: &str, count: i64) -> (String, String, String, i64) {
    (name.into(), source.into(), image.into(), count)
}

/// A configuration body derived from the installer default, as `template` makes it.
fn derived(image: &str) -> Value {
    json!({
        "image": image, "working_dir": "/workspace",
        "command": ["/usr/local/bin/openhands-agent-server", "--port", "60000"],
        "environment": {"OH_WEBHOOKS_0_BASE_URL": "http://app/api/v1/webhooks", "CA_BUNDLE": "/etc/ca.pem"},
        "run_as_user": 1000, "run_as_group": 1000, "fs_group": 1000
    })
}
