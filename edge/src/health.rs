//! The edge's own routes: `/health` (the services answer and their store is reachable),
//! LiteLLM's liveness and readiness probes, and `/openapi.json`.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde::Serialize;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use utoipa::ToSchema;

use crate::state::AppState;

/// How long `/health` waits for the services.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(3);

/// The tag of LiteLLM's routes.
const GATEWAY_TAG: &str = "Model gateway";

/// `/health`'s answer.
#[derive(Serialize, ToSchema)]
pub(crate) struct Health {
    /// `ok`, or `unavailable`.
    status: &'static str,
    /// Why not ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
}

/// LiteLLM's liveness answer, a JSON string.
#[derive(Serialize, ToSchema)]
pub(crate) enum Alive {
    #[serde(rename = "I'm alive!")]
    Alive,
}

/// `/health/readiness`'s answer, in LiteLLM's words.
#[derive(Serialize, ToSchema)]
pub(crate) struct Readiness {
    /// `healthy` or `unhealthy`.
    status: &'static str,
    /// LiteLLM's database, which Sandgate has none of.
    db: &'static str,
    /// Why not healthy.
    detail: Option<String>,
}

#[utoipa::path(
    get,
    path = "/health/liveliness",
    operation_id = "liveliness",
    tag = GATEWAY_TAG,
    summary = "LiteLLM's liveness probe: the process answers",
    responses((status = 200, description = "Alive", body = Alive)),
)]
pub(crate) async fn liveliness() -> Json<Alive> {
    Json(Alive::Alive)
}

#[utoipa::path(
    get,
    path = "/health/liveness",
    operation_id = "liveness",
    tag = GATEWAY_TAG,
    summary = "LiteLLM's liveness probe: the process answers",
    responses((status = 200, description = "Alive", body = Alive)),
)]
pub(crate) async fn liveness() -> Json<Alive> {
    liveliness().await
}

#[utoipa::path(
    get,
    path = "/health/readiness",
    operation_id = "readiness",
    tag = GATEWAY_TAG,
    summary = "LiteLLM's readiness probe: as `/health`",
    responses(
        (status = 200, description = "Ready", body = Readiness),
        (status = 503, description = "The services or the store do not answer", body = Readiness),
    ),
)]
pub(crate) async fn readiness(State(state): State<AppState>) -> Response {
    let (status, Json(health)) = services_health(&state).await;
    let healthy = status == StatusCode::OK;
    let readiness = Readiness {
        status: if healthy { "healthy" } else { "unhealthy" },
        db: "Not connected",
        detail: health.detail,
    };
    (status, Json(readiness)).into_response()
}

#[utoipa::path(
    get,
    path = "/health",
    operation_id = "health",
    summary = "200 when the store is reachable, 503 when not",
    responses(
        (status = 200, description = "Healthy", body = Health),
        (status = 503, description = "The store or the runtime API is unreachable", body = Health),
    ),
)]
pub(crate) async fn health(State(state): State<AppState>) -> (StatusCode, Json<Health>) {
    services_health(&state).await
}

async fn services_health(state: &AppState) -> (StatusCode, Json<Health>) {
    let mut client = state.health.clone();
    let check = client.check(HealthCheckRequest {
        service: String::new(),
    });
    let unavailable = |detail: String| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Health {
                status: "unavailable",
                detail: Some(detail),
            }),
        )
    };
    match tokio::time::timeout(HEALTH_TIMEOUT, check).await {
        Ok(Ok(response)) if response.get_ref().status() == ServingStatus::Serving => (
            StatusCode::OK,
            Json(Health {
                status: "ok",
                detail: None,
            }),
        ),
        Ok(Ok(_)) => unavailable("the store is unreachable".into()),
        Ok(Err(status)) => unavailable(format!(
            "the runtime API did not answer: {}",
            status.message()
        )),
        Err(_) => unavailable("the runtime API timed out".into()),
    }
}

#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "openapi",
    summary = "This document",
    responses((status = 200, description = "The OpenAPI document", content_type = "application/json")),
)]
pub(crate) async fn openapi(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(http::header::CONTENT_TYPE, "application/json")],
        state.openapi.clone(),
    )
}
