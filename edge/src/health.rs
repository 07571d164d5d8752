//! The edge's own routes: `/health` (the services answer and their store is reachable),
//! LiteLLM's liveness and readiness probes, and `/openapi.json`.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::response::IntoResponse;
use http::StatusCode;
use serde_json::{Value, json};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;

use crate::state::AppState;

/// How long `/health` waits for the services.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(3);

/// LiteLLM's liveness probe: the process answers.
pub async fn liveliness() -> Json<Value> {
    Json(Value::from("I'm alive!"))
}

/// LiteLLM's readiness probe: as `/health`, in LiteLLM's words.
pub async fn readiness(state: State<AppState>) -> axum::response::Response {
    let (status, Json(body)) = services_health(state).await;
    let healthy = status == StatusCode::OK;
    (
        status,
        Json(json!({
            "status": if healthy { "healthy" } else { "unhealthy" },
            "db": "Not connected",
            "detail": body.get("detail"),
        })),
    )
        .into_response()
}

/// 200 when the services answer and their store is reachable, 503 otherwise.
pub async fn health(state: State<AppState>) -> impl IntoResponse {
    services_health(state).await
}

async fn services_health(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    let mut client = state.health.clone();
    let check = client.check(HealthCheckRequest {
        service: String::new(),
    });
    match tokio::time::timeout(HEALTH_TIMEOUT, check).await {
        Ok(Ok(response)) if response.get_ref().status() == ServingStatus::Serving => {
            (StatusCode::OK, Json(json!({ "status": "ok" })))
        }
        Ok(Ok(_)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "unavailable", "detail": "the store is unreachable" })),
        ),
        Ok(Err(status)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(
                json!({ "status": "unavailable", "detail": format!("the runtime API did not answer: {}", status.message()) }),
            ),
        ),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "unavailable", "detail": "the runtime API timed out" })),
        ),
    }
}

pub async fn openapi(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(http::header::CONTENT_TYPE, "application/json")],
        state.openapi.clone(),
    )
}
