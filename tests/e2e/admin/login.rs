//! Admin login and API keys: 403 without a password, a challenge spent by any login and
//! won by one of racing ones, challenges and tokens expiring on the service clock, and the
//! keys' listing behind the admin token and a valid API key.

use std::sync::Arc;

use reqwest::StatusCode;
use sandgate_proto::admin::v1::runtime_admin_server::RuntimeAdmin;
use sandgate_proto::admin::v1::{GetChallengeRequest, ListApiKeysRequest, LoginRequest};
use sandgate_runtime_api::admin::installer::InstallerFile;
use sandgate_runtime_api::admin::login::login_hash;
use sandgate_runtime_api::admin::source::WarmConfigSource;
use sandgate_runtime_api::{AdminConfig, Authenticator, RuntimeAdminService};
use serde_json::{Value, json};

use crate::common::{Backend, RUNTIME_KEY, Sandgate, TestClock};

use super::*;

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

crate::on_both_backends!(
    every_admin_endpoint_answers_403_without_a_password,
    login_spends_the_challenge_whatever_the_outcome,
    api_keys_need_the_admin_token,
    listing_needs_a_valid_api_key,
    logins_racing_on_one_challenge_have_one_winner,
    challenges_and_tokens_expire_on_the_service_clock,
);
