//! `sandgate health-check`: the container probe of the distroless image, which has no
//! shell, curl or grpc_health_probe. `--http URL` is healthy on a 2xx answer, `--grpc URL`
//! on `grpc.health.v1.Health/Check` (service "") answering SERVING; anything else, or no
//! answer within the timeout, is unhealthy and said in one line.

use std::time::Duration;

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::cli::HealthCheckArgs;

/// Healthy, or why not.
pub async fn run(args: &HealthCheckArgs) -> Result<(), String> {
    let probe = async {
        match (&args.http, &args.grpc) {
            (Some(url), _) => http(url, args.timeout).await,
            (None, Some(url)) => grpc(url, args.timeout).await,
            (None, None) => Err("give --http URL or --grpc URL".to_owned()),
        }
    };
    tokio::time::timeout(args.timeout, probe)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {:?}", args.timeout)))
}

async fn http(url: &str, timeout: Duration) -> Result<(), String> {
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        // A redirect is not health: the probe names the endpoint that answers.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|err| format!("HTTP client: {err}"))?;
    let response = client
        .get(url)
        .send()
        .await
        .map_err(|err| format!("GET {url}: {}", error_chain(&err)))?;
    let status = response.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("GET {url}: {status}"))
    }
}

async fn grpc(url: &str, timeout: Duration) -> Result<(), String> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
        .map_err(|err| format!("{url}: {}", error_chain(&err)))?
        .connect_timeout(timeout)
        .timeout(timeout)
        .connect()
        .await
        .map_err(|err| format!("{url}: {}", error_chain(&err)))?;
    let answer = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .map_err(|status| {
            format!(
                "{url}: grpc.health.v1 Check: {}: {}",
                status.code(),
                status.message()
            )
        })?;
    match ServingStatus::try_from(answer.into_inner().status) {
        Ok(ServingStatus::Serving) => Ok(()),
        Ok(other) => Err(format!("{url}: {}", other.as_str_name())),
        Err(_) => Err(format!("{url}: unknown serving status")),
    }
}

/// An error with its causes, on one line ("connection refused" sits in a source).
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let message = cause.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        source = cause.source();
    }
    text
}
