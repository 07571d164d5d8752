//! An admin login as a client makes one: the challenge, PBKDF2 on the client, the login.
//! A module of its own beside `harness`, for the benchmarks that log in.

use sandgate_runtime_api::admin::login::login_hash;
use serde_json::{Value, json};

/// Logs in as the admin with `password`; the session token. Panics on any failure.
pub async fn login(client: &reqwest::Client, base: &str, password: &str) -> String {
    try_login(client, base, password)
        .await
        .unwrap_or_else(|error| panic!("admin login: {error}"))
}

/// Logs in as the admin with `password`; the session token, or what went wrong.
pub async fn try_login(
    client: &reqwest::Client,
    base: &str,
    password: &str,
) -> Result<String, String> {
    let response = client
        .get(format!("{base}/api/admin/challenge"))
        .send()
        .await
        .map_err(|error| error.to_string())?;
    if response.status() != 200 {
        return Err(format!("challenge: {}", response.status()));
    }
    let challenge: Value = response.json().await.map_err(|error| error.to_string())?;
    let field = |name: &str| challenge[name].as_str().unwrap_or_default().to_owned();
    let (salt, nonce) = (field("salt"), field("challenge"));
    let iterations = challenge["iterations"].as_u64().unwrap_or_default() as u32;
    let password = password.to_owned();
    let hash = {
        let nonce = nonce.clone();
        tokio::task::spawn_blocking(move || login_hash(&password, &salt, &nonce, iterations))
            .await
            .map_err(|error| error.to_string())?
    };
    let response = client
        .post(format!("{base}/api/admin/login"))
        .json(&json!({ "challenge": nonce, "hash": hash }))
        .send()
        .await
        .map_err(|error| error.to_string())?;
    if response.status() != 200 {
        return Err(format!("login: {}", response.status()));
    }
    let body: Value = response.json().await.map_err(|error| error.to_string())?;
    body["token"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| "login: no token in the answer".to_owned())
}
