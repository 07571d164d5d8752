//! Calls admitted against their budgets and limits before they go upstream (issue 51):
//! a burst of concurrent calls on a budget that covers one call (a key's, a team's, a
//! user's, a membership's) passes one call, on one replica and on two sharing Redis, and
//! on a budget of ten calls (the replicas' shares of it) never more than it holds; LiteLLM's `max_parallel_requests`, `rpm_limit` and
//! `tpm_limit` answer its 429 across replicas, a key's and (for all their keys together)
//! a team's and a user's; a client that leaves mid-call releases its hold, and a replica
//! killed mid-call leaves a hold that ends with its lease; calls made one after another
//! are never refused over their own last call's hold, settled off its path, and a stop
//! right after the answers loses none of their settlements; a budget is spent to its
//! end through the replicas' shares of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::routing::post;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::common::{Backend, Sandgate, SandgateProcess, file_with, serve_args};
use crate::gateway_keys::{generate, send};
use crate::model_gateway::MASTER_KEY;

/// Each call's usage (250 prompt and 1,000 completion tokens) at 0.0001 a token.
const CALL_COST: f64 = 0.125;
/// What each call holds: its ~1,080 bytes and its `max_tokens` (1,000) at 0.0001.
const HOLD_AT_MOST: f64 = 0.25;
/// Its 1,000 bytes of content and 1,000 tokens at least.
const HOLD_AT_LEAST: f64 = 0.2;

/// An upstream that answers once its gate opens, and never a request that says `hold`.
struct GatedUpstream {
    base: String,
    arrived: watch::Receiver<usize>,
    open: watch::Sender<bool>,
}

impl GatedUpstream {
    async fn start(open: bool) -> Self {
        let (count, arrived) = watch::channel(0usize);
        let (gate, opened) = watch::channel(open);
        let count = Arc::new(count);
        let app = axum::Router::new().route(
            "/v1/chat/completions",
            post(move |body: String| {
                let (count, mut opened) = (count.clone(), opened.clone());
                async move {
                    count.send_modify(|count| *count += 1);
                    if body.contains("\"hold\"") {
                        std::future::pending::<()>().await;
                    }
                    drop(opened.wait_for(|open| *open).await);
                    axum::Json(json!({
                        "id": "c1", "object": "chat.completion", "model": "up",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
                        "usage": {"prompt_tokens": 250, "completion_tokens": 1000, "total_tokens": 1250},
                    }))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        tokio::spawn(async move { drop(axum::serve(listener, app).await) });
        Self {
            base,
            arrived,
            open: gate,
        }
    }

    fn arrived(&self) -> usize {
        *self.arrived.borrow()
    }

    async fn wait_for_arrivals(&self, count: usize) {
        let mut arrived = self.arrived.clone();
        let waited = tokio::time::timeout(
            Duration::from_secs(30),
            arrived.wait_for(|seen| *seen >= count),
        );
        assert!(
            matches!(waited.await, Ok(Ok(_))),
            "{count} calls never reached the upstream"
        );
    }
}

fn config(upstream: &GatedUpstream) -> tempfile::NamedTempFile {
    file_with(&format!(
        "model_list:\n  - model_name: gpt\n    litellm_params: {{model: openai/up, api_base: \"{}/v1\", api_key: sk-up}}\n    model_info: {{input_cost_per_token: 0.0001, output_cost_per_token: 0.0001}}\n",
        upstream.base
    ))
}

async fn replicas(
    backend: &Backend,
    config: &tempfile::NamedTempFile,
    count: usize,
) -> Vec<Sandgate> {
    let path = config.path().display().to_string();
    let mut replicas = Vec::new();
    for _ in 0..count {
        replicas.push(
            Sandgate::start_with(
                backend,
                &["--gateway-config", &path, "--proxy-master-key", MASTER_KEY],
            )
            .await,
        );
    }
    replicas
}

/// A replica in a process of its own (one a test kills or stops), with `extra` arguments.
async fn replica_process(
    backend: &Backend,
    config: &tempfile::NamedTempFile,
    extra: &[&str],
) -> SandgateProcess {
    let mut args = serve_args(backend);
    let path = config.path().display().to_string();
    args.extend(
        ["--gateway-config", &path, "--proxy-master-key", MASTER_KEY]
            .into_iter()
            .chain(extra.iter().copied())
            .map(str::to_owned),
    );
    SandgateProcess::spawn(&args, &[]).await
}

/// A call of about 1,080 bytes asking at most 1,000 tokens; `hold`: one the upstream never
/// answers. Each call's prompt is its own, as concurrent calls' are: the gateway refuses
/// the same prompt in flight several times at once as a loop.
fn call(client: &reqwest::Client, url: &str, key: &str, hold: bool) -> reqwest::RequestBuilder {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let content = if hold {
        "hold".to_owned()
    } else {
        format!("{n:06}{}", "x".repeat(994))
    };
    client
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&json!({"model": "gpt", "max_tokens": 1000,
            "messages": [{"role": "user", "content": content}]}))
}

/// The key's spend (`/key/info`) once every call's settlement is written: it no longer
/// moves for a while after reaching `at_least`.
async fn spend(replica: &Sandgate, token: &str, at_least: f64) -> f64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (status, info) = send(
            replica
                .client
                .get(replica.url(&format!("/key/info?key={token}")))
                .bearer_auth(MASTER_KEY),
        )
        .await;
        assert_eq!(status, 200, "{info}");
        let spend = info["info"]["spend"].as_f64().expect("spend");
        if spend >= at_least - 1e-9 || tokio::time::Instant::now() > deadline {
            return spend;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whose budget covers one call in a burst: the key's own, or (over a key with none of
/// its own) its team's, its user's or its membership of its team's.
#[derive(Clone, Copy, Debug)]
enum BudgetOf {
    Key,
    Team,
    User,
    Member,
}

const TEAM: &str = "burst-team";
const USER: &str = "burst-user";

impl BudgetOf {
    /// A key whose calls count towards a budget of `budget` of this kind, made through
    /// LiteLLM's routes on `replica`: the key and its token.
    async fn key_with(self, replica: &Sandgate, budget: f64) -> (String, String) {
        let made = |path: &'static str, body: Value| async move {
            let (status, answer) = managed(replica, path, body).await;
            assert_eq!(status, 200, "{path}: {answer}");
        };
        match self {
            Self::Key => return generate(replica, &json!({"max_budget": budget})).await,
            Self::Team => made("/team/new", json!({"team_id": TEAM, "max_budget": budget})).await,
            Self::User => {
                made(
                    "/user/new",
                    json!({"user_id": USER, "max_budget": budget, "auto_create_key": false}),
                )
                .await;
            }
            Self::Member => {
                made("/team/new", json!({"team_id": TEAM})).await;
                made(
                    "/team/member_add",
                    json!({"team_id": TEAM, "member": {"user_id": USER, "role": "user"},
                           "max_budget_in_team": budget}),
                )
                .await;
            }
        }
        generate(replica, &json!({"team_id": TEAM, "user_id": USER})).await
    }

    /// LiteLLM's refusal of this budget: its status and the start of its message.
    fn refusal(self) -> (StatusCode, String) {
        match self {
            Self::Key => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "Budget has been exceeded! Key=".into(),
            ),
            Self::Team => (
                StatusCode::BAD_REQUEST,
                format!("Budget has been exceeded! Team={TEAM} Current cost: "),
            ),
            Self::User => (
                StatusCode::BAD_REQUEST,
                format!("ExceededBudget: User={USER} over budget. Spend="),
            ),
            Self::Member => (
                StatusCode::BAD_REQUEST,
                format!("Budget has been exceeded! User={USER} in Team={TEAM} Current cost: "),
            ),
        }
    }

    /// What the budget's owner spent, as LiteLLM's info routes show it, once it reaches
    /// `at_least` (the settlement is written just after the answer).
    async fn spent(self, replica: &Sandgate, token: &str, at_least: f64) -> f64 {
        let (path, pick): (String, fn(&Value) -> Option<f64>) = match self {
            Self::Key => return spend(replica, token, at_least).await,
            Self::Team => (format!("/team/info?team_id={TEAM}"), |info| {
                info["team_info"]["spend"].as_f64()
            }),
            Self::User => (format!("/user/info?user_id={USER}"), |info| {
                info["user_info"]["spend"].as_f64()
            }),
            Self::Member => (format!("/team/info?team_id={TEAM}"), |info| {
                info["team_memberships"][0]["spend"].as_f64()
            }),
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let (status, info) = send(
                replica
                    .client
                    .get(replica.url(&path))
                    .bearer_auth(MASTER_KEY),
            )
            .await;
            assert_eq!(status, 200, "{info}");
            let spent = pick(&info).unwrap_or_else(|| panic!("no spend in {info}"));
            if spent >= at_least - 1e-9 || tokio::time::Instant::now() > deadline {
                return spent;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// 50 calls at once, spread over `count` replicas, on a budget of `budget`'s kind that
/// covers one call. The upstream answers none until every call has either reached it or
/// been refused: all 50 are in flight together.
async fn burst(backend: Backend, count: usize, budget: BudgetOf) {
    burst_on(backend, count, budget, 1).await;
}

/// [`burst`] on a budget that covers `covers` calls: every admitted call but the last
/// found room for its whole hold, on every replica together (shares of the budget
/// included), and the spend is exactly the calls admitted.
async fn burst_on(backend: Backend, count: usize, budget: BudgetOf, covers: u32) {
    let upstream = GatedUpstream::start(false).await;
    let config = config(&upstream);
    let replicas = replicas(&backend, &config, count).await;
    let amount = f64::from(covers) * CALL_COST;
    let (key, token) = budget.key_with(&replicas[0], amount).await;
    let refused = Arc::new(AtomicUsize::new(0));
    let mut calls = Vec::new();
    for index in 0..50 {
        let replica = &replicas[index % replicas.len()];
        let request = call(&replica.client, &replica.url(""), &key, false);
        let refused = refused.clone();
        calls.push(tokio::spawn(async move {
            let (status, body) = send(request).await;
            if status != 200 {
                refused.fetch_add(1, Ordering::SeqCst);
            }
            (status, body)
        }));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while upstream.arrived() + refused.load(Ordering::SeqCst) < 50 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the calls never settled down"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    upstream.open.send_replace(true);
    let (refused_with, says) = budget.refusal();
    let mut passed = 0;
    for call in calls {
        let (status, body) = call.await.expect("call");
        match status {
            StatusCode::OK => passed += 1,
            _ => {
                assert_eq!(status, refused_with, "{body}");
                assert_eq!(body["error"]["type"], "budget_exceeded", "{body}");
                let message = body["error"]["message"].as_str().unwrap_or_default();
                assert!(message.starts_with(&says), "{body}");
            }
        }
    }
    // All but the last admitted call found room for its whole hold, on every replica
    // together: on a one-call budget, whose first hold is larger than it, one call.
    let most = (amount / HOLD_AT_LEAST).floor() as usize + 1;
    assert!(
        (1..=most).contains(&passed),
        "{passed} calls passed a {covers}-call {budget:?} budget (at most {most})"
    );
    let expected = passed as f64 * CALL_COST;
    let spent = budget.spent(&replicas[0], &token, expected).await;
    assert!(
        (spent - expected).abs() < 1e-9,
        "spend {spent} of {passed} calls"
    );
    assert!(spent <= amount + HOLD_AT_MOST);
    if covers == 1 {
        // Once spent, the budget refuses the next call too, on the other replica.
        let other = &replicas[1 % count];
        let (status, body) = send(call(&other.client, &other.url(""), &key, false)).await;
        assert_eq!(status, refused_with, "{body}");
    }
}

/// A budget of ten calls: each replica's first calls take shares of it, which together
/// never hold more than its room but for one call's hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_calls_on_a_ten_call_budget_on_two_replicas() {
    burst_on(Backend::redis().await, 2, BudgetOf::Key, 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_calls_on_a_ten_call_team_budget_on_two_replicas() {
    burst_on(Backend::redis().await, 2, BudgetOf::Team, 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_calls_on_a_one_call_budget_on_the_embedded_store() {
    burst(Backend::embedded(), 1, BudgetOf::Key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_calls_on_a_one_call_budget_on_redis() {
    burst(Backend::redis().await, 1, BudgetOf::Key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_calls_on_a_one_call_budget_on_two_replicas() {
    burst(Backend::redis().await, 2, BudgetOf::Key).await;
}

/// A team's, a user's and a membership's budgets hold all their keys' calls as a key's
/// budget holds its own (issue 51): one call of 50 passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_calls_on_a_one_call_team_budget_on_the_embedded_store() {
    burst(Backend::embedded(), 1, BudgetOf::Team).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_calls_on_a_one_call_team_budget_on_two_replicas() {
    burst(Backend::redis().await, 2, BudgetOf::Team).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_calls_on_a_one_call_user_budget_on_two_replicas() {
    burst(Backend::redis().await, 2, BudgetOf::User).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_calls_on_a_one_call_membership_budget_on_two_replicas() {
    burst(Backend::redis().await, 2, BudgetOf::Member).await;
}

fn assert_rate_limited(status: StatusCode, body: &Value, retry_after: Option<&str>, says: &str) {
    assert_limited_by("key", status, body, retry_after, says);
}

/// LiteLLM's 429 for a rate limit of `kind` (key, user, team), saying `says`.
fn assert_limited_by(
    kind: &str,
    status: StatusCode,
    body: &Value,
    retry_after: Option<&str>,
    says: &str,
) {
    assert_eq!(status, 429, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!("LiteLLM Rate Limit Handler for rate limit type = {kind}. Crossed TPM / RPM / Max Parallel Request Limit. current rpm: ")),
        "{body}"
    );
    assert!(message.contains(says), "{says} not in {body}");
    let seconds: u32 = retry_after
        .and_then(|value| value.parse().ok())
        .expect("retry-after");
    assert!((1..=60).contains(&seconds), "{seconds}");
}

async fn limited(request: reqwest::RequestBuilder) -> (StatusCode, Value, Option<String>) {
    let response = request.send().await.expect("request");
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let status = response.status();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body, retry_after)
}

/// Calls `request` until it answers `status` (settlements are written just after calls
/// end); the last answer.
async fn until(
    status: StatusCode,
    request: impl Fn() -> reqwest::RequestBuilder,
) -> (StatusCode, Value, Option<String>) {
    crate::common::until(
        Duration::from_secs(20),
        || limited(request()),
        |answer| answer.0 == status,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn litellms_rate_limits_hold_across_replicas() {
    let backend = Backend::redis().await;
    let upstream = GatedUpstream::start(false).await;
    let config = config(&upstream);
    let replicas = replicas(&backend, &config, 2).await;
    let url = |index: usize| replicas[index].url("");
    let client = &replicas[0].client;

    // Two calls in flight, one on each replica: a third is refused.
    let (key, _) = generate(&replicas[0], &json!({"max_parallel_requests": 2})).await;
    let first = tokio::spawn(send(call(client, &url(0), &key, false)));
    let second = tokio::spawn(send(call(client, &url(1), &key, false)));
    upstream.wait_for_arrivals(2).await;
    let (status, body, retry_after) = limited(call(client, &url(0), &key, false)).await;
    assert_rate_limited(
        status,
        &body,
        retry_after.as_deref(),
        "current max_parallel_requests: 2, max_parallel_requests: 2",
    );
    upstream.open.send_replace(true);
    assert_eq!(first.await.expect("first").0, 200);
    assert_eq!(second.await.expect("second").0, 200);
    let (status, body, _) = until(StatusCode::OK, || call(client, &url(1), &key, false)).await;
    assert_eq!(
        status, 200,
        "the ended calls' holds were not released: {body}"
    );

    // Tokens per minute: counted when calls end, on every replica.
    let (key, _) = generate(&replicas[0], &json!({"tpm_limit": 1000})).await;
    assert_eq!(send(call(client, &url(0), &key, false)).await.0, 200);
    let (status, body, retry_after) = until(StatusCode::TOO_MANY_REQUESTS, || {
        call(client, &url(1), &key, false)
    })
    .await;
    assert_rate_limited(status, &body, retry_after.as_deref(), "tpm limit: 1000");

    // Requests per minute, away from the minute's end so that all count in one.
    away_from_the_minute_s_end().await;
    let (key, _) = generate(&replicas[0], &json!({"rpm_limit": 2})).await;
    assert_eq!(send(call(client, &url(0), &key, false)).await.0, 200);
    assert_eq!(send(call(client, &url(1), &key, false)).await.0, 200);
    let (status, body, retry_after) = limited(call(client, &url(0), &key, false)).await;
    assert_rate_limited(
        status,
        &body,
        retry_after.as_deref(),
        "current rpm: 2, rpm limit: 2",
    );

    // A limit of 0 refuses every call, as LiteLLM's; none of these settings is refused.
    let (key, _) = generate(&replicas[0], &json!({"rpm_limit": 0})).await;
    assert_eq!(limited(call(client, &url(1), &key, false)).await.0, 429);
}

/// Waits, when the minute is near its end, for the next one: calls counted in one minute.
async fn away_from_the_minute_s_end() {
    let second_of_minute = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        % 60;
    if second_of_minute > 45 {
        tokio::time::sleep(Duration::from_secs(61 - second_of_minute)).await;
    }
}

/// `POST {path}` with the master key on `replica`; the answer's status and body.
async fn managed(replica: &Sandgate, path: &str, body: Value) -> (StatusCode, Value) {
    send(
        replica
            .client
            .post(replica.url(path))
            .bearer_auth(MASTER_KEY)
            .json(&body),
    )
    .await
}

/// A user or team made by `path` (`/user/new`, `/team/new`) of `body`, and two keys of
/// it (its id in `field`), one made on each replica.
async fn two_keys_of(
    replicas: &[Sandgate],
    path: &str,
    body: Value,
    field: &str,
) -> (String, String) {
    let id = body[field].clone();
    let (status, made) = managed(&replicas[0], path, body).await;
    assert_eq!(status, 200, "{made}");
    let (first, _) = generate(&replicas[0], &json!({ field: id })).await;
    let (second, _) = generate(&replicas[1], &json!({ field: id })).await;
    (first, second)
}

/// A team's and a user's rate limits (LiteLLM's `/team/new` and `/user/new` fields) hold
/// the calls of all their keys together, across replicas, with LiteLLM's answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_s_and_a_user_s_rate_limits_hold_all_their_keys_across_replicas() {
    let backend = Backend::redis().await;
    let upstream = GatedUpstream::start(false).await;
    let config = config(&upstream);
    let replicas = replicas(&backend, &config, 2).await;
    let url = |index: usize| replicas[index].url("");
    let client = &replicas[0].client;

    // A user's calls in flight, whichever of its keys and replicas they come through.
    let (first_key, second_key) = two_keys_of(
        &replicas,
        "/user/new",
        json!({"user_id": "one-at-a-time", "max_parallel_requests": 1}),
        "user_id",
    )
    .await;
    let first = tokio::spawn(send(call(client, &url(0), &first_key, false)));
    upstream.wait_for_arrivals(1).await;
    let (status, body, retry_after) = limited(call(client, &url(1), &second_key, false)).await;
    assert_limited_by(
        "user",
        status,
        &body,
        retry_after.as_deref(),
        "current max_parallel_requests: 1, max_parallel_requests: 1",
    );
    upstream.open.send_replace(true);
    assert_eq!(first.await.expect("first").0, 200);
    let (status, body, _) =
        until(StatusCode::OK, || call(client, &url(1), &second_key, false)).await;
    assert_eq!(status, 200, "the user's hold was not released: {body}");
    let (_, info) = send(
        client
            .get(format!("{}/user/info?user_id=one-at-a-time", url(1)))
            .bearer_auth(MASTER_KEY),
    )
    .await;
    assert_eq!(info["user_info"]["max_parallel_requests"], 1, "{info}");

    // A team's calls per minute, through two keys and two replicas.
    away_from_the_minute_s_end().await;
    let (first_key, second_key) = two_keys_of(
        &replicas,
        "/team/new",
        json!({"team_id": "two-a-minute", "rpm_limit": 2}),
        "team_id",
    )
    .await;
    assert_eq!(send(call(client, &url(0), &first_key, false)).await.0, 200);
    assert_eq!(send(call(client, &url(1), &second_key, false)).await.0, 200);
    for (index, key) in [(0, &second_key), (1, &first_key)] {
        let (status, body, retry_after) = limited(call(client, &url(index), key, false)).await;
        assert_limited_by(
            "team",
            status,
            &body,
            retry_after.as_deref(),
            "current rpm: 2, rpm limit: 2",
        );
    }
    let (_, info) = send(
        client
            .get(format!("{}/team/info?team_id=two-a-minute", url(0)))
            .bearer_auth(MASTER_KEY),
    )
    .await;
    assert_eq!(info["team_info"]["rpm_limit"], 2, "{info}");
}

/// When the team's budget window that `info` shows ends.
fn reset_at(info: &Value) -> std::time::SystemTime {
    let text = info["team_info"]["budget_reset_at"]
        .as_str()
        .unwrap_or_else(|| panic!("no budget_reset_at in {info}"));
    let time = speedate::DateTime::parse_str(text).unwrap_or_else(|err| panic!("{text}: {err}"));
    let seconds = u64::try_from(time.timestamp()).expect("after the epoch");
    std::time::UNIX_EPOCH
        + Duration::from_secs(seconds)
        + Duration::from_micros(u64::from(time.time.microsecond))
}

async fn sleep_until(when: std::time::SystemTime) {
    if let Ok(left) = when.duration_since(std::time::SystemTime::now()) {
        tokio::time::sleep(left + Duration::from_millis(20)).await;
    }
}

/// A team's `budget_duration` (LiteLLM's): its spend starts again from nothing each
/// period, across replicas, and `/team/info` shows the period and its current spend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_s_budget_starts_again_each_period() {
    let backend = Backend::redis().await;
    let upstream = GatedUpstream::start(true).await;
    let config = config(&upstream);
    let replicas = replicas(&backend, &config, 2).await;
    let (status, made) = managed(
        &replicas[0],
        "/team/new",
        json!({"team_id": "per-period", "max_budget": CALL_COST, "budget_duration": "3s"}),
    )
    .await;
    assert_eq!(status, 200, "{made}");
    assert_eq!(made["budget_duration"], "3s", "{made}");
    let (key, _) = generate(&replicas[0], &json!({"team_id": "per-period"})).await;
    let info = |replica: &Sandgate| {
        send(
            replica
                .client
                .get(replica.url("/team/info?team_id=per-period"))
                .bearer_auth(MASTER_KEY),
        )
    };
    // At the start of a period, one call spends the budget; the next, on the other
    // replica, is refused while the period lasts (unless the machine took the whole
    // period between the two: then it is a new one, and passes).
    let (_, before) = info(&replicas[1]).await;
    sleep_until(reset_at(&before)).await;
    assert_eq!(
        send(call(&replicas[0].client, &replicas[0].url(""), &key, false))
            .await
            .0,
        200
    );
    let (status, body) = send(call(&replicas[1].client, &replicas[1].url(""), &key, false)).await;
    // The first call's settlement is written apart from it (its client does not wait): the
    // team's spend shows once it is, looked at until then or until the period ends.
    let same_period = |info: &Value| reset_at(info) == reset_at(&before) + Duration::from_secs(3);
    let during = loop {
        let (_, during) = info(&replicas[1]).await;
        if !same_period(&during) || during["team_info"]["spend"] == CALL_COST {
            break during;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    if same_period(&during) {
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["type"], "budget_exceeded", "{body}");
        assert_eq!(during["team_info"]["spend"], CALL_COST, "{during}");
    }
    // Once the period ends the spend starts again from nothing: the next call passes.
    sleep_until(reset_at(&during)).await;
    let (_, after) = info(&replicas[0]).await;
    assert_eq!(after["team_info"]["spend"], 0.0, "{after}");
    let (status, body) = send(call(&replicas[1].client, &replicas[1].url(""), &key, false)).await;
    assert_eq!(status, 200, "{body}");
}

/// A client that leaves before its answer: its call's hold is released, not kept until
/// its lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_mid_call_releases_its_hold() {
    let backend = Backend::embedded();
    let upstream = GatedUpstream::start(true).await;
    let config = config(&upstream);
    let replicas = replicas(&backend, &config, 1).await;
    let replica = &replicas[0];
    let (key, _) = generate(
        replica,
        &json!({"max_parallel_requests": 1, "max_budget": 10}),
    )
    .await;
    let client = reqwest::Client::new();
    let leaving = tokio::spawn(send(call(&client, &replica.url(""), &key, true)));
    upstream.wait_for_arrivals(1).await;
    let (status, _, _) = limited(call(&replica.client, &replica.url(""), &key, false)).await;
    assert_eq!(status, 429, "a second call beside the first");
    leaving.abort();
    drop(client);
    let (status, body, _) = until(StatusCode::OK, || {
        call(&replica.client, &replica.url(""), &key, false)
    })
    .await;
    assert_eq!(status, 200, "the left call's hold was kept: {body}");
}

/// A replica killed mid-call never settles: its hold ends with its lease (the call
/// deadline, 5 s here, and a margin of 5 s), and another replica admits calls again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_hold_ends_with_its_lease() {
    let backend = Backend::redis().await;
    let upstream = GatedUpstream::start(true).await;
    let config = config(&upstream);
    let survivor = &replicas(&backend, &config, 1).await[0];
    let mut doomed = replica_process(&backend, &config, &["--gateway-call-deadline", "5"]).await;
    let (key, _) = generate(survivor, &json!({"max_parallel_requests": 1})).await;
    let client = reqwest::Client::new();
    let held = tokio::spawn(send(call(&client, &doomed.url(""), &key, true)));
    upstream.wait_for_arrivals(1).await;
    doomed.kill().await;
    held.abort();
    let (status, _, _) = limited(call(&survivor.client, &survivor.url(""), &key, false)).await;
    assert_eq!(
        status, 429,
        "the killed replica's call no longer held its key"
    );
    let (status, body, _) = until(StatusCode::OK, || {
        call(&survivor.client, &survivor.url(""), &key, false)
    })
    .await;
    assert_eq!(status, 200, "the dead replica's hold never ended: {body}");
}

/// A client that makes each call the moment it has the last one's answer, on one replica
/// then the other: its last call's settlement, written off that call's path, starts as
/// the answer leaves (left to the spend log's 10 ms batch, call 1 is refused over call 0's
/// hold), so no call is refused over its hold; the budget still stops the calls at
/// exactly its forty. (The retry of an admission refused over a hold is
/// `admit::tests::a_call_made_as_the_last_one_ends_is_admitted`'s.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_one_after_another_are_never_refused_over_their_own_holds() {
    let backend = Backend::redis().await;
    let upstream = GatedUpstream::start(true).await;
    let config = config(&upstream);
    let replicas = replicas(&backend, &config, 2).await;
    let budget = 40.0 * CALL_COST;
    let (key, token) = generate(
        &replicas[0],
        &json!({"max_parallel_requests": 1, "max_budget": budget}),
    )
    .await;
    for n in 0..40 {
        let replica = &replicas[n % 2];
        let (status, body, _) = limited(call(&replica.client, &replica.url(""), &key, false)).await;
        assert_eq!(status, 200, "call {n} on replica {}: {body}", n % 2);
    }
    let spent = spend(&replicas[1], &token, budget).await;
    assert!((spent - budget).abs() < 1e-9, "{spent}");
    let (status, body, _) =
        limited(call(&replicas[0].client, &replicas[0].url(""), &key, false)).await;
    assert_eq!(status, 422, "the spent budget: {body}");
    assert!(
        body.to_string().contains("Budget has been exceeded!"),
        "{body}"
    );
}

/// A replica stopped (SIGTERM) the moment its calls are answered: their settlements,
/// written off the calls' paths, are written before it exits; none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_right_after_the_answers_loses_no_settlement() {
    let backend = Backend::redis().await;
    let upstream = GatedUpstream::start(true).await;
    let config = config(&upstream);
    let survivor = &replicas(&backend, &config, 1).await[0];
    let mut stopping = replica_process(&backend, &config, &[]).await;
    let (key, token) = generate(survivor, &json!({"max_budget": 1000.0})).await;
    let client = reqwest::Client::new();
    let calls = 20;
    let answers = futures::future::join_all(
        (0..calls).map(|_| limited(call(&client, &stopping.url(""), &key, false))),
    )
    .await;
    for (status, body, _) in &answers {
        assert_eq!(*status, 200, "{body}");
    }
    assert_eq!(stopping.terminate().await, Some(0));
    let expected = f64::from(calls) * CALL_COST;
    let spent = spend(survivor, &token, expected).await;
    assert!((spent - expected).abs() < 1e-9, "{spent} of {expected}");
}

/// A key limited by its budget alone is admitted against its replica's share of it (no
/// store round trip per call): calls one after another on one replica are all admitted;
/// a call on the other replica takes a share there (a quarter of the room left), which
/// that replica gives back once idle, so the first replica spends the rest of the budget;
/// and the budget stops the calls at exactly its forty, on both replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_is_spent_to_its_end_through_replicas_shares() {
    let backend = Backend::redis().await;
    let upstream = GatedUpstream::start(true).await;
    let config = config(&upstream);
    let replicas = replicas(&backend, &config, 2).await;
    let budget = 40.0 * CALL_COST;
    let (key, token) = generate(&replicas[0], &json!({"max_budget": budget})).await;
    let call_on = |replica: &Sandgate| call(&replica.client, &replica.url(""), &key, false);
    for n in 0..20 {
        let (status, body, _) = limited(call_on(&replicas[0])).await;
        assert_eq!(status, 200, "call {n}: {body}");
    }
    let (status, body, _) = limited(call_on(&replicas[1])).await;
    assert_eq!(status, 200, "call 20, on the other replica: {body}");
    // The first replica's calls may find the other's idle share still held, until it is
    // given back; never for longer (its lease in the store lasts minutes). Without that,
    // the share's room (more than three calls' cost) would never be spent.
    for n in 21..40 {
        let (status, body, _) = until(StatusCode::OK, || call_on(&replicas[0])).await;
        assert_eq!(status, 200, "call {n}: {body}");
    }
    let spent = spend(&replicas[0], &token, budget).await;
    assert!((spent - budget).abs() < 1e-9, "{spent}");
    for replica in &replicas {
        let (status, body, _) = limited(call_on(replica)).await;
        assert_eq!(status, 422, "past the budget: {body}");
        assert!(
            body.to_string()
                .contains("Current cost: 5.0, Max budget: 5.0"),
            "{body}"
        );
    }
}
