//! The address of the client a request is served for, which the services key per-client
//! limits by: the TCP peer, or, when the peer is a proxy the edge was told to trust
//! (`--trusted-proxies`), the client that proxy names in `X-Forwarded-For`. Behind an
//! untrusted proxy every client has the proxy's address.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use http::HeaderMap;
use http::request::Parts;
use ipnet::IpNet;

use crate::state::AppState;

/// The client's address; `None` when the edge is driven without a socket (tests that call
/// the router directly), and the services then know the caller as `unknown`.
pub struct ClientAddress(pub Option<IpAddr>);

impl FromRequestParts<AppState> for ClientAddress {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Infallible> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(address)| address.ip().to_canonical());
        Ok(Self(peer.map(|peer| {
            client_of(peer, &parts.headers, &state.trusted_proxies)
        })))
    }
}

/// The TCP peer the request came from, whatever the headers say (`None` when the edge is
/// driven without a socket): how the model gateway knows a sandbox's calls.
pub struct Peer(pub Option<IpAddr>);

impl FromRequestParts<AppState> for Peer {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Self, Infallible> {
        Ok(Self(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(address)| address.ip().to_canonical()),
        ))
    }
}

/// Each proxy appends the address it got the request from to `X-Forwarded-For`, so the
/// list is read from its end: past each trusted proxy to the first address that is not
/// one, which only a trusted proxy can have written. An entry that is not an address
/// ends the walk at the last trusted hop: a client cannot choose its key with garbage.
fn client_of(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |address: &IpAddr| trusted.iter().any(|net| net.contains(address));
    if !is_trusted(&peer) {
        return peer;
    }
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .collect();
    let mut client = peer;
    for hop in hops.iter().rev() {
        match hop.parse::<IpAddr>() {
            Ok(address) => {
                client = address.to_canonical();
                if !is_trusted(&client) {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    client
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forwarded(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", value.parse().expect("header value"));
        headers
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("address")
    }

    #[test]
    fn only_trusted_proxies_name_the_client() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().expect("net")];
        let headers = forwarded("203.0.113.9, 198.51.100.1, 10.0.0.7");
        // An untrusted peer is the client, whatever it claims.
        assert_eq!(
            client_of(ip("192.0.2.1"), &headers, &trusted),
            ip("192.0.2.1")
        );
        // A trusted one: the last address before the trusted hops, not the first.
        assert_eq!(
            client_of(ip("10.0.0.5"), &headers, &trusted),
            ip("198.51.100.1")
        );
        // Only trusted hops: the first of them.
        assert_eq!(
            client_of(ip("10.0.0.5"), &forwarded("10.1.1.1, 10.0.0.7"), &trusted),
            ip("10.1.1.1")
        );
        // Garbage stops the walk at the last trusted hop.
        assert_eq!(
            client_of(
                ip("10.0.0.5"),
                &forwarded("203.0.113.9, junk, 10.0.0.7"),
                &trusted
            ),
            ip("10.0.0.7")
        );
        assert_eq!(
            client_of(ip("10.0.0.5"), &HeaderMap::new(), &trusted),
            ip("10.0.0.5")
        );
        assert_eq!(client_of(ip("10.0.0.5"), &headers, &[]), ip("10.0.0.5"));
    }
}
