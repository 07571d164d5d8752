//! The console after a real sandbox ran a conversation: the app server's test
//! (`process_real_clients.rs`) runs a real agent-server in a `process` sandbox, whose agent
//! calls the gateway; then a browser finds that conversation in the ledger and reads the
//! same spend, calls and sandbox time as the API.

use serde_json::Value;

use super::{PASSWORD, browser::Browser, sign_in_at};
use crate::gateway_keys::send;
use sandgate_runtime_api::admin::login::login_hash;

/// The flags that give a Sandgate the console, its admin password and its master key.
pub(crate) const CONSOLE_FLAGS: [&str; 3] = ["--console", "--admin-password", PASSWORD];

/// An admin token from the Sandgate at `base`.
async fn admin_token(client: &reqwest::Client, base: &str) -> String {
    let (status, challenge) = send(client.get(format!("{base}/api/admin/challenge"))).await;
    assert_eq!(status, 200, "{challenge}");
    let text = |name: &str| challenge[name].as_str().expect("field").to_owned();
    let hash = login_hash(
        PASSWORD,
        &text("salt"),
        &text("challenge"),
        challenge["iterations"].as_u64().expect("iterations") as u32,
    );
    let (status, login) = send(
        client
            .post(format!("{base}/api/admin/login"))
            .json(&serde_json::json!({"challenge": challenge["challenge"], "hash": hash})),
    )
    .await;
    assert_eq!(status, 200, "{login}");
    login["token"].as_str().expect("token").to_owned()
}

/// The conversation the gateway counted calls for and its sandbox ran for: its ledger, as
/// the console shows it and as the API answers, equal.
pub(crate) async fn a_real_conversation_in_the_console(base: &str, master_key: &str) {
    let client = reqwest::Client::new();
    let token = admin_token(&client, base).await;
    let (status, rollup) = send(
        client
            .get(format!("{base}/api/ledger/rollup?by=conversation"))
            .bearer_auth(&token),
    )
    .await;
    assert_eq!(status, 200, "{rollup}");
    let counted = |row: &&Value, measure: &str| row[measure].as_u64().is_some_and(|n| n > 0);
    // One conversation: its agent's calls, its sandbox's time and its updates, joined
    // although the app server names the sandbox apart and the agent names it with dashes.
    let row = rollup["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|row| counted(row, "calls") && counted(row, "running_ms") && counted(row, "webhooks"))
        .unwrap_or_else(|| {
            panic!("no conversation with its calls, sandbox time and updates: {rollup}")
        })
        .clone();
    let id = row["id"].as_str().expect("id");
    let (status, expected) = send(
        client
            .get(format!("{base}/api/ledger/conversations/{id}"))
            .bearer_auth(&token),
    )
    .await;
    assert_eq!(status, 200, "{expected}");

    let browser = Browser::start().await;
    sign_in_at(&browser, base, master_key).await;
    browser
        .page(base, &format!("conversation/{id}"), "Conversation")
        .await;
    for (css, measure) in [
        ("#ledger-spend", "spend"),
        ("#ledger-running", "running_ms"),
    ] {
        let shown = browser
            .find(css)
            .await
            .attr("data-value")
            .await
            .expect("attribute")
            .expect("a value");
        let shown: f64 = shown.parse().expect("a number");
        assert_eq!(
            Some(shown),
            expected["total"][measure].as_f64(),
            "{measure}: {expected}"
        );
    }
    let text = browser.text().await;
    let calls = expected["total"]["calls"].as_u64().expect("calls");
    assert!(
        text.contains(&format!("{calls} (")),
        "{calls} calls: {text}"
    );
    assert!(
        expected["total"]["spend"].as_f64() > Some(0.0),
        "priced calls: {expected}"
    );
    // Each call in the conversation's spend log (the agent named it with dashes).
    let listed = browser
        .client
        .find_all(fantoccini::Locator::XPath(
            "//h2[text()='Calls']/following-sibling::table[1]/tbody/tr",
        ))
        .await
        .expect("rows");
    assert_eq!(listed.len() as u64, calls, "{text}");
    browser.screenshot("real-conversation").await;
    browser.client.clone().close().await.expect("close");
}
