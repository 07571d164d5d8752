//! The transport between the edge and the gRPC services: a network channel when they run
//! apart, or the services' own router called in-process (`sandgate serve`), so one process
//! skips the sockets but keeps every gRPC semantic (metadata, codes, details, the trace).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tonic::body::Body;
use tonic::service::Routes;
use tonic::transport::Channel;
use tower::Service;

/// A gRPC transport that generated clients accept.
#[derive(Clone)]
pub enum GrpcChannel {
    Remote(Channel),
    InProcess(Routes),
}

impl GrpcChannel {
    /// Calls `routes` directly, without a socket.
    pub fn in_process(routes: Routes) -> Self {
        Self::InProcess(routes.prepare())
    }

    /// A lazily connecting channel to `url` (`http://host:port`): the edge starts even when
    /// the service is not up yet, and calls fail with `unavailable` until it is.
    pub fn remote(url: &str) -> Result<Self, tonic::transport::Error> {
        let channel = tonic::transport::Endpoint::from_shared(url.to_owned())?
            .connect_timeout(Duration::from_secs(2))
            .tcp_nodelay(true)
            .connect_lazy();
        Ok(Self::Remote(channel))
    }
}

type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<http::Response<Body>, tonic::transport::Error>> + Send>>;

impl Service<http::Request<Body>> for GrpcChannel {
    type Response = http::Response<Body>;
    type Error = tonic::transport::Error;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        match self {
            Self::Remote(channel) => channel.poll_ready(cx),
            Self::InProcess(routes) => match Service::<http::Request<Body>>::poll_ready(routes, cx)
            {
                Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
                Poll::Ready(Err(never)) => match never {},
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        match self {
            Self::Remote(channel) => {
                // Across a socket the call carries the edge span's trace context; in-process
                // the services' span is that span's child already.
                sandgate_proto::trace::inject_current(request.headers_mut());
                Box::pin(channel.call(request))
            }
            Self::InProcess(routes) => {
                let response = routes.call(request);
                Box::pin(async move {
                    match response.await {
                        Ok(response) => Ok(response),
                        Err(never) => match never {},
                    }
                })
            }
        }
    }
}
