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

/// How many times its baseline `/health` may take under attack: a gateway blocked or
/// starved by what it serves answers in seconds, or never.
const HEALTH_SLOWDOWN: u32 = 20;
/// The baseline's floor: a scheduling hiccup of a loaded machine is not a slowdown.
const HEALTH_FLOOR: Duration = Duration::from_millis(10);

/// `/health` on `url` now, before any attack: the slowest of five answers, measured in
/// the same run and under the same load (the tests beside it) as the checks held to it.
async fn health_baseline(url: &str) -> Duration {
    let client = reqwest::Client::new();
    let mut slowest = HEALTH_FLOOR;
    for _ in 0..5 {
        let started = std::time::Instant::now();
        let status = client
            .get(format!("{url}/health"))
            .send()
            .await
            .expect("/health")
            .status();
        assert_eq!(status, 200);
        slowest = slowest.max(started.elapsed());
    }
    slowest
}

/// `/health` answers within [`HEALTH_SLOWDOWN`] times its `baseline`: the gateway is not
/// taken down by what it just served. (Seen failing, "did not answer within 200ms (20
/// times its 10ms before)", with a cut answer's upstream drained for 3 s on the runtime's
/// threads.)
async fn healthy(url: &str, baseline: Duration) {
    let bound = baseline * HEALTH_SLOWDOWN;
    let client = reqwest::Client::builder()
        .timeout(bound)
        .build()
        .expect("client");
    let status = client
        .get(format!("{url}/health"))
        .send()
        .await
        .unwrap_or_else(|err| {
            panic!("/health did not answer within {bound:?} ({HEALTH_SLOWDOWN} times its {baseline:?} before): {err}")
        })
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
