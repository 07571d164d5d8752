//! A console session: its cookies, the credentials they hold, and their CSRF proof.

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use sandgate_proto::models::v1::{KeyOperation, ManageKeysRequest};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::client::{ClientAddress, Peer};
use crate::error::ApiError;
use crate::state::AppState;
use crate::{body, metadata};

/// The cookie holding the admin token, and the one holding the gateway's console token.
const ADMIN_COOKIE: &str = "sandgate_console_admin";
const MASTER_COOKIE: &str = "sandgate_console_master";
/// How long a session lasts: a working day. The admin token's own life (24 hours) and
/// the console token's bound (`console_token::MAX_LIFETIME_SECS`) hold besides.
pub(crate) const SESSION_SECS: i64 = 8 * 3600;
/// The header a change carries its CSRF proof in.
const CSRF_HEADER: &str = "x-sandgate-csrf";

/// What a session's cookies hold.
#[derive(Default)]
pub(crate) struct Credentials {
    admin: Option<String>,
    master: Option<String>,
}

impl Credentials {
    /// The console's cookies among `headers`' (other cookies are not looked at).
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        let mut credentials = Self::default();
        let pairs = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(';'))
            .filter_map(|pair| pair.trim().split_once('='));
        for (name, value) in pairs {
            let value = (!value.is_empty()).then(|| value.to_owned());
            match name {
                ADMIN_COOKIE => credentials.admin = value,
                // Only a console token: never a key itself, whatever the cookie holds.
                MASTER_COOKIE => {
                    credentials.master =
                        value.filter(|token| sandgate_proto::console_token::is_token(token));
                }
                _ => {}
            }
        }
        credentials
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.admin.is_none() && self.master.is_none()
    }

    /// Whether `headers` carry this session's CSRF proof.
    pub(crate) fn proven(&self, headers: &HeaderMap) -> bool {
        let shown = headers
            .get(CSRF_HEADER)
            .map(HeaderValue::as_bytes)
            .unwrap_or_default();
        bool::from(shown.ct_eq(csrf_proof(self).as_bytes()))
    }

    /// The credentials as the API takes them: the admin token as a bearer token, and in
    /// `x-sandgate-admin-token` where a runtime API key is asked (the spec keeps the
    /// bearer off those routes); the gateway's in LiteLLM's own header (the gateway takes
    /// it in any carrier; the runtime API reads neither).
    pub(crate) fn present(&self, headers: &mut HeaderMap) {
        let value = |text: String| HeaderValue::from_str(&text).ok();
        if let Some(token) = &self.admin {
            if let Some(bearer) = value(format!("Bearer {token}")) {
                headers.insert(header::AUTHORIZATION, bearer);
            }
            if let Some(token) = value(token.clone()) {
                headers.insert("x-sandgate-admin-token", token);
            }
        }
        if let Some(token) = self.master.clone().and_then(value) {
            headers.insert("x-litellm-api-key", token);
        }
    }
}

/// The session's CSRF proof: a digest of its cookies, which a page of another origin can
/// neither read (`/console/session` is not shared across origins) nor compute.
pub(crate) fn csrf_proof(credentials: &Credentials) -> String {
    let mut digest = Sha256::new();
    digest.update(b"sandgate console csrf|");
    digest.update(credentials.admin.as_deref().unwrap_or_default());
    digest.update(b"|");
    digest.update(credentials.master.as_deref().unwrap_or_default());
    hex::encode(&digest.finalize()[..16])
}

/// `POST /console/login`'s body: the answer to an admin challenge, or the master key.
#[derive(Deserialize)]
#[serde(tag = "method", rename_all = "snake_case", deny_unknown_fields)]
enum Login {
    Password { challenge: String, hash: String },
    MasterKey { key: String },
}

/// `POST /console/login`: a session for the admin password's proof or the master key,
/// added to the session the browser holds (signed in both ways, a page reaches both the
/// runtime API and the gateway).
pub(crate) async fn login(
    State(state): State<AppState>,
    client: ClientAddress,
    peer: Peer,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let payload = body::buffered(payload, state.body_limit)?;
    let mut credentials = Credentials::of(&headers);
    let cookie = match body::decode::<Login>(&payload)? {
        Login::Password { challenge, hash } => {
            let token =
                crate::admin::admin_token(&state, &headers, client, challenge, hash).await?;
            credentials.admin = Some(token.clone());
            (ADMIN_COOKIE, token)
        }
        Login::MasterKey { key } => {
            let expires = now_secs() + SESSION_SECS;
            let token = sandgate_proto::console_token::mint(&key, expires);
            check_master(&state, &token, client).await?;
            credentials.master = Some(token.clone());
            (MASTER_COOKIE, token)
        }
    };
    let mut response = Json(serde_json::json!({
        "csrf": csrf_proof(&credentials),
        "admin": credentials.admin.is_some(),
        "master_key": credentials.master.is_some(),
    }))
    .into_response();
    let set = set_cookie(
        cookie.0,
        &cookie.1,
        SESSION_SECS,
        tls(&state, &headers, &peer),
    );
    response.headers_mut().append(header::SET_COOKIE, set);
    Ok(response)
}

/// Whether the gateway takes `token` for the master key: it lists one key with it.
async fn check_master(
    state: &AppState,
    token: &str,
    client: ClientAddress,
) -> Result<(), ApiError> {
    let unauthorized = || ApiError::Edge(StatusCode::UNAUTHORIZED, "Invalid master key".into());
    let gateway = state.models.as_ref().ok_or_else(|| {
        ApiError::Edge(StatusCode::SERVICE_UNAVAILABLE, "No model gateway".into())
    })?;
    let mut headers = HeaderMap::new();
    headers.insert(
        "x-litellm-api-key",
        HeaderValue::from_str(token).map_err(|_| unauthorized())?,
    );
    let request = metadata::request_for(
        &headers,
        client,
        ManageKeysRequest {
            operation: KeyOperation::List.into(),
            body: Bytes::from_static(br#"{"size": 1}"#),
        },
    );
    gateway
        .manage_keys(request)
        .await
        .map(|_| ())
        .map_err(|_| unauthorized())
}

/// `POST /console/logout`: both cookies cleared (with the session's CSRF proof).
pub(crate) async fn logout(
    State(state): State<AppState>,
    peer: Peer,
    headers: HeaderMap,
) -> Response {
    let credentials = Credentials::of(&headers);
    if !credentials.is_empty() && !credentials.proven(&headers) {
        return (
            StatusCode::FORBIDDEN,
            Json(serde_json::json!({"detail": "Missing or wrong CSRF proof"})),
        )
            .into_response();
    }
    let secure = tls(&state, &headers, &peer);
    let mut response = StatusCode::NO_CONTENT.into_response();
    for name in [ADMIN_COOKIE, MASTER_COOKIE] {
        response
            .headers_mut()
            .append(header::SET_COOKIE, set_cookie(name, "", 0, secure));
    }
    response
}

/// `GET /console/session`: how the browser is signed in, and the CSRF proof its changes
/// carry.
pub(crate) async fn describe(headers: HeaderMap) -> Json<serde_json::Value> {
    let credentials = Credentials::of(&headers);
    Json(serde_json::json!({
        "admin": credentials.admin.is_some(),
        "master_key": credentials.master.is_some(),
        "csrf": (!credentials.is_empty()).then(|| csrf_proof(&credentials)),
    }))
}

fn set_cookie(name: &str, value: &str, max_age: i64, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{name}={value}; Path=/console; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("invalid=; Max-Age=0"))
}

/// Whether the browser reached the edge over TLS: the edge itself serves plain HTTP, so
/// only a trusted proxy's `X-Forwarded-Proto: https` says so.
fn tls(state: &AppState, headers: &HeaderMap, Peer(peer): &Peer) -> bool {
    peer.is_some_and(|peer| state.trusted_proxies.iter().any(|net| net.contains(&peer)))
        && headers
            .get("x-forwarded-proto")
            .and_then(|value| value.to_str().ok())
            .is_some_and(|proto| proto.eq_ignore_ascii_case("https"))
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX)
        })
}
