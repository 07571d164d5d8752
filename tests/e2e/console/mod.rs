//! The operator console (issue 52, point 3), in a real browser and from the hostile side.
//!
//! One conversation is set up as a platform makes it: its sandbox started, its agent's
//! calls through the gateway under its session, its updates posted, then paused. Tenant
//! strings carry markup and script payloads. The browser signs in both ways, reads the
//! conversation's ledger (equal to what the API says), changes a pool's count, revokes a
//! key and finds both in the audit log; every page is screenshotted and checked for
//! anything a payload could have made or run.

mod browser;
mod hostile;
mod real;

pub(crate) use real::{CONSOLE_FLAGS, a_real_conversation_in_the_console};

use serde_json::{Value, json};

use crate::admin::{PASSWORD, login, put, start};
use crate::common::{Backend, RUNTIME_KEY, Sandgate, file_with};
use crate::gateway_keys::{chat, generate, send};
use crate::model_gateway::{FakeUpstream, MASTER_KEY, UPSTREAM_KEY};
use browser::Browser;

/// A payload for place `n`: it breaks out of an attribute, makes an image whose error
/// handler runs, and a script; each sets `window.__pwned` to `n` if it runs. No
/// whitespace, so that it passes where names may hold none (image references).
fn payload(n: u32) -> String {
    format!("\"><img/src=x/onerror=window.__pwned={n}><script>window.__pwned={n}</script>")
}

/// A gateway with `gpt` (1.0 a call) and a model whose name is a payload.
fn gateway_config(upstream: &FakeUpstream) -> tempfile::NamedTempFile {
    let base = upstream.base();
    let entry = |name: &str| {
        format!(
            "  - model_name: '{name}'\n    litellm_params: {{model: openai/gpt-4o, api_base: \"{base}/openai/v1\", api_key: {UPSTREAM_KEY}}}\n    model_info: {{input_cost_per_token: 0.03125, output_cost_per_token: 0.09375}}\n"
        )
    };
    file_with(&format!(
        "model_list:\n{}{}",
        entry("gpt"),
        entry(&payload(1))
    ))
}

pub(crate) async fn console_sandgate(
    backend: &Backend,
    config: &tempfile::NamedTempFile,
) -> Sandgate {
    let path = config.path().display().to_string();
    start(
        backend,
        None,
        &[
            "--console",
            "--gateway-config",
            &path,
            "--proxy-master-key",
            MASTER_KEY,
        ],
    )
    .await
}

fn runtime(sandgate: &Sandgate, path: &str, body: Value) -> reqwest::RequestBuilder {
    sandgate
        .client
        .post(sandgate.url(path))
        .header("x-api-key", RUNTIME_KEY)
        .json(&body)
}

/// What the browser test set up.
struct Conversation {
    id: String,
    key: String,
    key_alias: String,
}

/// A conversation as a platform makes one, with payloads in what its tenant names.
async fn conversation(sandgate: &Sandgate) -> Conversation {
    let uuid = crate::common::new_id();
    let id = uuid.replace('-', "");
    let (status, started) = send(runtime(
        sandgate,
        "/start",
        json!({"image": format!("ghcr.io/acme/agent{}", payload(2)), "command": ["agent"],
               "working_dir": "/workspace", "environment": {}, "session_id": id}),
    ))
    .await;
    assert_eq!(status, 200, "{started}");
    let runtime_id = started["runtime_id"].as_str().expect("id").to_owned();
    let key_alias = format!("console-key{}", payload(3));
    let (status, team) = send(crate::gateway_keys::post(
        sandgate,
        "/team/new",
        MASTER_KEY,
        &json!({"team_id": "console-team", "team_alias": payload(9)}),
    ))
    .await;
    assert_eq!(status, 200, "{team}");
    let (key, _) = generate(
        sandgate,
        &json!({"key_alias": key_alias, "user_id": format!("user{}", payload(4)),
                "team_id": "console-team"}),
    )
    .await;
    for model in ["gpt".to_owned(), payload(1)] {
        let (status, body) = chat(sandgate, &key, &model, Some(&id)).await;
        assert_eq!(status, 200, "{body}");
    }
    let mut update = crate::common::conversation(&uuid, "2026-11-29T10:00:00Z", "running");
    update["title"] = payload(5).into();
    update["tags"] = json!({"project": payload(6)});
    sandgate.deliver_ok(&update).await;
    // An event whose kind and source are payloads: stored or refused, it is never markup.
    let event = json!([{"kind": payload(7), "id": "e1", "timestamp": "2026-11-29T10:00:02",
                        "source": payload(8)}]);
    let response = sandgate
        .client
        .post(sandgate.url(&format!("/api/v1/webhooks/events/{id}")))
        .header("content-type", "application/json")
        .header("x-session-api-key", crate::common::WEBHOOK_KEY)
        .body(event.to_string())
        .send()
        .await
        .expect("events");
    assert!(response.status().as_u16() < 500, "{}", response.status());
    let (status, paused) = send(runtime(
        sandgate,
        "/pause",
        json!({"runtime_id": runtime_id}),
    ))
    .await;
    assert_eq!(status, 200, "{paused}");
    Conversation { id, key, key_alias }
}

/// The conversation's ledger once both calls are counted.
async fn ledger(sandgate: &Sandgate, token: &str, id: &str) -> Value {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (status, ledger) = send(
            sandgate
                .client
                .get(sandgate.url(&format!("/api/ledger/conversations/{id}")))
                .bearer_auth(token),
        )
        .await;
        assert_eq!(status, 200, "{ledger}");
        if ledger["total"]["calls"] == 2 || tokio::time::Instant::now() > deadline {
            return ledger;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

async fn sign_in(browser: &Browser, base: &str) {
    sign_in_at(browser, base, MASTER_KEY).await;
}

/// Signs in with the admin password, then with `master_key`, as an operator does.
async fn sign_in_at(browser: &Browser, base: &str, master_key: &str) {
    browser
        .client
        .goto(&format!("{base}/console"))
        .await
        .expect("console");
    browser.fill("#password-login input", PASSWORD).await;
    browser.press("#password-login button").await;
    browser.until_heading("Overview").await;
    // Signed in, the page is drawn again as live changes arrive: the helpers find a
    // field again if a redraw replaced it.
    browser.page(base, "login", "Sign in").await;
    browser.fill("#master-login input", master_key).await;
    browser.press("#master-login button").await;
    browser.until_heading("Overview").await;
    browser
        .until_text("Signed in: admin password and master key")
        .await;
}

/// Nothing a payload planted made an element or ran, on the page shown now.
async fn nothing_injected(browser: &Browser, page: &str) {
    let found = browser.injected().await;
    assert_eq!(
        found,
        json!({"pwned": null, "images": 0, "scripts": 1, "handlers": 0}),
        "on {page}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_reads_the_ledger_changes_a_pool_and_revokes_a_key_in_a_browser() {
    let backend = Backend::embedded();
    let upstream = FakeUpstream::start().await;
    let config = gateway_config(&upstream);
    let sandgate = console_sandgate(&backend, &config).await;
    let token = login(&sandgate).await;
    let pool = json!({"image": "ghcr.io/acme/pool:1", "working_dir": "/workspace",
                      "command": ["agent"], "environment": {"POOL_SECRET": "s3cret-pool-value"},
                      "count": 1});
    let (status, body) = put(&sandgate, &token, "console-pool", &pool).await;
    assert!(status.is_success(), "{body}");
    let conversation = conversation(&sandgate).await;
    let expected = ledger(&sandgate, &token, &conversation.id).await;
    assert_eq!(expected["total"]["calls"], 2, "{expected}");

    let browser = Browser::start().await;
    let base = sandgate.url("");
    sign_in(&browser, &base).await;
    browser.screenshot("overview").await;
    nothing_injected(&browser, "overview").await;

    // The conversation's ledger: what the API says, to the unit.
    browser
        .page(
            &base,
            &format!("conversation/{}", conversation.id),
            "Conversation",
        )
        .await;
    let spend = browser.find("#ledger-spend").await;
    let shown: f64 = spend
        .attr("data-value")
        .await
        .expect("attribute")
        .expect("spend")
        .parse()
        .expect("number");
    assert_eq!(shown, expected["total"]["spend"].as_f64().expect("spend"));
    assert_eq!(shown, 2.0, "two calls at 1.0 each");
    let running = browser.find("#ledger-running").await;
    let running_ms: u64 = running
        .attr("data-value")
        .await
        .expect("attribute")
        .expect("running")
        .parse()
        .expect("number");
    assert_eq!(
        running_ms,
        expected["total"]["running_ms"].as_u64().expect("ms"),
        "the sandbox is paused: its running time no longer moves"
    );
    // Tenant strings are shown as the text they are.
    let text = browser.until_text(&payload(5)).await;
    assert!(text.contains(&payload(6)), "{text}");
    assert!(text.contains(&payload(1)), "{text}");
    // Who it is billed to: its key's user, team and alias.
    let owner = browser
        .find("#conversation-owner")
        .await
        .text()
        .await
        .expect("owner");
    for part in [&payload(4), "console-team", &conversation.key_alias] {
        assert!(owner.contains(part), "{part} in {owner}");
    }
    browser.screenshot("conversation").await;
    nothing_injected(&browser, "conversation").await;
    // The page follows a new call without a reload.
    let (status, body) = chat(&sandgate, &conversation.key, "gpt", Some(&conversation.id)).await;
    assert_eq!(status, 200, "{body}");
    browser
        .until_attribute("#ledger-spend", "data-value", "3")
        .await;

    browser.page(&base, "conversations", "Conversations").await;
    // Each conversation with its title and tags beside its counters.
    let text = browser.until_text(&conversation.id).await;
    assert!(
        text.contains(&payload(5)) && text.contains(&payload(6)),
        "{text}"
    );
    let (status, rollup) = send(
        sandgate
            .client
            .get(sandgate.url("/api/ledger/rollup?by=conversation"))
            .bearer_auth(&token),
    )
    .await;
    assert_eq!(status, 200, "{rollup}");
    let row = &rollup["rows"][0];
    assert_eq!(row["id"], conversation.id.as_str(), "{rollup}");
    assert_eq!(row["title"], payload(5).as_str(), "{rollup}");
    assert_eq!(row["tags"]["project"], payload(6).as_str(), "{rollup}");
    assert_eq!(row["status"], "running", "{rollup}");
    browser.screenshot("conversations").await;
    nothing_injected(&browser, "conversations").await;
    // By a tag's value: the planted value is a row's id, shown as text.
    browser
        .page(&base, "conversations?by=tag&tag=project", "Conversations")
        .await;
    browser.until_text(&payload(6)).await;
    browser.screenshot("conversations-by-tag").await;
    nothing_injected(&browser, "conversations by tag").await;

    // A pool's count, changed.
    browser.page(&base, "pools", "Pools and sandboxes").await;
    let text = browser.until_text("console-pool").await;
    assert!(
        !text.contains("s3cret-pool-value"),
        "an environment value shown"
    );
    assert!(text.contains(&payload(2)), "the image, as text: {text}");
    browser.fill("#count-console-pool", "2").await;
    browser.press("#count-console-pool + button").await;
    browser.until_text("Pool console-pool set to 2.").await;
    let (_, configs) = send(
        sandgate
            .client
            .get(sandgate.url("/api/warm-runtime-configs"))
            .header("x-api-key", RUNTIME_KEY),
    )
    .await;
    let count_now = configs["configs"]
        .as_array()
        .expect("configs")
        .iter()
        .find(|config| config["name"] == "console-pool")
        .map(|config| config["count"].clone());
    assert_eq!(count_now, Some(json!(2)), "{configs}");
    browser.screenshot("pools").await;
    nothing_injected(&browser, "pools").await;

    // A key, revoked.
    browser.page(&base, "keys", "Teams, users and keys").await;
    browser.until_text(&conversation.key_alias).await;
    browser.screenshot("keys").await;
    nothing_injected(&browser, "keys").await;
    browser
        .press_xpath("//tr[td[starts-with(text(), 'console-key')]]//button[text()='Revoke']")
        .await;
    browser.until_text("revoked.").await;
    let (status, listed) = send(
        sandgate
            .client
            .get(sandgate.url("/key/list?return_full_object=true"))
            .bearer_auth(MASTER_KEY),
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    assert!(
        !listed.to_string().contains("console-key"),
        "the key is still there: {listed}"
    );

    // A key, created: shown once. What the operator typed stays through the page's live
    // redraws, focused or not: typed, then left for two redraw periods while a change the
    // page shows lands (an old page dropped it at the first redraw after the field lost
    // focus, or at one that began before the typing).
    browser
        .fill("input[name='key_alias']", "created-in-console")
        .await;
    browser.press("main h1").await;
    generate(&sandgate, &json!({"key_alias": "made-elsewhere"})).await;
    tokio::time::sleep(std::time::Duration::from_secs(11)).await;
    let typed = browser.find("input[name='key_alias']").await;
    assert_eq!(
        typed.prop("value").await.expect("value").as_deref(),
        Some("created-in-console"),
        "what was typed, after the page's redraws"
    );
    // Of the team: the page lists the teams its keys name.
    browser.fill("input[name='team_id']", "console-team").await;
    browser.press("form button[type='submit']").await;
    let created = browser.find("#new-key").await.text().await.expect("key");
    assert!(created.starts_with("sk-"), "{created}");
    let (_, listed) = send(
        sandgate
            .client
            .get(sandgate.url("/key/list?key_alias=created-in-console"))
            .bearer_auth(MASTER_KEY),
    )
    .await;
    assert_eq!(listed["keys"].as_array().map(Vec::len), Some(1), "{listed}");
    // A team's budget, set.
    browser
        .fill("input[aria-label='Budget of team console-team']", "25")
        .await;
    browser
        .press("input[aria-label='Budget of team console-team'] + button")
        .await;
    browser.until_text("Team console-team budget set.").await;
    let (_, info) = send(
        sandgate
            .client
            .get(sandgate.url("/team/info?team_id=console-team"))
            .bearer_auth(MASTER_KEY),
    )
    .await;
    assert_eq!(info["team_info"]["max_budget"], 25.0, "{info}");
    nothing_injected(&browser, "keys, after its actions").await;

    // The team's page: its members and keys; a member's page from it.
    let (status, added) = send(crate::gateway_keys::post(
        &sandgate,
        "/team/member_add",
        MASTER_KEY,
        &json!({"team_id": "console-team",
                "member": [{"user_id": format!("user{}", payload(4)), "role": "user"}]}),
    ))
    .await;
    assert_eq!(status, 200, "{added}");
    browser.page(&base, "team/console-team", "Team").await;
    let text = browser.until_text("created-in-console").await;
    assert!(text.contains(&payload(4)), "the member, as text: {text}");
    browser.screenshot("team").await;
    nothing_injected(&browser, "team").await;
    browser
        .press_xpath("//table//a[starts-with(text(), 'user')]")
        .await;
    browser.until_heading("User").await;
    browser.until_text("console-team").await;
    browser.screenshot("user").await;
    nothing_injected(&browser, "user").await;

    // The conversation's sandbox, stopped by the operator.
    browser.page(&base, "pools", "Pools and sandboxes").await;
    browser
        .press_xpath("//tr[td[text()='paused']]//button[text()='Stop']")
        .await;
    browser.until_text("stop asked.").await;

    browser.page(&base, "spend", "Spend").await;
    browser.until_text("Spend by team, per day").await;
    browser
        .find("svg[aria-label='Spend by model, per day'] rect")
        .await;
    browser.screenshot("spend").await;
    nothing_injected(&browser, "spend").await;

    // Both changes, in the audit log.
    browser.page(&base, "audit", "Audit log").await;
    let text = browser.until_text("key.delete").await;
    for action in [
        "warm_config.put",
        "key.generate",
        "team.update",
        "sandbox.stop",
    ] {
        assert!(text.contains(action), "{action}: {text}");
    }
    assert!(text.contains("console-pool"), "{text}");
    browser.screenshot("audit").await;
    nothing_injected(&browser, "audit").await;

    browser.client.clone().close().await.expect("close");
}
