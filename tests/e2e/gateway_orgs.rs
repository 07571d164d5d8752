//! LiteLLM's organisation model, as the OpenHands enterprise app drives it (issue: every
//! token paid for, by the right team).
//!
//! The flows below replay the enterprise app server's LiteLLM manager
//! (`enterprise/storage/lite_llm_manager.py` in the OpenHands repository: `create_entries`,
//! `update_team_and_users_budget`, `_create_team`, `_create_user`, `_add_user_to_team`,
//! `_delete_key_by_alias`, `_generate_key`, `_get_team`, `_update_user_in_team`,
//! `verify_key`), with its paths, bodies and headers as it sends them (the master key in
//! `x-goog-api-key`, on a client that sends no other credential) and its branches on the
//! answers (404 of `/team/info`, "already exists. Please use a different team id",
//! "already in team", 404 of `/key/delete`). The app itself cannot run here (it needs
//! Keycloak, its database and its private packages), hence the replay.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, Sandgate, file_with};
use crate::gateway_keys::gateway_configured;
use crate::model_gateway::{FakeUpstream, MASTER_KEY, UPSTREAM_KEY};

const ORG: &str = "org-7f3c2a10";
const ALICE: &str = "keycloak-alice";
const BOB: &str = "keycloak-bob";
/// The app's `ORG_SETTINGS_VERSION` and default model, as its bodies carry them.
fn org_metadata() -> Value {
    json!({"version": 5, "model": "litellm_proxy/claude-sonnet"})
}

/// An entry `name` of the fake upstream's model `model` whose call costs exactly 1.0: the
/// upstream's usage is 11 prompt and 7 completion tokens a call, and at these prices
/// (powers of two, exact in binary) 11/32 + 21/32 = 1.0.
pub(crate) fn one_a_call(upstream: &FakeUpstream, name: &str, model: &str) -> String {
    let base = upstream.base();
    format!(
        r#"  - model_name: {name}
    litellm_params: {{model: openai/{model}, api_base: "{base}/openai/v1", api_key: {UPSTREAM_KEY}}}
    model_info: {{input_cost_per_token: 0.03125, output_cost_per_token: 0.09375}}
"#
    )
}

fn config(upstream: &FakeUpstream) -> tempfile::NamedTempFile {
    file_with(&format!(
        "model_list:\n{}",
        one_a_call(upstream, "gpt", "gpt-4o")
    ))
}

/// The app's client: `httpx.AsyncClient(headers={'x-goog-api-key': LITE_LLM_API_KEY})`.
struct Manager<'a> {
    sandgate: &'a Sandgate,
}

impl Manager<'_> {
    async fn send(&self, request: reqwest::RequestBuilder) -> (StatusCode, Value, String) {
        let response = request
            .header("x-goog-api-key", MASTER_KEY)
            .send()
            .await
            .expect("request");
        let status = response.status();
        let text = response.text().await.expect("body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
        )
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value, String) {
        let request = self
            .sandgate
            .client
            .post(self.sandgate.url(path))
            .json(&body);
        self.send(request).await
    }

    async fn get(&self, path: &str) -> (StatusCode, Value, String) {
        self.send(self.sandgate.client.get(self.sandgate.url(path)))
            .await
    }

    /// `_get_team`: `GET /team/info?team_id=`, `raise_for_status()`.
    async fn team(&self, team_id: &str) -> (StatusCode, Value) {
        let (status, body, _) = self.get(&format!("/team/info?team_id={team_id}")).await;
        (status, body)
    }

    /// `_create_team`, with its fallback to `_update_team` when the team exists.
    async fn create_team(&self, team_alias: &str, team_id: &str, max_budget: f64) {
        let (status, body, text) = self
            .post(
                "/team/new",
                json!({"team_id": team_id, "team_alias": team_alias, "models": [],
                       "max_budget": max_budget, "spend": 0, "metadata": org_metadata()}),
            )
            .await;
        if status == 400 && text.contains("already exists. Please use a different team id") {
            self.update_team(team_id, Some(team_alias), Some(max_budget))
                .await;
            return;
        }
        assert_eq!(status, 200, "{body}");
    }

    /// `_update_team`.
    async fn update_team(&self, team_id: &str, team_alias: Option<&str>, max_budget: Option<f64>) {
        let mut body = json!({"team_id": team_id, "metadata": org_metadata()});
        if let Some(max_budget) = max_budget {
            body["max_budget"] = json!(max_budget);
        }
        if let Some(team_alias) = team_alias {
            body["team_alias"] = json!(team_alias);
        }
        let (status, answer, _) = self.post("/team/update", body).await;
        assert_eq!(status, 200, "{answer}");
    }

    /// `_create_user` (LITE_LLM_TEAM_ID unset: `teams` is `[None]`).
    async fn create_user(&self, email: &str, user_id: &str) {
        let (status, body, text) = self
            .post(
                "/user/new",
                json!({"user_email": email, "models": [], "user_id": user_id, "teams": [null],
                       "auto_create_key": false, "send_invite_email": false,
                       "metadata": org_metadata()}),
            )
            .await;
        let exists = matches!(status.as_u16(), 400 | 409) && text.contains("already exists");
        assert!(status == 200 || exists, "{status} {body}");
    }

    /// `_add_user_to_team`.
    async fn add_user_to_team(&self, user_id: &str, team_id: &str, max_budget: f64) -> String {
        let (status, body, text) = self
            .post(
                "/team/member_add",
                json!({"team_id": team_id, "member": {"user_id": user_id, "role": "user"},
                       "max_budget_in_team": max_budget}),
            )
            .await;
        let already = status == 400 && text.to_lowercase().contains("already in team");
        assert!(status == 200 || already, "{status} {body}");
        text
    }

    /// `create_entries` after the user info: the team (its budget inherited when it
    /// exists), the user, the membership, the old key deleted by alias, a new key.
    async fn create_entries(&self, org_id: &str, user_id: &str, initial_budget: f64) -> String {
        let (status, existing) = self.team(org_id).await;
        let team_budget = match status.as_u16() {
            200 => existing["team_info"]["max_budget"].as_f64().unwrap_or(0.0),
            404 => initial_budget,
            _ => panic!("/team/info answered {status}: {existing}"),
        };
        self.create_team(user_id, org_id, team_budget).await;
        self.create_user(&format!("{user_id}@example.com"), user_id)
            .await;
        self.add_user_to_team(user_id, org_id, team_budget).await;
        let alias = format!("OpenHands Cloud - user {user_id} - org {org_id}");
        let (status, body, _) = self
            .post("/key/delete", json!({"key_aliases": [alias]}))
            .await;
        assert!(status == 200 || status == 404, "{status} {body}");
        let (status, body, _) = self
            .post(
                "/key/generate",
                json!({"user_id": user_id, "models": [], "team_id": org_id, "key_alias": alias}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body["key"].as_str().expect("the key").to_owned()
    }

    /// `update_team_and_users_budget`: a top-up.
    async fn top_up(&self, team_id: &str, max_budget: f64) {
        self.update_team(team_id, None, Some(max_budget)).await;
        let (status, team) = self.team(team_id).await;
        assert_eq!(status, 200, "{team}");
        for membership in team["team_memberships"].as_array().expect("memberships") {
            let user_id = membership["user_id"].as_str().expect("user_id");
            let (status, body, _) = self
                .post(
                    "/team/member_update",
                    json!({"team_id": team_id, "user_id": user_id, "max_budget_in_team": max_budget}),
                )
                .await;
            assert_eq!(status, 200, "{body}");
        }
    }

    /// What the app shows as credits: the team's `max_budget` less its `spend`, once the
    /// spend (written just after each call ends) reaches `spent`.
    async fn credits(&self, team_id: &str, spent: f64) -> f64 {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let (status, team) = self.team(team_id).await;
            assert_eq!(status, 200, "{team}");
            let info = &team["team_info"];
            let spend = info["spend"].as_f64().expect("spend");
            if spend >= spent || tokio::time::Instant::now() > deadline {
                assert_eq!(spend, spent, "{team}");
                return info["max_budget"].as_f64().expect("max_budget") - spend;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

/// A chat completion through a user's key, as the agent's SDK sends it.
async fn chat(sandgate: &Sandgate, key: &str, session: &str) -> (StatusCode, Value) {
    let response = sandgate
        .client
        .post(sandgate.url("/v1/chat/completions"))
        .bearer_auth(key)
        .header("x-litellm-session-id", session)
        .json(&json!({"model": "gpt", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .expect("call");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn enterprise_flows(backend: &Backend) {
    let gateway = gateway_configured(backend, config).await;
    let sandgate = &gateway.sandgate;
    let app = Manager { sandgate };

    // Sign-up of the first user: no team yet (404), then team, user, membership, key.
    let (status, body) = app.team(ORG).await;
    assert_eq!(status, 404, "{body}");
    let alice_key = app.create_entries(ORG, ALICE, 0.0).await;
    // A second user joins the organisation: the team exists (its budget inherited), so
    // `/team/new` answers LiteLLM's 400 and the app updates it instead.
    let bob_key = app.create_entries(ORG, BOB, 0.0).await;
    let again = app.add_user_to_team(BOB, ORG, 0.0).await;
    assert!(again.contains("already in team"), "{again}");
    let (_, team) = app.team(ORG).await;
    let members: Vec<&str> = team["team_memberships"]
        .as_array()
        .expect("memberships")
        .iter()
        .map(|member| member["user_id"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(members, [ALICE, BOB], "{team}");
    assert_eq!(team["team_info"]["team_alias"], BOB, "{team}");

    // No credits yet: the first call is refused with LiteLLM's answer.
    let (status, body) = chat(sandgate, &alice_key, "conversation-1").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["type"], "budget_exceeded", "{body}");

    // A top-up raises the team's budget and its members'.
    app.top_up(ORG, 3.0).await;
    let (_, team) = app.team(ORG).await;
    for membership in team["team_memberships"].as_array().expect("memberships") {
        assert_eq!(
            membership["litellm_budget_table"]["max_budget"], 3.0,
            "{team}"
        );
    }
    for _ in 0..2 {
        let (status, body) = chat(sandgate, &alice_key, "conversation-1").await;
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(app.credits(ORG, 2.0).await, 1.0);

    // A key rotation (sign-in again: the key deleted by alias, a new one made): the old
    // key stops, the spend stays with the user and the team.
    let rotated = app.create_entries(ORG, ALICE, 0.0).await;
    assert_ne!(rotated, alice_key);
    let (status, _) = chat(sandgate, &alice_key, "conversation-1").await;
    assert_eq!(status, 401);
    let (status, user, _) = app.get(&format!("/user/info?user_id={ALICE}")).await;
    assert_eq!(status, 200, "{user}");
    assert_eq!(user["user_info"]["spend"], 2.0, "{user}");
    assert_eq!(user["keys"].as_array().map(Vec::len), Some(1), "{user}");
    assert_eq!(app.credits(ORG, 2.0).await, 1.0);
    // `verify_key`: the new key lists the models.
    let verified = sandgate
        .client
        .get(sandgate.url("/v1/models"))
        .header("Authorization", format!("Bearer {rotated}"))
        .send()
        .await
        .expect("verify");
    assert_eq!(verified.status(), 200);

    // Bob's call spends the last credit; the team's budget is then reached for both.
    let (status, body) = chat(sandgate, &bob_key, "conversation-2").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(app.credits(ORG, 3.0).await, 0.0);
    // Each in a conversation of its own: a session belongs to the first key that names it.
    for (key, session) in [(&rotated, "conversation-3"), (&bob_key, "conversation-4")] {
        let (status, body) = chat(sandgate, key, session).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["type"], "budget_exceeded", "{body}");
        assert_eq!(
            body["error"]["message"],
            format!("Budget has been exceeded! Team={ORG} Current cost: 3.0, Max budget: 3.0"),
            "{body}"
        );
    }

    // A blocked team is refused, whatever its credits, until it is unblocked.
    app.top_up(ORG, 10.0).await;
    let (status, body, _) = app.post("/team/block", json!({"team_id": ORG})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = chat(sandgate, &bob_key, "conversation-2").await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        body["error"]["message"],
        format!(
            "Authentication Error, Team={ORG} is blocked. Update via `/team/unblock` if you're an admin."
        ),
        "{body}"
    );
    let (status, body, _) = app.post("/team/unblock", json!({"team_id": ORG})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = chat(sandgate, &bob_key, "conversation-2").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(app.credits(ORG, 4.0).await, 6.0);

    // The spend reads: the log by team, user, key and session; the per-day report. The
    // log's entries are written just after the counters: wait for the last one.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, logs, _) = app.get(&format!("/spend/logs?team_id={ORG}")).await;
        let ok = logs.as_array().map_or(0, |logs| {
            logs.iter().filter(|entry| entry["status"] == 200).count()
        });
        if ok >= 4 || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let count = |query: &str| {
        let query = query.to_owned();
        let app = &app;
        async move {
            let (status, logs, _) = app.get(&format!("/spend/logs?{query}")).await;
            assert_eq!(status, 200, "{logs}");
            logs.as_array()
                .expect("entries")
                .iter()
                .filter(|entry| entry["status"] == 200)
                .count()
        }
    };
    assert_eq!(count(&format!("team_id={ORG}")).await, 4);
    assert_eq!(count(&format!("user_id={ALICE}")).await, 2);
    assert_eq!(count(&format!("user_id={BOB}")).await, 2);
    assert_eq!(count(&format!("api_key={bob_key}")).await, 2);
    assert_eq!(count("session_id=conversation-1").await, 2);
    assert_eq!(count("start_date=2000-01-01&end_date=2000-01-02").await, 0);
    let (status, report, _) = app.get("/global/spend/report?group_by=team").await;
    assert_eq!(status, 200, "{report}");
    let days = report.as_array().expect("days");
    assert_eq!(days.len(), 1, "{report}");
    assert_eq!(days[0]["teams"][0]["team_id"], ORG, "{report}");
    assert_eq!(days[0]["teams"][0]["total_spend"], 4.0, "{report}");
    let (_, report, _) = app.get("/global/spend/report?group_by=user").await;
    assert_eq!(
        report[0]["users"],
        json!([{"user_id": ALICE, "total_spend": 2.0}, {"user_id": BOB, "total_spend": 2.0}]),
        "{report}"
    );
    let (_, report, _) = app.get("/global/spend/report?group_by=model").await;
    assert_eq!(
        report[0]["models"],
        json!([{"model": "gpt", "total_spend": 4.0}]),
        "{report}"
    );
    gateway.sandgate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_enterprise_apps_organisations_on_the_embedded_store() {
    enterprise_flows(&Backend::embedded()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_enterprise_apps_organisations_on_redis() {
    enterprise_flows(&Backend::redis().await).await;
}

/// LiteLLM's `/user/update` with `spend` sets what the user spent: its info shows it,
/// its calls add to it, and its budget is judged on it (here at 1.0 a call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_s_spend_set_by_update_is_what_its_budget_judges() {
    let backend = Backend::redis().await;
    let gateway = gateway_configured(&backend, config).await;
    let sandgate = &gateway.sandgate;
    let app = Manager { sandgate };
    let (status, body, _) = app
        .post(
            "/user/new",
            json!({"user_id": ALICE, "max_budget": 5.0, "auto_create_key": false}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body, _) = app.post("/key/generate", json!({"user_id": ALICE})).await;
    assert_eq!(status, 200, "{body}");
    let key = body["key"].as_str().expect("key").to_owned();
    let spend = |body: &Value| body["user_info"]["spend"].as_f64();
    // One call: 1.0. The spend set to 3.5: below the budget, the next call passes and
    // makes it 4.5. Set to the budget: the next call is refused, with LiteLLM's text.
    assert_eq!(chat(sandgate, &key, "s-1").await.0, 200);
    let (_, info, _) = app.get(&format!("/user/info?user_id={ALICE}")).await;
    assert_eq!(spend(&info), Some(1.0), "{info}");
    let (status, body, _) = app
        .post("/user/update", json!({"user_id": ALICE, "spend": 3.5}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["spend"], 3.5, "{body}");
    assert_eq!(chat(sandgate, &key, "s-2").await.0, 200);
    let (_, info, _) = app.get(&format!("/user/info?user_id={ALICE}")).await;
    assert_eq!(spend(&info), Some(4.5), "{info}");
    let (status, body, _) = app
        .post("/user/update", json!({"user_id": ALICE, "spend": 5.0}))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = chat(sandgate, &key, "s-3").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["error"]["message"],
        format!("ExceededBudget: User={ALICE} over budget. Spend=5.0, Budget=5.0"),
        "{body}"
    );
    gateway.sandgate.stop().await;
}

/// From the hostile side: a virtual key administers nothing, an id of a megabyte is
/// bounded, and what does not exist is a 404, never a 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn organisations_are_the_master_keys_and_bounded() {
    let gateway = gateway_configured(&Backend::embedded(), config).await;
    let sandgate = &gateway.sandgate;
    let app = Manager { sandgate };
    let (status, body, _) = app
        .post("/team/new", json!({"team_id": ORG, "max_budget": 100.0}))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body, _) = app.post("/key/generate", json!({"team_id": ORG})).await;
    assert_eq!(status, 200, "{body}");
    let key = body["key"].as_str().expect("key").to_owned();

    // A team's own key, in every carrier, administers nothing of it.
    let posts = [
        ("/team/new", json!({"team_id": "mine"})),
        ("/team/update", json!({"team_id": ORG, "max_budget": 1e9})),
        (
            "/team/member_add",
            json!({"team_id": ORG, "member": {"user_id": "me"}}),
        ),
        (
            "/team/member_update",
            json!({"team_id": ORG, "user_id": "me"}),
        ),
        (
            "/team/member_delete",
            json!({"team_id": ORG, "user_id": "me"}),
        ),
        ("/team/unblock", json!({"team_id": ORG})),
        ("/team/block", json!({"team_id": ORG})),
        ("/team/delete", json!({"team_ids": [ORG]})),
        ("/user/new", json!({"user_id": "me"})),
        ("/user/update", json!({"user_id": "me", "spend": 0})),
        ("/user/delete", json!({"user_ids": ["me"]})),
        ("/budget/info", json!({"budgets": ["x"]})),
    ];
    for (path, body) in &posts {
        for carrier in ["authorization", "x-goog-api-key"] {
            let value = if carrier == "authorization" {
                format!("Bearer {key}")
            } else {
                key.clone()
            };
            let response = sandgate
                .client
                .post(sandgate.url(path))
                .header(carrier, value)
                .json(body)
                .send()
                .await
                .expect("post");
            assert_eq!(response.status(), 403, "{path} by {carrier}");
        }
    }
    for path in [
        format!("/team/info?team_id={ORG}"),
        "/user/info?user_id=me".to_owned(),
        "/v2/user/info?user_id=me".to_owned(),
        "/global/spend/report".to_owned(),
        "/team/list".to_owned(),
        "/user/list".to_owned(),
    ] {
        let response = sandgate
            .client
            .get(sandgate.url(&path))
            .bearer_auth(&key)
            .send()
            .await
            .expect("get");
        assert_eq!(response.status(), 403, "{path}");
    }
    let (status, team) = app.team(ORG).await;
    assert_eq!(
        (status, &team["team_info"]["blocked"]),
        (StatusCode::OK, &json!(false)),
        "{team}"
    );
    assert_eq!(team["team_info"]["max_budget"], 100.0, "{team}");

    // A user id of a megabyte is refused (by the edge's body limit or the id's), never
    // stored; one of 16 KiB in a query is refused too.
    let huge = "u".repeat(1 << 20);
    let (status, body, _) = app.post("/user/new", json!({"user_id": huge})).await;
    assert!(status == 400 || status == 413, "{status} {body}");
    let (status, body, _) = app
        .post(
            "/team/member_add",
            json!({"team_id": ORG, "member": {"user_id": "u".repeat(300)}}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, body, _) = app
        .get(&format!("/user/info?user_id={}", "u".repeat(16 << 10)))
        .await;
    assert!(status.is_client_error(), "{status} {body}");
    let (status, body, _) = app.post("/user/new", json!({"user_id": "a\u{0}b"})).await;
    assert_eq!(status, 400, "{body}");

    // What does not exist is a 404, as the app branches on it.
    for (path, body) in [
        (
            "/team/update",
            json!({"team_id": "nobody", "max_budget": 1}),
        ),
        (
            "/team/member_add",
            json!({"team_id": "nobody", "member": {"user_id": "me"}}),
        ),
        (
            "/team/member_update",
            json!({"team_id": ORG, "user_id": "nobody"}),
        ),
        (
            "/team/member_delete",
            json!({"team_id": ORG, "user_id": "nobody"}),
        ),
        ("/team/block", json!({"team_id": "nobody"})),
        ("/team/delete", json!({"team_ids": ["nobody"]})),
        ("/user/update", json!({"user_id": "nobody"})),
        ("/user/delete", json!({"user_ids": ["nobody"]})),
    ] {
        let (status, answer, _) = app.post(path, body).await;
        assert_eq!(status, 404, "{path}: {answer}");
    }
    for path in [
        "/team/info?team_id=nobody",
        "/user/info?user_id=nobody",
        "/v2/user/info?user_id=nobody",
    ] {
        let (status, answer, _) = app.get(path).await;
        assert_eq!(status, 404, "{path}: {answer}");
    }
    let (status, body, _) = app.get("/team/info").await;
    assert_eq!(status, 400, "{body}");
    let (status, body, _) = app
        .get("/global/spend/report?start_date=2020-01-01&end_date=2026-01-01")
        .await;
    assert_eq!(status, 400, "{body}");
    gateway.sandgate.stop().await;
}
