//! gRPC health (`grpc.health.v1`) that answers from a live store ping, so a probe sees an
//! outage at once rather than at the next sweep.

use std::time::Duration;

use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::Health;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::store::Store;

/// How long a health check waits for the store.
const PING_TIMEOUT: Duration = Duration::from_secs(2);

pub struct StoreHealthService {
    store: Store,
}

impl StoreHealthService {
    pub fn new(store: Store) -> Self {
        Self { store }
    }
}

#[tonic::async_trait]
impl Health for StoreHealthService {
    async fn check(
        &self,
        _request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let status = match tokio::time::timeout(PING_TIMEOUT, self.store.health.ping()).await {
            Ok(Ok(())) => ServingStatus::Serving,
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "health check: store unreachable");
                ServingStatus::NotServing
            }
            Err(_) => {
                tracing::warn!("health check: store ping timed out");
                ServingStatus::NotServing
            }
        };
        Ok(Response::new(HealthCheckResponse {
            status: status.into(),
        }))
    }

    type WatchStream = tokio_stream::wrappers::ReceiverStream<Result<HealthCheckResponse, Status>>;

    async fn watch(
        &self,
        _request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented(
            "health watch is not supported; poll Check",
        ))
    }
}
