//! What of an HTTP request travels to the services as gRPC metadata: the caller's
//! credentials and the forwardable `x-*` headers, which the services decide the meaning
//! of. (Not the caller's `traceparent`: the edge's span is the gRPC call's parent, and the
//! caller's is the edge span's; the channel passes the edge span's on, see [`GrpcChannel`].)
//!
//! [`GrpcChannel`]: crate::GrpcChannel

use std::net::IpAddr;

use http::HeaderMap;
use sandgate_proto::{CLIENT_ADDRESS_METADATA, PEER_ADDRESS_METADATA};
use tonic::metadata::{MetadataMap, MetadataValue};

use crate::client::ClientAddress;

/// Headers that are credentials the services need (`api-key`: Azure OpenAI clients' way
/// to send the model gateway's key, `ocp-apim-subscription-key` Azure API Management's;
/// the others start with `x-`).
const FORWARDED: &[&str] = &["authorization", "api-key", "ocp-apim-subscription-key"];

/// Prefixes of provider headers the model gateway's header policy may forward.
const PROVIDER_PREFIXES: &[&str] = &["anthropic-"];

pub fn from_headers(headers: &HeaderMap) -> MetadataMap {
    let mut forwarded = HeaderMap::with_capacity(4);
    for (name, value) in headers {
        let name_text = name.as_str();
        // Only the edge says who the client is (`request_for`): never the client. A
        // `-bin` name would be binary metadata, which no forwarded header is.
        if name_text == CLIENT_ADDRESS_METADATA
            || name_text == PEER_ADDRESS_METADATA
            || name_text.ends_with("-bin")
        {
            continue;
        }
        if name_text.starts_with("x-")
            || FORWARDED.contains(&name_text)
            || PROVIDER_PREFIXES
                .iter()
                .any(|prefix| name_text.starts_with(prefix))
        {
            // Names and values as they are: a header is valid ASCII metadata already.
            forwarded.append(name.clone(), value.clone());
        }
    }
    MetadataMap::from_headers(forwarded)
}

/// A gRPC request carrying `message` and the forwarded headers.
pub fn request<T>(headers: &HeaderMap, message: T) -> tonic::Request<T> {
    tonic::Request::from_parts(from_headers(headers), Default::default(), message)
}

/// A gRPC request carrying `message`, the forwarded headers and the client's address, for
/// the calls a service limits per client.
pub fn request_for<T>(
    headers: &HeaderMap,
    ClientAddress(client): ClientAddress,
    message: T,
) -> tonic::Request<T> {
    let mut metadata = from_headers(headers);
    if let Some(value) = client
        .as_ref()
        .map(IpAddr::to_string)
        .and_then(|address| MetadataValue::try_from(address).ok())
    {
        metadata.insert(CLIENT_ADDRESS_METADATA, value);
    }
    tonic::Request::from_parts(metadata, Default::default(), message)
}

/// A gRPC request carrying `message`, the forwarded headers and the TCP peer the edge got
/// the request from (`PEER_ADDRESS_METADATA`), for the model gateway's calls: how a call
/// is known to come from a sandbox.
pub fn request_from_peer<T>(
    headers: &HeaderMap,
    peer: Option<IpAddr>,
    message: T,
) -> tonic::Request<T> {
    let mut metadata = from_headers(headers);
    if let Some(value) = peer
        .map(|peer| peer.to_canonical().to_string())
        .and_then(|address| MetadataValue::try_from(address).ok())
    {
        metadata.insert(PEER_ADDRESS_METADATA, value);
    }
    tonic::Request::from_parts(metadata, Default::default(), message)
}
