//! gRPC services served through axum: the caller's TCP address, which tonic reads from its
//! own connection info (`Request::remote_addr`), and who may name the client a call is
//! made for (`x-sandgate-client-address`, which per-client limits are keyed by, and
//! `x-sandgate-peer-address`, by which the model gateway knows a sandbox's calls).

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request};
use axum::middleware::Next;
use axum::response::Response;
use sandgate_proto::{CLIENT_ADDRESS_METADATA, PEER_ADDRESS_METADATA};
use tonic::transport::server::TcpConnectInfo;

/// Gives tonic the TCP peer axum accepted the connection from.
fn with_peer(request: &mut Request) {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(address)| *address);
    if let Some(peer) = peer {
        request.extensions_mut().insert(TcpConnectInfo {
            local_addr: None,
            remote_addr: Some(peer),
        });
    }
}

/// An internal port, called by the edge: the client address it names is kept.
pub async fn trusted(mut request: Request, next: Next) -> Response {
    with_peer(&mut request);
    next.run(request).await
}

/// A public port: a caller's own client and peer addresses are dropped, so the call
/// counts against (and is known by) the caller's TCP address.
pub async fn untrusted(mut request: Request, next: Next) -> Response {
    request.headers_mut().remove(CLIENT_ADDRESS_METADATA);
    request.headers_mut().remove(PEER_ADDRESS_METADATA);
    with_peer(&mut request);
    next.run(request).await
}
