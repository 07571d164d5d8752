//! The model gateway from the hostile side: an entry pointing back at the gateway, at
//! internal addresses or at a name the operator routes; an upstream whose answer never
//! ends, announces gigabytes, or streams one endless line; bookkeeping a client can
//! inflate. Each ends in a clear error, and the gateway keeps answering meanwhile.
//!
//! This file holds the shared steps (a gateway allowing loopback, adding a model, a
//! health probe); the tests are by concern: where an added entry may point
//! (`routing.rs`), hostile upstream answers (`answers.rs`), and bookkeeping a client can
//! inflate (`bookkeeping.rs`).

mod answers;
mod bookkeeping;
mod routing;

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Backend, Sandgate};
use crate::gateway_keys::{post, send};
use crate::model_gateway::MASTER_KEY;

/// `/health` answers within a second: the gateway is not taken down.
async fn healthy(url: &str) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .expect("client");
    let status = client
        .get(format!("{url}/health"))
        .send()
        .await
        .expect("/health answers within a second")
        .status();
    assert_eq!(status, 200);
}

/// `serve` with the master key, whose added models may reach loopback (the tests' own
/// upstreams), and `extra` flags.
async fn allowing_loopback(backend: &Backend, extra: &[&str]) -> Sandgate {
    let mut args = vec![
        "--proxy-master-key",
        MASTER_KEY,
        "--gateway-allowed-upstream-hosts",
        "127.0.0.1",
    ];
    args.extend_from_slice(extra);
    Sandgate::start_with(backend, &args).await
}

async fn add(sandgate: &Sandgate, body: &Value) -> (reqwest::StatusCode, Value) {
    send(post(sandgate, "/model/new", MASTER_KEY, body)).await
}

fn model(name: &str, api_base: &str) -> Value {
    json!({"model_name": name, "gateway_params": {"model": "openai/some-model", "api_base": api_base, "api_key": "k"}})
}
