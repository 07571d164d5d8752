//! `GET /api/admin/support-bundle`: the bundle as a download, for the admin (the same
//! bearer token as every admin route). Served by `serve` on its port, and by `runtime-api`
//! on its metrics listener (the edge alone holds none of what the bundle reads), where
//! `kubectl support-bundle` collects it through `sandgate support-bundle` in the pod.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{HeaderMap, StatusCode, header};
use sandgate_edge::ApiError;
use sandgate_runtime_api::RuntimeAdminService;
use tokio::sync::Semaphore;

use super::Sources;

pub const PATH: &str = "/api/admin/support-bundle";

/// Who may download, and what the bundle is built from.
struct Bundle {
    admin: Arc<RuntimeAdminService>,
    sources: Sources,
    /// One bundle at a time: each reads every sandbox record and compresses megabytes.
    building: Semaphore,
}

/// The route, ready to merge into a process's router.
pub fn routes(admin: Arc<RuntimeAdminService>, sources: Sources) -> Router {
    let state = Arc::new(Bundle {
        admin,
        sources,
        building: Semaphore::new(1),
    });
    Router::new().route(PATH, get(download)).with_state(state)
}

async fn download(State(bundle): State<Arc<Bundle>>, headers: HeaderMap) -> Response {
    let metadata = tonic::metadata::MetadataMap::from_headers(headers);
    if let Err(status) = bundle.admin.authorize(&metadata) {
        return ApiError::from(status).into_response();
    }
    let Ok(_building) = bundle.building.acquire().await else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    match super::build(&bundle.sources).await {
        Ok(archive) => {
            tracing::info!(bytes = archive.len(), "support bundle downloaded");
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|elapsed| elapsed.as_secs())
                .unwrap_or_default();
            (
                [
                    (header::CONTENT_TYPE, "application/gzip".to_owned()),
                    (
                        header::CONTENT_DISPOSITION,
                        format!("attachment; filename=\"sandgate-support-bundle-{now}.tar.gz\""),
                    ),
                    (header::CACHE_CONTROL, "no-store".to_owned()),
                ],
                archive,
            )
                .into_response()
        }
        Err(err) => {
            tracing::error!(error = %err, "support bundle: cannot build the archive");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                axum::Json(serde_json::json!({"detail": "The support bundle could not be built"})),
            )
                .into_response()
        }
    }
}
