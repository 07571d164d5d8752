//! Where an added entry may point: not back at the gateway (no loop), not at this
//! machine or the cloud metadata service, and not over a name the configuration routes.

use std::time::Duration;

use serde_json::json;

use super::{add, allowing_loopback, health_baseline, healthy, model};
use crate::common::{Backend, Sandgate, file_with};
use crate::gateway_keys::chat;
use crate::model_gateway::{FakeUpstream, MASTER_KEY};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_pointing_at_the_gateway_itself_ends_in_an_error_not_a_loop() {
    let backend = Backend::embedded();
    // An operator who allows loopback (a local upstream) still cannot make a loop.
    let sandgate = allowing_loopback(&backend, &[]).await;
    let baseline = health_baseline(&sandgate.url("")).await;
    let own = sandgate.url("/v1");
    let (status, body) = add(&sandgate, &model("itself", &own)).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = chat(&sandgate, MASTER_KEY, "itself", None).await;
    assert_eq!(status, 502, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("came back to the gateway"), "{body}");
    healthy(&sandgate.url(""), baseline).await;

    // The same from the configuration file, with the master key as the entry's key: a
    // gateway_proxy entry at the gateway's own port (the file is read again once
    // changed, so it names the port the gateway got).
    let config = file_with("model_list: []\n");
    let path = config.path().display().to_string();
    let backend = Backend::embedded();
    let server = Sandgate::start_with(
        &backend,
        &["--gateway-config", &path, "--proxy-master-key", MASTER_KEY],
    )
    .await;
    let baseline = health_baseline(&server.url("")).await;
    std::fs::write(
        config.path(),
        format!(
            "model_list:\n  - model_name: loop\n    litellm_params: {{model: gateway_proxy/loop, api_base: \"{}\", api_key: {MASTER_KEY}}}\n",
            server.url("")
        ),
    )
    .expect("write config");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let body = loop {
        let (status, body) = chat(&server, MASTER_KEY, "loop", None).await;
        if status != 404 || tokio::time::Instant::now() > deadline {
            assert_eq!(status, 502, "{body}");
            break body;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("came back"),
        "{body}"
    );
    healthy(&server.url(""), baseline).await;
}

/// A name this machine resolves to loopback whose text no rule refuses: one that
/// `/etc/hosts` gives a loopback address, other than `localhost` (Debian's
/// `ip6-localhost`, a machine's own name), whatever the machine's name resolves to (a
/// container's, to its network address).
fn loopback_name() -> String {
    let hosts = std::fs::read_to_string("/etc/hosts").expect("/etc/hosts");
    hosts
        .lines()
        .map(|line| line.split('#').next().unwrap_or_default())
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let address: std::net::IpAddr = fields.next()?.parse().ok()?;
            address.is_loopback().then_some(fields)
        })
        .flatten()
        .map(str::to_ascii_lowercase)
        .find(|name| {
            name != "localhost" && !name.ends_with(".localhost") && !name.starts_with("localhost.")
        })
        .unwrap_or_else(|| {
            panic!("/etc/hosts names nothing but localhost on a loopback address:\n{hosts}")
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_models_may_not_reach_this_machine_or_the_cloud_metadata_service() {
    let backend = Backend::embedded();
    let sandgate = Sandgate::start_with(&backend, &["--proxy-master-key", MASTER_KEY]).await;
    for api_base in [
        "http://127.0.0.1:8080/v1",
        "http://localhost:8080",
        "http://0.0.0.0:80",
        "http://169.254.169.254/latest",
        "http://metadata.google.internal/computeMetadata/v1",
        "http://10.0.0.1/v1",
        "http://192.168.1.10/v1",
    ] {
        let (status, body) = add(&sandgate, &model("inside", api_base)).await;
        assert_eq!(status, 403, "{api_base}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("refused"),
            "{body}"
        );
    }
    // A name that resolves to loopback passes the check of its text, and is refused
    // where it is connected to.
    let hostname = loopback_name();
    let hostname = hostname.as_str();
    let resolved: Vec<std::net::SocketAddr> = tokio::net::lookup_host((hostname, 80))
        .await
        .map(Iterator::collect)
        .unwrap_or_default();
    assert!(
        resolved.iter().any(|address| address.ip().is_loopback()),
        "{hostname} does not resolve to loopback: {resolved:?}"
    );
    let upstream = FakeUpstream::start().await;
    let port = upstream
        .base()
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_owned();
    let (status, body) = add(
        &sandgate,
        &model("named", &format!("http://{hostname}:{port}/v1")),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = chat(&sandgate, MASTER_KEY, "named", None).await;
    assert_eq!(status, 502, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("loopback"),
        "{body}"
    );
    assert_eq!(upstream.count(), 0, "the loopback upstream was reached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_addition_does_not_take_over_what_the_configuration_routes() {
    let backend = Backend::embedded();
    let upstream = FakeUpstream::start().await;
    let base = upstream.base();
    let config = file_with(&format!(
        "model_list:\n  - model_name: gpt\n    litellm_params: {{model: openai/gpt, api_base: \"{base}/v1\", api_key: k}}\n  - model_name: \"*\"\n    litellm_params: {{model: \"openai/*\", api_base: \"{base}/any/v1\", api_key: k}}\n"
    ));
    let path = config.path().display().to_string();
    let sandgate = allowing_loopback(&backend, &["--gateway-config", &path]).await;
    let elsewhere = format!("{base}/elsewhere/v1");
    // Others reach `anthropic/claude` through the wildcard: an addition may not take it.
    let (status, body) = add(&sandgate, &model("anthropic/claude", &elsewhere)).await;
    assert_eq!(status, 409, "{body}");
    let (status, body) = add(&sandgate, &model("gpt", &elsewhere)).await;
    assert_eq!(status, 409, "{body}");
    let (status, _) = chat(&sandgate, MASTER_KEY, "anthropic/claude", None).await;
    assert_eq!(status, 200);
    assert_eq!(upstream.last().path, "/any/v1/chat/completions");
    // Unless the request says so.
    let mut meant = model("anthropic/claude", &elsewhere);
    meant["replace_configured"] = json!(true);
    let (status, body) = add(&sandgate, &meant).await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = chat(&sandgate, MASTER_KEY, "anthropic/claude", None).await;
    assert_eq!(status, 200);
    assert_eq!(upstream.last().path, "/elsewhere/v1/chat/completions");
}
