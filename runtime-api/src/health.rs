//! gRPC health (`grpc.health.v1`) that answers from a live store ping, so a probe sees an
//! outage at once rather than at the next sweep.

use std::time::Duration;

use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::Health;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use sandgate_store::Store;

/// How long a health check waits for the store.
const PING_TIMEOUT: Duration = Duration::from_secs(2);

pub struct StoreHealthService {
    store: Store,
    /// The services this process serves, by full name: a check of any other is answered
    /// NOT_FOUND, as the health protocol asks, not SERVING.
    services: Vec<String>,
}

impl StoreHealthService {
    pub fn new(store: Store, services: &[&str]) -> Self {
        Self {
            store,
            services: services.iter().map(|&name| name.to_owned()).collect(),
        }
    }
}

#[tonic::async_trait]
impl Health for StoreHealthService {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let service = &request.get_ref().service;
        if !service.is_empty() && !self.services.contains(service) {
            return Err(Status::not_found(format!("unknown service {service:?}")));
        }
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
