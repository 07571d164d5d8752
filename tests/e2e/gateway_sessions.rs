//! A session belongs to its conversation (issue 51, point 3), tried from the hostile side:
//! a call from a sandbox's own address has that sandbox's session whatever its header
//! says, and names no other conversation; a key calling from elsewhere cannot name a
//! sandbox's session (and marks nothing: neither its idle clock nor its start's timeline),
//! nor a session another key named first; a key with a budget per session must name one;
//! a client's own peer-address header counts for nothing. The sandboxes are the local
//! driver's, their records given the loopback addresses 127.0.0.7 and 127.0.0.8 (every
//! 127/8 address is this machine's), and the test's clients bound to them.

use std::net::IpAddr;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::scripted_upstream::ScriptedUpstream;
use crate::common::{Backend, RUNTIME_KEY, Sandgate, file_with};
use crate::gateway_keys::{generate, send};
use crate::gateway_usage::newest_entry;
use crate::model_gateway::MASTER_KEY;
use crate::store_conformance::open;
use sandgate_store::Store;

const PATIENCE: Duration = Duration::from_secs(30);

/// A client whose connections leave from `address`.
fn client_from(address: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(address.parse::<IpAddr>().expect("an address"))
        .build()
        .expect("client")
}

/// Gives the sandbox of `session` the source address `address`, written over whatever
/// the reconciler writes meanwhile (compare-and-swap).
async fn give_address(store: &Store, session: &str, address: &str) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let record = store
            .sandboxes
            .sandbox_for_session(session)
            .await
            .expect("read")
            .expect("the sandbox");
        let mut next = record.clone();
        next.source_address = Some(address.to_owned());
        next.version += 1;
        let written = store
            .sandboxes
            .put_sandbox(Some(&record), &next, None)
            .await
            .expect("write");
        if written {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "never written");
    }
}

/// A chat completion as `key` from `client`, naming `session` when given.
async fn call(
    sandgate: &Sandgate,
    client: &reqwest::Client,
    key: &str,
    session: Option<&str>,
) -> (StatusCode, Value) {
    let mut request = client
        .post(sandgate.url("/v1/chat/completions"))
        .bearer_auth(key)
        .json(&json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]}));
    if let Some(session) = session {
        request = request.header("x-litellm-session-id", session);
    }
    send(request).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_belongs_to_its_conversation() {
    let upstream = ScriptedUpstream::start(Vec::new()).await;
    let config = file_with(&format!(
        "model_list:\n  - model_name: chat\n    litellm_params: {{model: openai/up-model, api_base: \"{}/v1\", api_key: k}}\n",
        upstream.base()
    ));
    let backend = Backend::redis().await;
    let path = config.path().display().to_string();
    let sandgate = Sandgate::start_with(
        &backend,
        &[
            "--gateway-config",
            &path,
            "--proxy-master-key",
            MASTER_KEY,
            "--local-sandbox-start-seconds",
            "0.01",
        ],
    )
    .await;
    // Two sandboxes, given the addresses their connections come from.
    let store = open(&backend).await;
    for (session, address) in [("conv-a", "127.0.0.7"), ("conv-b", "127.0.0.8")] {
        let (status, started) = send(
            sandgate
                .client
                .post(sandgate.url("/start"))
                .header("x-api-key", RUNTIME_KEY)
                .json(
                    &json!({"image": "ghcr.io/acme/agent:1.0", "command": ["/bin/agent"],
                    "working_dir": "/workspace", "environment": {}, "session_id": session}),
                ),
        )
        .await;
        assert_eq!(status, 200, "{started}");
        give_address(&store, session, address).await;
    }
    let sandbox_a = client_from("127.0.0.7");
    let outside = client_from("127.0.0.1");
    let (key, token) = generate(&sandgate, &json!({"key_alias": "sandbox-key"})).await;
    let (other, other_token) = generate(&sandgate, &json!({"key_alias": "other-key"})).await;

    // Another key naming the sandbox's session from elsewhere: refused, nothing marked.
    let (status, refused) = call(&sandgate, &outside, &other, Some("conv-a")).await;
    assert_eq!(status, 403, "{refused}");
    assert!(
        refused.to_string().contains("a sandbox's conversation"),
        "{refused}"
    );
    // And a client's own peer-address header makes it no sandbox.
    let spoofed = outside
        .post(sandgate.url("/v1/chat/completions"))
        .bearer_auth(&other)
        .header(sandgate_proto::PEER_ADDRESS_METADATA, "127.0.0.7")
        .json(&json!({"model": "chat", "messages": []}));
    let (status, answer) = send(spoofed).await;
    assert_eq!(status, 200, "{answer}");
    let entry = newest_entry(&sandgate, &other_token, 2).await;
    assert!(entry["session_id"].is_null(), "{entry}");
    let untouched = store
        .sandboxes
        .sandbox_for_session("conv-a")
        .await
        .expect("read")
        .expect("the sandbox");
    assert_eq!(untouched.active_at_ms, 0, "the idle clock was marked");
    assert_eq!(
        untouched
            .timeline
            .as_ref()
            .and_then(|timeline| timeline.first_llm_call_at_ms),
        None,
        "the first LLM call was marked"
    );

    // From the sandbox, without a header: the sandbox's session, and its marks.
    let (status, answer) = call(&sandgate, &sandbox_a, &key, None).await;
    assert_eq!(status, 200, "{answer}");
    let entry = newest_entry(&sandgate, &token, 1).await;
    assert_eq!(entry["session_id"], "conv-a", "{entry}");
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let record = store
            .sandboxes
            .sandbox_for_session("conv-a")
            .await
            .expect("read")
            .expect("the sandbox");
        let marked = record
            .timeline
            .as_ref()
            .and_then(|timeline| timeline.first_llm_call_at_ms)
            .is_some();
        // (The idle clock is marked on running sandboxes only: this one may still be
        // starting, the local driver's.)
        if marked {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sandbox's own call marked nothing: {record:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Naming itself is its own; naming the other sandbox's conversation is refused.
    let (status, answer) = call(&sandgate, &sandbox_a, &key, Some("conv-a")).await;
    assert_eq!(status, 200, "{answer}");
    let (status, refused) = call(&sandgate, &sandbox_a, &key, Some("conv-b")).await;
    assert_eq!(status, 403, "{refused}");
    // A session nobody named is the sandbox's once it names it: no key takes it after.
    let (status, answer) = call(&sandgate, &sandbox_a, &key, Some("conv-a-2")).await;
    assert_eq!(status, 200, "{answer}");
    let (status, refused) = call(&sandgate, &outside, &other, Some("conv-a-2")).await;
    assert_eq!(status, 403, "{refused}");

    // Elsewhere, the first key to name a session owns it.
    let (status, answer) = call(&sandgate, &outside, &key, Some("free-session")).await;
    assert_eq!(status, 200, "{answer}");
    let (status, refused) = call(&sandgate, &outside, &other, Some("free-session")).await;
    assert_eq!(status, 403, "{refused}");
    assert!(refused.to_string().contains("another key"), "{refused}");
    let (status, answer) = call(&sandgate, &outside, &key, Some("free-session")).await;
    assert_eq!(status, 200, "{answer}");

    // A key with a budget per session names its session, unless its sandbox gives it one.
    let (budgeted, _) = generate(&sandgate, &json!({"max_budget_per_session": 1.0})).await;
    let (status, refused) = call(&sandgate, &outside, &budgeted, None).await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused.to_string().contains("max_budget_per_session"),
        "{refused}"
    );
    let (status, answer) = call(&sandgate, &sandbox_a, &budgeted, None).await;
    assert_eq!(status, 200, "{answer}");
    // Seven calls reached the upstream: the spoofed one, the sandbox's three, the owner's
    // two, the budgeted key's from the sandbox.
    assert_eq!(upstream.bodies().len(), 7);

    // The gateway keeps what it read of an address, never past a write there: once the
    // address is another sandbox's (written through the store, as another replica's
    // reconciler would), its calls are that sandbox's within the notification's
    // milliseconds, long before a kept read would age out (30 s).
    give_address(&store, "conv-a", "127.0.0.9").await;
    give_address(&store, "conv-b", "127.0.0.7").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    // The key's calls logged so far: four from the sandbox, two from outside.
    let mut logged = 6;
    loop {
        let (status, answer) = call(&sandgate, &sandbox_a, &key, None).await;
        assert_eq!(status, 200, "{answer}");
        logged += 1;
        let entry = newest_entry(&sandgate, &token, logged).await;
        if entry["session_id"] == "conv-b" {
            break;
        }
        assert_eq!(entry["session_id"], "conv-a", "{entry}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the address is still read as the sandbox it was: {entry}"
        );
    }
    // And a call from the address, now conv-b's sandbox's, may not name conv-a.
    let (status, refused) = call(&sandgate, &sandbox_a, &key, Some("conv-a")).await;
    assert_eq!(status, 403, "{refused}");
}
