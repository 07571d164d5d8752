//! The operator console (`/console`, off unless `--console`): pages built into the binary
//! (`assets/`, no build step, no third-party script) that read and change Sandgate through
//! the edge's own API.
//!
//! - **Login** (`POST /console/login`): the admin password, proven in the browser by the
//!   spec's challenge and PBKDF2 (the password never leaves it), which yields the admin
//!   token; or the gateway's master key, exchanged for a token standing for it until it
//!   expires (`sandgate_proto::console_token`). Each goes into its own cookie: HttpOnly,
//!   SameSite=Strict, `Path=/console`, Secure when the edge is reached over TLS, expiring
//!   with the session.
//! - **The API** (`/console/api/<path>`): the request is sent to the edge's own router at
//!   `/<path>`, with the session's credentials and nothing else of the browser's headers
//!   but its content type. Every change there is the API's own, audited as any other. A
//!   request that is not a read must carry the session's CSRF proof (`x-sandgate-csrf`),
//!   which only a page of this origin can read (`GET /console/session`).
//! - **Pages** carry a Content-Security-Policy with no inline script or style, and refuse
//!   framing.

mod session;

use axum::Router;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Path, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use http::{HeaderValue, Method, StatusCode, header};
use tower::ServiceExt;

use crate::state::AppState;
use session::Credentials;

/// What every console answer carries: its pages run only their own script and style, in
/// no frame, and nothing of them is cached.
const SECURITY_HEADERS: [(&str, &str); 6] = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
    ("cross-origin-opener-policy", "same-origin"),
];

/// The API paths a console page may reach, as prefixes of `/<path>`: the reads and
/// changes its pages make, and none of the LLM calls.
const REACHABLE: &[&str] = &[
    "api/warm-runtime-configs",
    "api/warm-runtime-pools",
    "api/admin/warm-runtime-configs/",
    "api/admin/audit",
    "api/ledger/",
    "api/v1/conversations",
    "list",
    "pause",
    "stop",
    "key/list",
    "key/generate",
    "key/delete",
    "team/info",
    "team/list",
    "team/update",
    "user/info",
    "user/list",
    "spend/logs",
];

/// The console's routes, its API sent to `api` (the edge's router).
pub(crate) fn routes(api: Router, state: AppState) -> Router {
    let pages = Router::new()
        .route("/console", get(asset))
        .route("/console/{file}", get(asset))
        .route("/console/login", post(session::login))
        .route("/console/logout", post(session::logout))
        .route("/console/session", get(session::describe))
        .with_state(state);
    let proxy = Router::new()
        .route("/console/api/{*path}", any(forward))
        .with_state(api);
    pages
        .merge(proxy)
        .layer(axum::middleware::map_response(secure))
}

async fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in SECURITY_HEADERS {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// The page and its script and style, as built into the binary.
async fn asset(file: Option<Path<String>>) -> Response {
    let (content_type, body): (&str, &'static str) =
        match file.as_ref().map(|Path(file)| file.as_str()) {
            None | Some("" | "index.html") => (
                "text/html; charset=utf-8",
                include_str!("assets/index.html"),
            ),
            Some("app.js") => (
                "text/javascript; charset=utf-8",
                include_str!("assets/app.js"),
            ),
            Some("app.css") => ("text/css; charset=utf-8", include_str!("assets/app.css")),
            Some(_) => return (StatusCode::NOT_FOUND, "Not Found").into_response(),
        };
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// `/console/api/<path>`: the edge's `/<path>`, called with the session's credentials.
async fn forward(
    State(api): State<Router>,
    Path(path): Path<String>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let credentials = Credentials::of(&parts.headers);
    if credentials.is_empty() {
        return refused(StatusCode::UNAUTHORIZED, "Not signed in");
    }
    let read = matches!(parts.method, Method::GET | Method::HEAD);
    if !read && !credentials.proven(&parts.headers) {
        return refused(StatusCode::FORBIDDEN, "Missing or wrong CSRF proof");
    }
    if !reachable(&path) {
        return refused(StatusCode::NOT_FOUND, "Not reachable from the console");
    }
    let target = match parts.uri.query() {
        Some(query) => format!("/{path}?{query}"),
        None => format!("/{path}"),
    };
    let Ok(uri) = target.parse::<http::Uri>() else {
        return refused(StatusCode::BAD_REQUEST, "Invalid path");
    };
    let mut inner = http::Request::new(body);
    *inner.method_mut() = parts.method;
    *inner.uri_mut() = uri;
    // The client's address (for the audit log and per-client limits) goes along; nothing
    // else of the outer route's (its path parameters are not the inner route's).
    if let Some(peer) = parts.extensions.get::<ConnectInfo<SocketAddr>>() {
        inner.extensions_mut().insert(*peer);
    }
    let headers = inner.headers_mut();
    for name in [header::CONTENT_TYPE, header::ACCEPT] {
        if let Some(value) = parts.headers.get(&name) {
            headers.insert(name, value.clone());
        }
    }
    for name in ["x-forwarded-for", "x-forwarded-proto"] {
        for value in parts.headers.get_all(name) {
            headers.append(name, value.clone());
        }
    }
    credentials.present(headers);
    match api.oneshot(inner).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// Whether `/<path>` is one the console's pages use: no dot segments nor encoded
/// slashes that could lead elsewhere.
fn reachable(path: &str) -> bool {
    !path
        .split('/')
        .any(|segment| segment == ".." || segment == ".")
        && !path.contains('%')
        && !path.contains('\\')
        && REACHABLE.iter().any(|prefix| {
            path == prefix.trim_end_matches('/')
                || path.starts_with(prefix)
                    && (prefix.ends_with('/') || path[prefix.len()..].starts_with('/'))
        })
}

fn refused(status: StatusCode, detail: &str) -> Response {
    (status, axum::Json(serde_json::json!({ "detail": detail }))).into_response()
}

#[cfg(test)]
mod tests {
    use super::reachable;

    #[test]
    fn only_the_pages_paths_are_reachable() {
        for path in [
            "api/admin/audit",
            "api/ledger/conversations/abc",
            "api/ledger/rollup",
            "key/list",
            "list",
            "api/admin/warm-runtime-configs/pool-a",
            "api/v1/conversations/abc/events",
        ] {
            assert!(reachable(path), "{path}");
        }
        for path in [
            "v1/chat/completions",
            "api/admin/api-keys",
            "api/admin/login",
            "listx",
            "api/ledger/../admin/api-keys",
            "key/list/../../v1/chat/completions",
            "api/ledger/%2e%2e/admin/api-keys",
            "start",
            "model/new",
        ] {
            assert!(!reachable(path), "{path}");
        }
    }
}
