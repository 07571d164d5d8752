//! Runtime management over REST: admin login, API keys, warm runtime configurations, and
//! the `sandgate admin` client, with the statuses and bodies of design.md.

use std::path::PathBuf;
use std::sync::Arc;

use reqwest::StatusCode;
use sandgate_proto::admin::v1::runtime_admin_server::RuntimeAdmin;
use sandgate_proto::admin::v1::{GetChallengeRequest, ListApiKeysRequest, LoginRequest};
use sandgate_runtime_api::admin::installer::InstallerFile;
use sandgate_runtime_api::admin::login::login_hash;
use sandgate_runtime_api::admin::source::WarmConfigSource;
use sandgate_runtime_api::{AdminConfig, Authenticator, RuntimeAdminService};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::common::{Backend, RUNTIME_KEY, Sandgate, TestClock};

const PASSWORD: &str = "correct horse battery staple";
const JWT_SECRET: &str = "an HMAC key of at least thirty-two bytes";
/// Few iterations: the tests exercise the protocol, not the cost.
const ITERATIONS: &str = "1000";

const V1_CURRENT: &str = "ghcr.io/openhands/runtime:1.0";

/// An installer file: the default `v1_current` and an installer-wide count of 2.
fn installer_file(image: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    write_installer(file.path(), image);
    file
}

fn write_installer(path: &std::path::Path, image: &str) {
    let text = json!({
        "count": 2,
        "configs": [{
            "name": "v1_current", "image": image, "working_dir": "/workspace",
            "command": ["/usr/local/bin/openhands-agent-server", "--port", "60000"],
            "environment": {"OH_WEBHOOKS_0_BASE_URL": "http://app/api/v1/webhooks", "CA_BUNDLE": "/etc/ca.pem"},
            "run_as_user": 1000, "run_as_group": 1000, "fs_group": 1000
        }]
    });
    std::fs::write(path, text.to_string()).expect("write installer file");
}

/// Sandgate with an admin password, the installer file (if any) and `extra` flags.
pub async fn start(
    backend: &Backend,
    file: Option<&tempfile::NamedTempFile>,
    extra: &[&str],
) -> Sandgate {
    let path = file.map(|file| file.path().display().to_string());
    let mut args = vec![
        "--admin-password",
        PASSWORD,
        "--jwt-secret",
        JWT_SECRET,
        "--pbkdf2-iterations",
        ITERATIONS,
    ];
    // These tests log in many times from one address; the rate has tests of its own
    // (login_rate.rs).
    if !extra.contains(&"--admin-login-rate") {
        args.extend(["--admin-login-rate", "0", "--admin-login-account-rate", "0"]);
    }
    if let Some(path) = &path {
        args.extend(["--warm-runtimes-file", path.as_str()]);
    }
    args.extend(extra);
    Sandgate::start_with(backend, &args).await
}

async fn json_of(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let text = response.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    (status, body)
}

async fn challenge(sandgate: &Sandgate) -> Value {
    let (status, body) = json_of(
        sandgate
            .client
            .get(sandgate.url("/api/admin/challenge"))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

fn answer(challenge: &Value, password: &str) -> Value {
    let hash = login_hash(
        password,
        challenge["salt"].as_str().expect("salt"),
        challenge["challenge"].as_str().expect("challenge"),
        challenge["iterations"].as_u64().expect("iterations") as u32,
    );
    json!({ "challenge": challenge["challenge"], "hash": hash })
}

async fn post_login(sandgate: &Sandgate, body: &Value) -> (StatusCode, Value) {
    json_of(
        sandgate
            .client
            .post(sandgate.url("/api/admin/login"))
            .json(body)
            .send()
            .await
            .expect("request"),
    )
    .await
}

pub async fn login(sandgate: &Sandgate) -> String {
    let challenge = challenge(sandgate).await;
    let (status, body) = post_login(sandgate, &answer(&challenge, PASSWORD)).await;
    assert_eq!(status, 200, "{body}");
    body["token"].as_str().expect("token").to_owned()
}

pub async fn put(
    sandgate: &Sandgate,
    token: &str,
    name: &str,
    body: &Value,
) -> (StatusCode, Value) {
    json_of(
        sandgate
            .client
            .put(sandgate.url(&format!("/api/admin/warm-runtime-configs/{name}")))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .expect("request"),
    )
    .await
}

async fn delete(sandgate: &Sandgate, token: &str, name: &str) -> (StatusCode, Value) {
    json_of(
        sandgate
            .client
            .delete(sandgate.url(&format!("/api/admin/warm-runtime-configs/{name}")))
            .bearer_auth(token)
            .send()
            .await
            .expect("request"),
    )
    .await
}

/// The effective configurations as `(name, source, image, count)`.
async fn listed(sandgate: &Sandgate) -> Vec<(String, String, String, i64)> {
    let (status, body) = json_of(
        sandgate
            .client
            .get(sandgate.url("/api/warm-runtime-configs"))
            .header("x-api-key", RUNTIME_KEY)
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["configs"]
        .as_array()
        .expect("configs")
        .iter()
        .map(|entry| {
            (
                entry["name"].as_str().expect("name").to_owned(),
                entry["source"].as_str().expect("source").to_owned(),
                entry["image"].as_str().expect("image").to_owned(),
                entry["count"].as_i64().expect("count"),
            )
        })
        .collect()
}

fn entry(name: &str, source: &str, image: &str, count: i64) -> (String, String, String, i64) {
    (name.into(), source.into(), image.into(), count)
}

/// A configuration body derived from the installer default, as `template` makes it.
fn derived(image: &str) -> Value {
    json!({
        "image": image, "working_dir": "/workspace",
        "command": ["/usr/local/bin/openhands-agent-server", "--port", "60000"],
        "environment": {"OH_WEBHOOKS_0_BASE_URL": "http://app/api/v1/webhooks", "CA_BUNDLE": "/etc/ca.pem"},
        "run_as_user": 1000, "run_as_group": 1000, "fs_group": 1000
    })
}

async fn every_admin_endpoint_answers_403_without_a_password(backend: Backend) {
    let sandgate = Sandgate::start(&backend).await;
    let client = &sandgate.client;
    let disabled = json!({ "detail": "Admin functionality is disabled" });
    for request in [
        client.get(sandgate.url("/api/admin/challenge")),
        client
            .post(sandgate.url("/api/admin/login"))
            .json(&json!({"challenge": "c", "hash": "h"})),
        client.get(sandgate.url("/api/admin/api-keys")),
        client
            .put(sandgate.url("/api/admin/warm-runtime-configs/custom"))
            .json(&derived("img:x")),
        // Refused before the body's shape is looked at.
        client
            .put(sandgate.url("/api/admin/warm-runtime-configs/custom"))
            .json(&json!({"count": -1})),
        client.delete(sandgate.url("/api/admin/warm-runtime-configs/custom")),
    ] {
        let (status, body) = json_of(request.send().await.expect("request")).await;
        assert_eq!((status, body), (StatusCode::FORBIDDEN, disabled.clone()));
    }
    // A body that is not JSON at all is answered 422 first, as the reference does.
    for request in [
        client
            .post(sandgate.url("/api/admin/login"))
            .body("not json"),
        client
            .put(sandgate.url("/api/admin/warm-runtime-configs/custom"))
            .body("{"),
    ] {
        let (status, body) = json_of(request.send().await.expect("request")).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(body["detail"][0]["type"], "json_invalid");
    }
    // Listing is not an admin call: the API key reads it.
    assert_eq!(listed(&sandgate).await, []);
}

async fn login_spends_the_challenge_whatever_the_outcome(backend: Backend) {
    let sandgate = start(&backend, None, &[]).await;
    let issued = challenge(&sandgate).await;
    assert_eq!(issued["iterations"], 1000);
    assert_eq!(issued["challenge"].as_str().expect("challenge").len(), 64);
    let salt = issued["salt"].as_str().expect("salt");
    assert!(salt.len() >= 32 && salt.bytes().all(|byte| byte.is_ascii_hexdigit()));
    assert_ne!(challenge(&sandgate).await["challenge"], issued["challenge"]);

    let invalid_challenge = json!({ "detail": "Invalid or expired challenge" });
    let wrong = post_login(&sandgate, &answer(&issued, "not the password")).await;
    assert_eq!(
        wrong,
        (
            StatusCode::UNAUTHORIZED,
            json!({ "detail": "Invalid admin password" })
        )
    );
    // The failed attempt spent it: the right hash now comes too late.
    let reused = post_login(&sandgate, &answer(&issued, PASSWORD)).await;
    assert_eq!(
        reused,
        (StatusCode::UNAUTHORIZED, invalid_challenge.clone())
    );
    let unknown = post_login(&sandgate, &json!({"challenge": "feed", "hash": "00"})).await;
    assert_eq!(unknown, (StatusCode::UNAUTHORIZED, invalid_challenge));

    let issued = challenge(&sandgate).await;
    let (status, body) = post_login(&sandgate, &answer(&issued, PASSWORD)).await;
    assert_eq!(status, 200, "{body}");
    let again = post_login(&sandgate, &answer(&issued, PASSWORD)).await;
    assert_eq!(again.0, StatusCode::UNAUTHORIZED, "a used challenge");

    let (status, body) = post_login(&sandgate, &json!({"challenge": "c"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["loc"], json!(["body", "hash"]));
    assert_eq!(body["detail"][0]["type"], "missing");
}

async fn api_keys_need_the_admin_token(backend: Backend) {
    let sandgate = start(&backend, None, &[]).await;
    let api_keys = |token: Option<&str>| {
        let mut request = sandgate.client.get(sandgate.url("/api/admin/api-keys"));
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        async move { json_of(request.send().await.expect("request")).await }
    };
    assert_eq!(api_keys(None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(
        api_keys(Some("not.a.jwt")).await.0,
        StatusCode::UNAUTHORIZED
    );

    let token = login(&sandgate).await;
    let (status, body) = api_keys(Some(&token)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!([{
            "id": 1, "name": "default", "key_value": RUNTIME_KEY,
            "max_runtimes": null, "remaining_credits": null
        }])
    );

    // A token signed by another deployment's secret.
    let other_backend = Backend::embedded();
    let other = Sandgate::start_with(
        &other_backend,
        &[
            "--admin-password",
            PASSWORD,
            "--jwt-secret",
            "another deployment's key, also 32+ bytes",
            "--pbkdf2-iterations",
            ITERATIONS,
        ],
    )
    .await;
    let foreign = login(&other).await;
    let (status, body) = api_keys(Some(&foreign)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body, json!({ "detail": "Invalid admin token" }));

    // A changed payload with the original signature.
    let mut parts: Vec<&str> = token.split('.').collect();
    let payload = "eyJzdWIiOiJhZG1pbiIsImF1ZCI6InNhbmRnYXRlLXJ1bnRpbWUtYWRtaW4iLCJpc3MiOiJzYW5kZ2F0ZSIsImlhdCI6MCwiZXhwIjo5OTk5OTk5OTk5OX0";
    parts[1] = payload;
    assert_eq!(
        api_keys(Some(&parts.join("."))).await.0,
        StatusCode::UNAUTHORIZED
    );
}

async fn listing_needs_a_valid_api_key(backend: Backend) {
    let sandgate = start(&backend, None, &[]).await;
    let refused = (
        StatusCode::UNAUTHORIZED,
        json!({ "detail": "provide a valid API key" }),
    );
    for key in [None, Some("wrong key"), Some("")] {
        let mut request = sandgate
            .client
            .get(sandgate.url("/api/warm-runtime-configs"));
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        assert_eq!(
            json_of(request.send().await.expect("request")).await,
            refused
        );
    }
    // The admin token is not an API key.
    let token = login(&sandgate).await;
    let request = sandgate
        .client
        .get(sandgate.url("/api/warm-runtime-configs"))
        .bearer_auth(&token);
    assert_eq!(
        json_of(request.send().await.expect("request")).await,
        refused
    );
}

async fn logins_racing_on_one_challenge_have_one_winner(backend: Backend) {
    let sandgate = Arc::new(start(&backend, None, &[]).await);
    let body = answer(&challenge(&sandgate).await, PASSWORD);
    let logins = (0..20).map(|_| {
        let (sandgate, body) = (sandgate.clone(), body.clone());
        tokio::spawn(async move { post_login(&sandgate, &body).await })
    });
    let outcomes: Vec<(StatusCode, Value)> = futures::future::join_all(logins)
        .await
        .into_iter()
        .map(|outcome| outcome.expect("task"))
        .collect();
    let winners = outcomes.iter().filter(|(status, _)| *status == 200).count();
    assert_eq!(winners, 1, "{outcomes:?}");
    for (status, body) in outcomes.iter().filter(|(status, _)| *status != 200) {
        assert_eq!(*status, StatusCode::UNAUTHORIZED);
        assert_eq!(body["detail"], "Invalid or expired challenge");
    }
}

async fn saving_takes_pool_management_over_from_the_installer(backend: Backend) {
    let file = installer_file(V1_CURRENT);
    let sandgate = start(&backend, Some(&file), &[]).await;
    assert_eq!(
        listed(&sandgate).await,
        [entry("v1_current", "file", V1_CURRENT, 2)]
    );
    let token = login(&sandgate).await;

    // Derived from the default, minus one of its environment keys: a warning names it.
    let mut body = derived("ghcr.io/acme/custom:1");
    body["environment"]
        .as_object_mut()
        .expect("environment")
        .remove("OH_WEBHOOKS_0_BASE_URL");
    body["count"] = 5.into();
    let (status, saved) = put(&sandgate, &token, "custom", &body).await;
    assert_eq!(status, 200, "{saved}");
    assert_eq!(saved["name"], "custom");
    assert_eq!(saved["source"], "db");
    assert_eq!(saved["count"], 5);
    assert_eq!(saved["image"], "ghcr.io/acme/custom:1");
    assert_eq!(saved["run_as_user"], 1000);
    assert_eq!(saved["warnings"], json!(["OH_WEBHOOKS_0_BASE_URL"]));

    // Outside overlay mode the saved configurations replace the installer's.
    assert_eq!(
        listed(&sandgate).await,
        [entry("custom", "db", "ghcr.io/acme/custom:1", 5)]
    );

    // A second name for the same image is refused, naming the holder.
    let (status, conflict) =
        put(&sandgate, &token, "copy", &derived("ghcr.io/acme/custom:1")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let detail = conflict["detail"].as_str().expect("detail");
    assert!(detail.contains("\"custom\""), "{detail}");

    // Without a count, the installer-wide count applies.
    let (status, saved) = put(
        &sandgate,
        &token,
        "second",
        &derived("ghcr.io/acme/second:1"),
    )
    .await;
    assert_eq!(status, 200, "{saved}");
    assert_eq!(saved["count"], 2);
    assert_eq!(saved["warnings"], json!([]));

    assert_eq!(
        delete(&sandgate, &token, "nope").await,
        (
            StatusCode::NOT_FOUND,
            json!({ "detail": "Configuration \"nope\" not found" })
        )
    );
    // The installer's entry is not API-managed: nothing to delete.
    assert_eq!(
        delete(&sandgate, &token, "v1_current").await.0,
        StatusCode::NOT_FOUND
    );
    for name in ["custom", "second"] {
        assert_eq!(
            delete(&sandgate, &token, name).await,
            (
                StatusCode::OK,
                json!({ "message": format!("Configuration \"{name}\" deleted successfully") })
            )
        );
    }
    // With no saved configuration left, the installer's is in effect again.
    assert_eq!(
        listed(&sandgate).await,
        [entry("v1_current", "file", V1_CURRENT, 2)]
    );
}

async fn overlay_mode_merges_saved_over_installer_entries(backend: Backend) {
    let file = installer_file(V1_CURRENT);
    let sandgate = start(
        &backend,
        Some(&file),
        &["--warm-runtime-config-overlay", "yes"],
    )
    .await;
    let token = login(&sandgate).await;
    let (status, body) = put(
        &sandgate,
        &token,
        "custom",
        &derived("ghcr.io/acme/custom:1"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        listed(&sandgate).await,
        [
            entry("custom", "db", "ghcr.io/acme/custom:1", 2),
            entry("v1_current", "file", V1_CURRENT, 2),
        ]
    );

    // The installer entry stays selectable, so its image is taken.
    let (status, conflict) = put(&sandgate, &token, "copy", &derived(V1_CURRENT)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{conflict}");
    assert!(
        conflict["detail"]
            .as_str()
            .expect("detail")
            .contains("\"v1_current\"")
    );

    // A saved entry of the same name overrides the installer's…
    let mut override_body = derived("ghcr.io/openhands/runtime:1.1");
    override_body["count"] = 1.into();
    let (status, body) = put(&sandgate, &token, "v1_current", &override_body).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        listed(&sandgate).await,
        [
            entry("custom", "db", "ghcr.io/acme/custom:1", 2),
            entry("v1_current", "db", "ghcr.io/openhands/runtime:1.1", 1),
        ]
    );
    // …and deleting it makes the installer's effective again, as `file`.
    assert_eq!(
        delete(&sandgate, &token, "v1_current").await.0,
        StatusCode::OK
    );
    assert_eq!(
        listed(&sandgate).await,
        [
            entry("custom", "db", "ghcr.io/acme/custom:1", 2),
            entry("v1_current", "file", V1_CURRENT, 2),
        ]
    );
    assert_eq!(
        delete(&sandgate, &token, "v1_current").await.0,
        StatusCode::NOT_FOUND
    );
}

async fn saved_configurations_are_checked_field_by_field(backend: Backend) {
    let sandgate = start(&backend, None, &[]).await;
    let token = login(&sandgate).await;
    let with = |field: &str, value: Value| {
        let mut body = derived("img:checked");
        body[field] = value;
        body
    };
    let without = |field: &str| {
        let mut body = derived("img:checked");
        body.as_object_mut().expect("object").remove(field);
        body
    };
    for (name, body, loc, error_type) in [
        (
            "custom",
            with("source", "db".into()),
            json!(["body", "source"]),
            "extra_forbidden",
        ),
        (
            "custom",
            with("name", "custom".into()),
            json!(["body", "name"]),
            "extra_forbidden",
        ),
        (
            "custom",
            with("cont", 2.into()),
            json!(["body", "cont"]),
            "extra_forbidden",
        ),
        (
            "custom",
            without("image"),
            json!(["body", "image"]),
            "missing",
        ),
        (
            "custom",
            without("environment"),
            json!(["body", "environment"]),
            "missing",
        ),
        (
            "custom",
            with("count", (-1).into()),
            json!(["body", "count"]),
            "greater_than_equal",
        ),
        (
            "custom",
            with("run_as_user", (-1).into()),
            json!(["body", "run_as_user"]),
            "greater_than_equal",
        ),
        (
            "custom",
            with("count", "two".into()),
            json!(["body", "count"]),
            "int_type",
        ),
        (
            "custom",
            with("command", "server".into()),
            json!(["body", "command"]),
            "list_type",
        ),
        (
            "custom",
            with("environment", json!({"A": 1})),
            json!(["body", "environment", "A"]),
            "string_type",
        ),
        (
            "custom",
            with("working_dir", "relative".into()),
            json!(["body", "working_dir"]),
            "value_error",
        ),
        (
            "custom",
            with("image", "".into()),
            json!(["body", "image"]),
            "string_too_short",
        ),
        (
            "-bad-",
            derived("img:checked"),
            json!(["path", "name"]),
            "string_pattern_mismatch",
        ),
    ] {
        let (status, body) = put(&sandgate, &token, name, &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{loc}: {body}");
        assert_eq!(body["detail"][0]["loc"], loc, "{body}");
        assert_eq!(body["detail"][0]["type"], error_type, "{body}");
    }
    let (status, body) = json_of(
        sandgate
            .client
            .put(sandgate.url("/api/admin/warm-runtime-configs/custom"))
            .bearer_auth(&token)
            .body("{not json")
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["type"], "json_invalid");

    // Authentication comes before the body is looked at.
    let (status, _) = put(
        &sandgate,
        "not-a-token",
        "custom",
        &with("count", (-1).into()),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(listed(&sandgate).await, []);
}

async fn the_installer_file_is_reread_when_it_changes(backend: Backend) {
    let file = installer_file(V1_CURRENT);
    let sandgate = start(&backend, Some(&file), &[]).await;
    assert_eq!(
        listed(&sandgate).await,
        [entry("v1_current", "file", V1_CURRENT, 2)]
    );
    // An upgrade rewrites the file: the next read serves it, no restart.
    write_installer(file.path(), "ghcr.io/openhands/runtime:2.0");
    assert_eq!(
        listed(&sandgate).await,
        [entry(
            "v1_current",
            "file",
            "ghcr.io/openhands/runtime:2.0",
            2
        )]
    );
    // A broken file keeps the last good one in effect.
    std::fs::write(file.path(), "{\"configs\": [").expect("write");
    assert_eq!(
        listed(&sandgate).await,
        [entry(
            "v1_current",
            "file",
            "ghcr.io/openhands/runtime:2.0",
            2
        )]
    );
}

async fn the_list_carries_an_etag_that_changes_with_it(backend: Backend) {
    let file = installer_file(V1_CURRENT);
    let sandgate = start(
        &backend,
        Some(&file),
        &["--warm-runtime-config-overlay", "1"],
    )
    .await;
    let get = |etag: Option<&str>, key: &str| {
        let mut request = sandgate
            .client
            .get(sandgate.url("/api/warm-runtime-configs"))
            .header("x-api-key", key);
        if let Some(etag) = etag {
            request = request.header("if-none-match", etag);
        }
        request.send()
    };
    let first = get(None, RUNTIME_KEY).await.expect("request");
    assert_eq!(first.status(), 200);
    let etag = first.headers()["etag"].to_str().expect("etag").to_owned();
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
    let unchanged = get(Some(&etag), RUNTIME_KEY).await.expect("request");
    assert_eq!(unchanged.status(), StatusCode::NOT_MODIFIED);
    // The tag never stands in for the key.
    let refused = get(Some(&etag), "wrong key").await.expect("request");
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);

    let token = login(&sandgate).await;
    let (status, _) = put(&sandgate, &token, "custom", &derived("img:custom")).await;
    assert_eq!(status, 200);
    let changed = get(Some(&etag), RUNTIME_KEY).await.expect("request");
    assert_eq!(changed.status(), 200);
    assert_ne!(changed.headers()["etag"].to_str().expect("etag"), etag);
    let (_, body) = json_of(changed).await;
    assert_eq!(body["configs"].as_array().expect("configs").len(), 2);
}

crate::on_both_backends!(
    the_list_carries_an_etag_that_changes_with_it,
    every_admin_endpoint_answers_403_without_a_password,
    login_spends_the_challenge_whatever_the_outcome,
    api_keys_need_the_admin_token,
    listing_needs_a_valid_api_key,
    logins_racing_on_one_challenge_have_one_winner,
    saving_takes_pool_management_over_from_the_installer,
    overlay_mode_merges_saved_over_installer_entries,
    saved_configurations_are_checked_field_by_field,
    the_installer_file_is_reread_when_it_changes,
    challenges_and_tokens_expire_on_the_service_clock,
);

#[test]
fn an_unreadable_installer_file_stops_the_start() {
    let missing = PathBuf::from("/nonexistent/warm-runtimes.json");
    let err = InstallerFile::open(Some(missing)).err().expect("refused");
    assert!(err.contains("/nonexistent/warm-runtimes.json"), "{err}");
}

async fn challenges_and_tokens_expire_on_the_service_clock(backend: Backend) {
    let store = crate::store_conformance::open(&backend).await;
    let auth = Arc::new(Authenticator::new(&[], &[], store.session_keys.clone()));
    let clock = Arc::new(TestClock::at(1_800_000_000_000));
    let config = AdminConfig {
        admin_password: Some(PASSWORD.into()),
        jwt_secret: Some(JWT_SECRET.as_bytes().to_vec()),
        pbkdf2_iterations: 1000,
        ..AdminConfig::default()
    };
    let configs = Arc::new(WarmConfigSource::new(
        store.clone(),
        InstallerFile::open(None).expect("no file"),
        false,
    ));
    let service = RuntimeAdminService::with_clock(store, auth, config, configs, clock.clone());
    let challenge = || async {
        service
            .get_challenge(tonic::Request::new(GetChallengeRequest {}))
            .await
            .expect("challenge")
            .into_inner()
    };
    let login = |issued: sandgate_proto::admin::v1::GetChallengeResponse| {
        let hash = login_hash(PASSWORD, &issued.salt, &issued.challenge, issued.iterations);
        service.login(tonic::Request::new(LoginRequest {
            challenge: issued.challenge,
            hash,
        }))
    };
    let minute = 60_000;

    // Answered in its fifth minute: accepted.
    let issued = challenge().await;
    clock.advance(5 * minute - 1);
    let token = login(issued).await.expect("in time").into_inner().token;

    // Answered after five minutes: refused.
    let issued = challenge().await;
    clock.advance(5 * minute);
    let late = login(issued).await.expect_err("too late");
    assert_eq!(late.code(), tonic::Code::Unauthenticated);
    assert_eq!(late.message(), "Invalid or expired challenge");

    // The token lasts 24 hours from its login.
    let api_keys = || {
        let mut request = tonic::Request::new(ListApiKeysRequest {});
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("metadata"),
        );
        service.list_api_keys(request)
    };
    api_keys().await.expect("fresh token");
    clock.advance(24 * 60 * minute - 5 * minute - 1000);
    api_keys().await.expect("still within 24 hours");
    clock.advance(1000);
    let expired = api_keys().await.expect_err("expired");
    assert_eq!(expired.code(), tonic::Code::Unauthenticated);
    assert_eq!(
        expired.message(),
        "The admin token has expired; log in again"
    );
}

/// Runs `sandgate admin <args>` against `sandgate`, feeding `stdin`.
async fn admin_cli(
    sandgate: &Sandgate,
    password: &str,
    args: &[&str],
    stdin: &[u8],
) -> (bool, String, String) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_sandgate"))
        .arg("admin")
        .args(args)
        .env("RUNTIME_API_URL", format!("http://{}", sandgate.address))
        .env("ADMIN_PASSWORD", password)
        .env_remove("API_KEY")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn sandgate admin");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin).await.expect("write stdin");
    drop(input);
    let output = child.wait_with_output().await.expect("sandgate admin");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_cli_templates_saves_lists_and_deletes() {
    let backend = Backend::embedded();
    let file = installer_file(V1_CURRENT);
    let sandgate = start(&backend, Some(&file), &[]).await;

    let (ok, out, err) = admin_cli(&sandgate, PASSWORD, &["list"], b"").await;
    assert!(ok, "{err}");
    let list: Value = serde_json::from_str(&out).expect("list is JSON");
    assert_eq!(list["configs"][0]["name"], "v1_current");
    // With API_KEY, listing needs no admin login (the password here is wrong).
    let (ok, out, err) =
        admin_cli(&sandgate, "wrong", &["--api-key", RUNTIME_KEY, "list"], b"").await;
    assert!(ok, "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).expect("JSON"), list);

    // `template v1_current --image X --count 2 | save custom`
    let (ok, template, err) = admin_cli(
        &sandgate,
        PASSWORD,
        &[
            "template",
            "v1_current",
            "--image",
            "ghcr.io/acme/custom:1",
            "--count",
            "2",
        ],
        b"",
    )
    .await;
    assert!(ok, "{err}");
    let body: Value = serde_json::from_str(&template).expect("template is JSON");
    assert_eq!(body["image"], "ghcr.io/acme/custom:1");
    assert_eq!(body["count"], 2);
    assert_eq!(body["working_dir"], "/workspace");
    assert!(body.get("name").is_none() && body.get("source").is_none());
    let (ok, saved, err) = admin_cli(
        &sandgate,
        PASSWORD,
        &["save", "custom"],
        template.as_bytes(),
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&saved).expect("saved is JSON")["source"],
        "db"
    );
    assert_eq!(
        listed(&sandgate).await,
        [entry("custom", "db", "ghcr.io/acme/custom:1", 2)]
    );

    let (ok, out, err) = admin_cli(&sandgate, PASSWORD, &["delete", "custom"], b"").await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "Configuration \"custom\" deleted successfully");

    // Failures print the server's detail and exit non-zero.
    let (ok, _, err) = admin_cli(&sandgate, PASSWORD, &["delete", "custom"], b"").await;
    assert!(!ok);
    assert!(err.contains("Configuration \"custom\" not found"), "{err}");
    let (ok, _, err) = admin_cli(&sandgate, "wrong", &["delete", "custom"], b"").await;
    assert!(!ok);
    assert!(err.contains("Invalid admin password"), "{err}");
    let (ok, _, err) = admin_cli(
        &sandgate,
        PASSWORD,
        &["save", "custom"],
        b"{\"image\": \"x\"}",
    )
    .await;
    assert!(!ok);
    assert!(err.contains("working_dir"), "{err}");
    let (ok, _, err) = admin_cli(
        &sandgate,
        PASSWORD,
        &["template", "nope", "--image", "x", "--count", "1"],
        b"",
    )
    .await;
    assert!(!ok);
    assert!(err.contains("no configuration named \"nope\""), "{err}");
}

/// An https server with a certificate issued by a test CA, answering every request with
/// an empty configuration list; the CA's PEM file.
async fn tls_server() -> (std::net::SocketAddr, tempfile::NamedTempFile) {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca =
        rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().expect("key"))
            .expect("CA");
    let leaf_key = rcgen::KeyPair::generate().expect("key");
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .expect("params")
        .signed_by(&leaf_key, &ca)
        .expect("leaf");
    let ca_file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(ca_file.path(), ca.pem()).expect("write CA");

    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
        )
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                // A client that refuses the certificate ends the handshake here.
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                while !request.windows(4).any(|window| window == b"\r\n\r\n") {
                    match tls.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(read) => request.extend_from_slice(&buffer[..read]),
                    }
                }
                let body = r#"{"configs":[]}"#;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                drop(tls.write_all(answer.as_bytes()).await);
                drop(tls.shutdown().await);
            });
        }
    });
    (address, ca_file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_cli_checks_https_certificates() {
    let (address, ca_file) = tls_server().await;
    let list = |trust: Option<&std::path::Path>| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_sandgate"));
        command
            .args(["admin", "--api-key", "k", "list"])
            .env("RUNTIME_API_URL", format!("https://{address}"))
            .env_remove("ADMIN_PASSWORD");
        match trust {
            Some(path) => command.env("SSL_CERT_FILE", path),
            None => command.env_remove("SSL_CERT_FILE"),
        };
        command.output()
    };
    let trusted = list(Some(ca_file.path())).await.expect("sandgate admin");
    assert!(
        trusted.status.success(),
        "{}",
        String::from_utf8_lossy(&trusted.stderr)
    );
    let out: Value = serde_json::from_slice(&trusted.stdout).expect("JSON");
    assert_eq!(out, json!({ "configs": [] }));

    let untrusted = list(None).await.expect("sandgate admin");
    assert!(!untrusted.status.success());
    let err = String::from_utf8_lossy(&untrusted.stderr);
    assert!(err.contains("certificate"), "{err}");
}
