//! The gateway's virtual keys: a sandbox's key calls the models it names within its
//! budgets, and only the master key administers the gateway (issue: the gateway's keys).

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, Sandgate, file_with};
use crate::model_gateway::{FakeUpstream, MASTER_KEY, UPSTREAM_KEY};

/// The fake upstream answers every chat completion with usage 11 prompt and 7
/// completion tokens: at these prices, 0.011 + 0.014 = 0.025 a call.
const CALL_COST: f64 = 0.025;

fn config(upstream: &FakeUpstream) -> tempfile::NamedTempFile {
    let base = upstream.base();
    file_with(&format!(
        r#"model_list:
  - model_name: gpt
    litellm_params: {{model: openai/azure/gpt-4o, api_base: "{base}/openai/v1", api_key: {UPSTREAM_KEY}}}
    model_info: {{input_cost_per_token: 0.001, output_cost_per_token: 0.002}}
  - model_name: claude
    litellm_params: {{model: gateway_proxy/claude-sonnet, api_base: "{base}", api_key: {UPSTREAM_KEY}}}
    model_info: {{input_cost_per_token: 0.001, output_cost_per_token: 0.002}}
  - model_name: other
    litellm_params: {{model: openai/other, api_base: "{base}/openai/v1", api_key: {UPSTREAM_KEY}}}
"#
    ))
}

pub(crate) struct Gateway {
    pub(crate) sandgate: Sandgate,
    pub(crate) upstream: FakeUpstream,
    _config: tempfile::NamedTempFile,
}

pub(crate) async fn gateway(backend: &Backend) -> Gateway {
    gateway_configured(backend, config).await
}

/// Sandgate's gateway on `backend`, configured by `config` of a fake upstream.
pub(crate) async fn gateway_configured(
    backend: &Backend,
    config: fn(&FakeUpstream) -> tempfile::NamedTempFile,
) -> Gateway {
    let upstream = FakeUpstream::start().await;
    let config = config(&upstream);
    let path = config.path().display().to_string();
    let sandgate = Sandgate::start_with(
        backend,
        &["--gateway-config", &path, "--proxy-master-key", MASTER_KEY],
    )
    .await;
    Gateway {
        sandgate,
        upstream,
        _config: config,
    }
}

/// A call's status and JSON body.
pub(crate) async fn send(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let response = request.send().await.expect("request");
    let status = response.status();
    let text = response.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

pub(crate) fn post(
    sandgate: &Sandgate,
    path: &str,
    key: &str,
    body: &Value,
) -> reqwest::RequestBuilder {
    sandgate
        .client
        .post(sandgate.url(path))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(body.to_string())
}

fn get(sandgate: &Sandgate, path: &str, key: &str) -> reqwest::RequestBuilder {
    sandgate.client.get(sandgate.url(path)).bearer_auth(key)
}

/// A key from `/key/generate` with `body`: the key, and its token.
pub(crate) async fn generate(sandgate: &Sandgate, body: &Value) -> (String, String) {
    let (status, generated) = send(post(sandgate, "/key/generate", MASTER_KEY, body)).await;
    assert_eq!(status, 200, "{generated}");
    let key = generated["key"].as_str().expect("the key").to_owned();
    let token = generated["token"].as_str().expect("its token").to_owned();
    (key, token)
}

pub(crate) async fn chat(
    sandgate: &Sandgate,
    key: &str,
    model: &str,
    session: Option<&str>,
) -> (StatusCode, Value) {
    let mut request = post(
        sandgate,
        "/v1/chat/completions",
        key,
        &json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}),
    );
    if let Some(session) = session {
        request = request.header("x-litellm-session-id", session);
    }
    send(request).await
}

/// A key's spend as `/key/info` says, once it reaches `at_least` (spend is written just
/// after each call ends).
pub(crate) async fn spend_reaches(sandgate: &Sandgate, token: &str, at_least: f64) -> f64 {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (status, info) =
            send(get(sandgate, &format!("/key/info?key={token}"), MASTER_KEY)).await;
        assert_eq!(status, 200, "{info}");
        let spend = info["info"]["spend"].as_f64().expect("spend");
        if spend >= at_least - 1e-9 || tokio::time::Instant::now() > deadline {
            return spend;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// The spend log once it holds `count` entries (written just after each call ends).
async fn spend_logs(sandgate: &Sandgate, count: usize) -> Value {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (status, logs) = send(get(sandgate, "/spend/logs", MASTER_KEY)).await;
        assert_eq!(status, 200, "{logs}");
        if logs.as_array().map_or(0, Vec::len) >= count || tokio::time::Instant::now() > deadline {
            return logs;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

fn assert_budget_exceeded(status: StatusCode, body: &Value) {
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["type"], "budget_exceeded", "{body}");
    assert_eq!(body["error"]["code"], "422", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("Budget has been exceeded!"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_virtual_key_calls_its_models_within_its_budget_and_no_more() {
    let backend = Backend::embedded();
    let gateway = gateway(&backend).await;
    let sandgate = &gateway.sandgate;
    // LiteLLM's documented body, plus a budget.
    let (key, token) = generate(
        sandgate,
        &json!({"models": ["gpt", "claude"], "metadata": {"user": "ishaan@berri.ai"}, "key_alias": "sandbox-1", "max_budget": 2.0 * CALL_COST}),
    )
    .await;
    assert!(key.starts_with("sk-"));

    let (status, body) = chat(sandgate, &key, "gpt", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(spend_reaches(sandgate, &token, CALL_COST).await, CALL_COST);
    // The spend log names the key by its hash and alias, never the key, and the cost.
    let logs = spend_logs(sandgate, 1).await;
    let entry = &logs[0];
    assert_eq!(entry["api_key"], token.as_str(), "{entry}");
    assert_eq!(entry["key_alias"], "sandbox-1", "{entry}");
    assert!(
        (entry["spend"].as_f64().expect("spend") - CALL_COST).abs() < 1e-12,
        "{entry}"
    );
    assert!(!logs.to_string().contains(&key));

    // A model outside its list, as LiteLLM refuses it: 403 key_model_access_denied.
    let (status, body) = chat(sandgate, &key, "other", None).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["type"], "key_model_access_denied", "{body}");
    assert_eq!(body["error"]["param"], "model", "{body}");
    // Its model list shows its models only.
    let (_, models) = send(get(sandgate, "/v1/models", &key)).await;
    let ids: Vec<&str> = models["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter_map(|model| model["id"].as_str())
        .collect();
    assert_eq!(ids, ["gpt", "claude"]);
    let (_, info) = send(get(sandgate, "/model/info", &key)).await;
    assert_eq!(info["data"].as_array().map(Vec::len), Some(2), "{info}");

    // The second call reaches the budget; the third is refused, on every API, before it
    // goes upstream.
    let (status, _) = chat(sandgate, &key, "gpt", None).await;
    assert_eq!(status, 200);
    spend_reaches(sandgate, &token, 2.0 * CALL_COST).await;
    let reached = gateway.upstream.count();
    let (status, body) = chat(sandgate, &key, "gpt", None).await;
    assert_budget_exceeded(status, &body);
    for (path, model, call) in [
        (
            "/v1/responses",
            "gpt",
            json!({"model": "gpt", "input": "hi"}),
        ),
        (
            "/v1/embeddings",
            "gpt",
            json!({"model": "gpt", "input": "hi"}),
        ),
        (
            "/v1/completions",
            "gpt",
            json!({"model": "gpt", "prompt": "hi"}),
        ),
    ] {
        let (status, body) = send(post(sandgate, path, &key, &call)).await;
        assert_budget_exceeded(status, &body);
        let _ = model;
    }
    let (status, body) = send(post(sandgate, "/v1/messages", &key, &json!({"model": "claude", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}))).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], "budget_exceeded", "{body}");
    assert_eq!(
        gateway.upstream.count(),
        reached,
        "a refused call went upstream"
    );

    // Raising the budget lets it call again, at once.
    let (status, body) = send(post(
        sandgate,
        "/key/update",
        MASTER_KEY,
        &json!({"key": key, "max_budget": 1.0}),
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["max_budget"], 1.0);
    let (status, body) = chat(sandgate, &key, "gpt", None).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_virtual_key_may_not_administer_the_gateway() {
    let backend = Backend::embedded();
    let gateway = gateway(&backend).await;
    let sandgate = &gateway.sandgate;
    let (key, token) = generate(sandgate, &json!({"key_alias": "agent"})).await;
    let (_, other) = generate(sandgate, &json!({"key_alias": "other"})).await;
    let upstream = gateway.upstream.base();
    for (path, body) in [
        (
            "/model/new",
            json!({"model_name": "mine", "gateway_params": {"model": "openai/x", "api_base": format!("{upstream}/v1")}}),
        ),
        ("/key/generate", json!({})),
        ("/key/update", json!({"key": key, "max_budget": 100})),
        ("/key/delete", json!({"keys": [other]})),
    ] {
        let (status, answer) = send(post(sandgate, path, &key, &body)).await;
        assert_eq!(status, 403, "{path}: {answer}");
        assert_eq!(
            answer["error"]["type"], "permission_error",
            "{path}: {answer}"
        );
    }
    for path in [
        "/spend/logs",
        "/key/list",
        &format!("/key/info?key={other}"),
    ] {
        let (status, answer) = send(get(sandgate, path, &key)).await;
        assert_eq!(status, 403, "{path}: {answer}");
    }
    // Its own info, without naming itself; never the key.
    let (status, info) = send(get(sandgate, "/key/info", &key)).await;
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["info"]["token"], token.as_str());
    assert_eq!(info["info"]["key_alias"], "agent");
    assert!(!info.to_string().contains(&key));
    // Nothing it tried changed anything.
    let (_, list) = send(get(sandgate, "/key/list", MASTER_KEY)).await;
    assert_eq!(list["total_count"], 2, "{list}");
    let (status, _) = chat(sandgate, &key, "mine", None).await;
    assert_eq!(status, 404);
    // The master key beside the key (kept from its calls, which skip the master key's
    // check) is the master key still; the key alone, refused still.
    let (status, list) =
        send(get(sandgate, "/key/list", &key).header("x-api-key", MASTER_KEY)).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["total_count"], 2, "{list}");
    let (status, _) = send(get(sandgate, "/key/list", &key)).await;
    assert_eq!(status, 403);
    // A key nobody issued is refused as a wrong key is.
    let (status, body) = chat(sandgate, "sk-made-up-key-of-some-length", "gpt", None).await;
    assert_eq!(status, 401, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_shown_once_and_stored_as_their_hash() {
    let backend = Backend::embedded();
    let gateway = gateway(&backend).await;
    let sandgate = &gateway.sandgate;
    let (key, token) = generate(sandgate, &json!({"key_alias": "kept"})).await;
    let chosen = "sk-chosen-by-the-operator-0123456789";
    let (status, body) = send(post(
        sandgate,
        "/key/generate",
        MASTER_KEY,
        &json!({"key": chosen}),
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = chat(sandgate, chosen, "gpt", None).await;
    assert_eq!(status, 200);
    let (status, list) = send(get(
        sandgate,
        "/key/list?return_full_object=true",
        MASTER_KEY,
    ))
    .await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["total_count"], 2);
    assert!(list.to_string().contains(&token));
    assert!(!list.to_string().contains(&key) && !list.to_string().contains(chosen));
    // An alias names one key.
    let (status, _) = send(post(
        sandgate,
        "/key/generate",
        MASTER_KEY,
        &json!({"key_alias": "kept"}),
    ))
    .await;
    assert_eq!(status, 409);
    let Backend::Embedded(dir) = &backend else {
        unreachable!()
    };
    gateway.sandgate.stop().await;
    let stored = std::fs::read(dir.path().join("sandgate.redb")).expect("the database");
    for secret in [key.as_str(), chosen] {
        assert!(
            !stored
                .windows(secret.len())
                .any(|window| window == secret.as_bytes()),
            "a key is stored in clear"
        );
    }
    assert!(
        stored
            .windows(token.len())
            .any(|window| window == token.as_bytes())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_or_deleted_key_is_refused_at_once() {
    let backend = Backend::embedded();
    let gateway = gateway(&backend).await;
    let sandgate = &gateway.sandgate;
    let (key, _) = generate(sandgate, &json!({"key_alias": "short-lived"})).await;
    let (status, _) = chat(sandgate, &key, "gpt", None).await;
    assert_eq!(status, 200);
    let (status, body) = send(post(
        sandgate,
        "/key/delete",
        MASTER_KEY,
        &json!({"key_aliases": ["short-lived"]}),
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["deleted_keys"], json!(["short-lived"]));
    let (status, _) = chat(sandgate, &key, "gpt", None).await;
    assert_eq!(status, 401);
    // Deleting what does not exist deletes nothing and says so.
    let (status, _) = send(post(
        sandgate,
        "/key/delete",
        MASTER_KEY,
        &json!({"keys": [key]}),
    ))
    .await;
    assert_eq!(status, 404);

    let (key, _) = generate(sandgate, &json!({"duration": "1s"})).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let body = loop {
        let (status, body) = chat(sandgate, &key, "gpt", None).await;
        if status == 401 || tokio::time::Instant::now() > deadline {
            break body;
        }
        assert_eq!(status, 200, "{body}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(body["error"]["type"], "expired_key", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_budget_stops_one_session_and_not_another() {
    let backend = Backend::embedded();
    let gateway = gateway(&backend).await;
    let sandgate = &gateway.sandgate;
    let (key, token) = generate(
        sandgate,
        &json!({"max_budget_per_session": CALL_COST, "max_budget": 10.0}),
    )
    .await;
    let (status, _) = chat(sandgate, &key, "gpt", Some("conversation-a")).await;
    assert_eq!(status, 200);
    spend_reaches(sandgate, &token, CALL_COST).await;
    let (status, body) = chat(sandgate, &key, "gpt", Some("conversation-a")).await;
    assert_budget_exceeded(status, &body);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("Session"),
        "{body}"
    );
    // Another conversation of the same key goes on.
    let (status, body) = chat(sandgate, &key, "gpt", Some("conversation-b")).await;
    assert_eq!(status, 200, "{body}");
    // A call naming no session would escape the budget per session: refused.
    let (status, body) = chat(sandgate, &key, "gpt", None).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("must name its session"),
        "{body}"
    );
}

/// Two replicas of the gateway on one Redis, with their upstream and configuration.
struct Replicas {
    one: Sandgate,
    two: Sandgate,
    _backend: Backend,
    _upstream: FakeUpstream,
    _config: tempfile::NamedTempFile,
}

impl Replicas {
    async fn start() -> Self {
        let backend = Backend::redis().await;
        let upstream = FakeUpstream::start().await;
        let config = config(&upstream);
        let path = config.path().display().to_string();
        let args = [
            "--gateway-config",
            path.as_str(),
            "--proxy-master-key",
            MASTER_KEY,
        ];
        Self {
            one: Sandgate::start_with(&backend, &args).await,
            two: Sandgate::start_with(&backend, &args).await,
            _backend: backend,
            _upstream: upstream,
            _config: config,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_budgets_hold_across_replicas_on_redis() {
    let replicas = Replicas::start().await;
    let (one, two) = (&replicas.one, &replicas.two);
    let (key, token) = generate(
        one,
        &json!({"models": ["gpt"], "max_budget": 2.0 * CALL_COST}),
    )
    .await;
    // Generated on one replica, it works on the other at once.
    let (status, body) = chat(two, &key, "gpt", None).await;
    assert_eq!(status, 200, "{body}");
    // Its hold (up to 32,768 output tokens: more than the budget) is released once its
    // settlement is written, just after its answer (see docs/model-gateway.md).
    spend_reaches(one, &token, CALL_COST).await;
    let (status, _) = chat(one, &key, "gpt", None).await;
    assert_eq!(status, 200);
    // The spend of both counts on each.
    assert_eq!(
        spend_reaches(one, &token, 2.0 * CALL_COST).await,
        2.0 * CALL_COST
    );
    assert_eq!(
        spend_reaches(two, &token, 2.0 * CALL_COST).await,
        2.0 * CALL_COST
    );
    // Each replica refuses, and goes on refusing: the admission judges the spend as
    // stored, whatever a replica kept of the key.
    for replica in [one, two] {
        let body = passes_then(422, || chat(replica, &key, "gpt", None)).await;
        assert_budget_exceeded(StatusCode::UNPROCESSABLE_ENTITY, &body);
    }
    // A change on one replica holds on the other once notified: a model taken away.
    let (status, _) = send(post(
        one,
        "/key/update",
        MASTER_KEY,
        &json!({"key": token, "models": ["claude"], "max_budget": null}),
    ))
    .await;
    assert_eq!(status, 200);
    passes_then(403, || chat(two, &key, "gpt", None)).await;
    let (status, _) = send(post(
        two,
        "/key/delete",
        MASTER_KEY,
        &json!({"keys": [key]}),
    ))
    .await;
    assert_eq!(status, 200);
    passes_then(401, || chat(one, &key, "claude", None)).await;
}

/// Team records are kept by each replica (no store read on a call's path) until a change
/// is published: a team's lowered budget and its block hold on the other replica within
/// the notification's delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_changed_on_one_replica_holds_on_the_other_on_redis() {
    let replicas = Replicas::start().await;
    let (one, two) = (&replicas.one, &replicas.two);
    let team = |path: &'static str, body: Value| async move {
        let (status, answer) = send(post(one, path, MASTER_KEY, &body)).await;
        assert_eq!(status, 200, "{path}: {answer}");
    };
    team("/team/new", json!({"team_id": "red", "max_budget": 100.0})).await;
    team("/team/new", json!({"team_id": "blue"})).await;
    let (red, red_token) = generate(one, &json!({"models": ["gpt"], "team_id": "red"})).await;
    let (blue, _) = generate(one, &json!({"models": ["gpt"], "team_id": "blue"})).await;
    // Replica two reads both teams' records, and keeps them.
    for key in [&red, &red, &blue] {
        let (status, body) = chat(two, key, "gpt", None).await;
        assert_eq!(status, 200, "{body}");
    }
    spend_reaches(one, &red_token, 2.0 * CALL_COST).await;
    team(
        "/team/update",
        json!({"team_id": "red", "max_budget": CALL_COST}),
    )
    .await;
    let body = passes_then(400, || chat(two, &red, "gpt", None)).await;
    assert_eq!(body["error"]["type"], "budget_exceeded", "{body}");
    team("/team/block", json!({"team_id": "blue"})).await;
    let body = passes_then(401, || chat(two, &blue, "gpt", None)).await;
    assert_eq!(body["error"]["type"], "auth_error", "{body}");
}

/// Calls of one client that may still pass on a replica after a change made on the other
/// is acknowledged, at most. A replica holds the change once the store's notification
/// reaches it, within milliseconds (docs/model-gateway.md), and each of these calls, one after the other, takes a round
/// trip through the gateway to its upstream: ten calls is that delay's worth, with room
/// for a loaded machine. A replica that missed the notification would serve its kept read
/// for 30 s, thousands of calls.
const PASSING_AFTER_A_CHANGE: usize = 10;

/// Calls `call`, one call after the other, until it answers `status`, counting the calls
/// that still pass (200) meanwhile: at most [`PASSING_AFTER_A_CHANGE`]. Then the refusal
/// holds: the next calls get it too. The refusal's body.
async fn passes_then<F, Fut>(status: u16, call: F) -> Value
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = (StatusCode, Value)>,
{
    let mut passed = 0;
    let refusal = loop {
        let (answered, body) = call().await;
        if answered == status {
            break body;
        }
        assert_eq!(
            answered, 200,
            "neither passed nor refused with {status}: {body}"
        );
        passed += 1;
        assert!(
            passed <= PASSING_AFTER_A_CHANGE,
            "{passed} calls passed after the change, more than its notification's delay allows"
        );
    };
    for _ in 0..3 {
        let (answered, body) = call().await;
        assert_eq!(answered, status, "the refusal did not hold: {body}");
    }
    refusal
}
