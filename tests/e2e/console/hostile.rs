//! The console from the hostile side, without a browser: what its pages are served with,
//! what its session cookies hold, changes without the session's CSRF proof, and every
//! credential that is not a console session.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{console_sandgate, gateway_config};
use crate::admin::{login, start};
use crate::common::{Backend, RUNTIME_KEY, Sandgate};
use crate::gateway_keys::{generate, send};
use crate::model_gateway::{FakeUpstream, MASTER_KEY};

/// Signs in with the master key: the session's cookie (`name=value`) and CSRF proof.
async fn master_session(sandgate: &Sandgate) -> (String, String) {
    let response = sandgate
        .client
        .post(sandgate.url("/console/login"))
        .json(&json!({"method": "master_key", "key": MASTER_KEY}))
        .send()
        .await
        .expect("login");
    assert_eq!(response.status(), 200);
    let set = response
        .headers()
        .get("set-cookie")
        .expect("a cookie")
        .to_str()
        .expect("text")
        .to_owned();
    let attributes: Vec<&str> = set.split(';').map(str::trim).collect();
    for wanted in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(attributes.contains(&wanted), "{set}");
    }
    assert!(
        attributes
            .iter()
            .any(|attribute| attribute.starts_with("Max-Age=")),
        "a session that never expires: {set}"
    );
    // The cookie holds a token standing for the key, never the key.
    assert!(!set.contains(MASTER_KEY), "{set}");
    let body: Value = response.json().await.expect("JSON");
    let csrf = body["csrf"].as_str().expect("csrf").to_owned();
    (attributes[0].to_owned(), csrf)
}

async fn console_call(
    sandgate: &Sandgate,
    cookie: Option<&str>,
    csrf: Option<&str>,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = match &body {
        Some(body) => sandgate.client.post(sandgate.url(path)).json(body),
        None => sandgate.client.get(sandgate.url(path)),
    };
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    if let Some(csrf) = csrf {
        request = request.header("x-sandgate-csrf", csrf);
    }
    send(request).await
}

/// A call of the runtime API, as the platform makes it (the runtime API key).
async fn runtime(sandgate: &Sandgate, path: &str, body: Value) -> (StatusCode, Value) {
    send(
        sandgate
            .client
            .post(sandgate.url(path))
            .header("x-api-key", RUNTIME_KEY)
            .json(&body),
    )
    .await
}

/// A sandbox started by the platform with `environment`.
async fn start_sandbox(sandgate: &Sandgate, environment: Value) -> Value {
    let (status, started) = runtime(
        sandgate,
        "/start",
        json!({"image": "ghcr.io/acme/agent:1", "command": ["agent"],
               "working_dir": "/workspace", "environment": environment}),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    started
}

/// The audit log's newest entries.
async fn audit_log(sandgate: &Sandgate, token: &str) -> Value {
    let (status, log) = send(
        sandgate
            .client
            .get(sandgate.url("/api/admin/audit"))
            .bearer_auth(token),
    )
    .await;
    assert_eq!(status, 200, "{log}");
    log
}

#[tokio::test]
async fn the_console_is_off_unless_asked() {
    let sandgate = start(&Backend::embedded(), None, &[]).await;
    let response = sandgate
        .client
        .get(sandgate.url("/console"))
        .send()
        .await
        .expect("console");
    assert_eq!(response.status(), 404);
}

#[tokio::test]
async fn pages_run_only_their_own_script_and_refuse_framing() {
    let upstream = FakeUpstream::start().await;
    let config = gateway_config(&upstream);
    let sandgate = console_sandgate(&Backend::embedded(), &config).await;
    for path in [
        "/console",
        "/console/app.js",
        "/console/session",
        "/console/api/list",
    ] {
        let response = sandgate
            .client
            .get(sandgate.url(path))
            .send()
            .await
            .expect("page");
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let policy = header("content-security-policy");
        assert!(policy.contains("script-src 'self'"), "{path}: {policy}");
        assert!(
            policy.contains("frame-ancestors 'none'"),
            "{path}: {policy}"
        );
        assert!(!policy.contains("unsafe-inline"), "{path}: {policy}");
        assert!(!policy.contains("unsafe-eval"), "{path}: {policy}");
        assert_eq!(header("x-frame-options"), "DENY", "{path}");
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
    }
    // The page itself holds no inline script nor style to allow.
    let page = sandgate
        .client
        .get(sandgate.url("/console"))
        .send()
        .await
        .expect("page")
        .text()
        .await
        .expect("text");
    assert!(
        !page.contains("<script>") && !page.contains("style="),
        "{page}"
    );
}

#[tokio::test]
async fn a_change_without_the_session_s_csrf_proof_is_refused() {
    let upstream = FakeUpstream::start().await;
    let config = gateway_config(&upstream);
    let sandgate = console_sandgate(&Backend::embedded(), &config).await;
    let (_, token) = generate(&sandgate, &json!({"key_alias": "kept"})).await;
    let (cookie, csrf) = master_session(&sandgate).await;
    let delete = json!({"keys": [token]});
    for proof in [None, Some(""), Some("0123456789abcdef0123456789abcdef")] {
        let (status, body) = console_call(
            &sandgate,
            Some(&cookie),
            proof,
            "/console/api/key/delete",
            Some(delete.clone()),
        )
        .await;
        assert_eq!(status, 403, "{proof:?}: {body}");
    }
    // Signing out is a change too.
    let response = sandgate
        .client
        .post(sandgate.url("/console/logout"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("logout");
    assert_eq!(response.status(), 403);
    let (status, listed) = console_call(
        &sandgate,
        Some(&cookie),
        None,
        "/console/api/key/list?key_alias=kept",
        None,
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["keys"].as_array().map(Vec::len), Some(1), "{listed}");
    // With the proof, the same change is made.
    let (status, body) = console_call(
        &sandgate,
        Some(&cookie),
        Some(&csrf),
        "/console/api/key/delete",
        Some(delete),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn no_credential_but_a_console_session_gets_anything() {
    let upstream = FakeUpstream::start().await;
    let config = gateway_config(&upstream);
    let sandgate = console_sandgate(&Backend::embedded(), &config).await;
    let (virtual_key, _) = generate(&sandgate, &json!({"key_alias": "tenant"})).await;
    let admin_token = login(&sandgate).await;
    let started = start_sandbox(&sandgate, json!({})).await;
    let session_key = started["session_api_key"].as_str().expect("key").to_owned();

    // None of them signs in as the master key.
    for key in [
        virtual_key.as_str(),
        RUNTIME_KEY,
        session_key.as_str(),
        &admin_token,
    ] {
        let (status, body) = send(
            sandgate
                .client
                .post(sandgate.url("/console/login"))
                .json(&json!({"method": "master_key", "key": key})),
        )
        .await;
        assert_eq!(status, 401, "{body}");
    }
    // Nor do they reach anything through the console: as its cookies, or as the headers
    // the API itself takes.
    let reads = [
        "/console/api/key/list",
        "/console/api/api/admin/audit",
        "/console/api/list",
        "/console/api/api/ledger/rollup?by=team",
    ];
    for key in [virtual_key.as_str(), RUNTIME_KEY, session_key.as_str()] {
        for cookie in [
            format!("sandgate_console_master={key}"),
            format!("sandgate_console_admin={key}"),
        ] {
            for path in reads {
                let (status, body) = console_call(&sandgate, Some(&cookie), None, path, None).await;
                assert!(
                    status == 401 || status == 403,
                    "{cookie} on {path}: {status} {body}"
                );
            }
        }
        for path in reads {
            for (name, value) in [
                ("authorization", format!("Bearer {key}")),
                ("x-api-key", key.to_owned()),
                ("x-session-api-key", key.to_owned()),
            ] {
                let response = sandgate
                    .client
                    .get(sandgate.url(path))
                    .header(name, value)
                    .send()
                    .await
                    .expect("call");
                assert_eq!(response.status(), 401, "{name} on {path}");
            }
        }
    }
    // A forged console token (the right form, signed with another key) is refused.
    let forged = format!(
        "sandgate_console_master={}",
        sandgate_proto_token("sk-not-the-master-key")
    );
    let (status, body) = console_call(
        &sandgate,
        Some(&forged),
        None,
        "/console/api/key/list",
        None,
    )
    .await;
    assert_eq!(status, 401, "{body}");
}

/// A console token minted from `key`, valid for an hour.
fn sandgate_proto_token(key: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    sandgate_proto::console_token::mint(key, now + 3600)
}

#[tokio::test]
async fn the_admin_reads_sandboxes_without_their_secrets_and_its_stop_is_audited() {
    let upstream = FakeUpstream::start().await;
    let config = gateway_config(&upstream);
    let sandgate = console_sandgate(&Backend::embedded(), &config).await;
    let token = login(&sandgate).await;
    let started = start_sandbox(
        &sandgate,
        json!({"GITHUB_TOKEN": "ghp_planted_start_secret"}),
    )
    .await;
    let session_key = started["session_api_key"].as_str().expect("key").to_owned();
    let runtime_id = started["runtime_id"].as_str().expect("id").to_owned();
    let cookie = format!("sandgate_console_admin={token}");
    let (status, listed) =
        console_call(&sandgate, Some(&cookie), None, "/console/api/list", None).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["runtimes"][0]["runtime_id"], runtime_id, "{listed}");
    let text = listed.to_string();
    assert!(!text.contains(&session_key), "a session key shown: {text}");
    assert!(
        !text.contains("ghp_planted"),
        "an environment value shown: {text}"
    );

    // The admin's stop: made, and in the audit log with where it came from.
    let csrf = proof(&sandgate, &cookie).await;
    let (status, stopped) = console_call(
        &sandgate,
        Some(&cookie),
        Some(&csrf),
        "/console/api/stop",
        Some(json!({"runtime_id": runtime_id})),
    )
    .await;
    assert_eq!(status, 200, "{stopped}");
    let log = audit_log(&sandgate, &token).await;
    let stop = log["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .find(|entry| entry["action"] == "sandbox.stop")
        .unwrap_or_else(|| panic!("no stop in {log}"));
    assert_eq!(stop["target"], runtime_id, "{log}");
    assert_eq!(stop["actor"], "admin", "{log}");
    assert_eq!(stop["source"], "127.0.0.1", "{log}");
    // The platform's own stops, with the runtime API key, are not an operator's.
    let again = start_sandbox(&sandgate, json!({})).await;
    let (status, body) = runtime(
        &sandgate,
        "/stop",
        json!({"runtime_id": again["runtime_id"]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let log = audit_log(&sandgate, &token).await;
    let stops = log["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|entry| {
            entry["action"]
                .as_str()
                .is_some_and(|a| a.starts_with("sandbox."))
        })
        .count();
    assert_eq!(stops, 1, "{log}");
}

/// The CSRF proof of the session `cookie`, as its page reads it.
pub(super) async fn proof(sandgate: &Sandgate, cookie: &str) -> String {
    let (status, session) =
        console_call(sandgate, Some(cookie), None, "/console/session", None).await;
    assert_eq!(status, 200, "{session}");
    session["csrf"].as_str().expect("a proof").to_owned()
}
