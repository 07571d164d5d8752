//! Where a model added at runtime may send its calls: never to this machine, the cloud's
//! metadata service, or a private network, unless the operator names the host
//! (`--gateway-allowed-upstream-hosts`). Entries of the configuration file are the
//! operator's own and go anywhere.
//!
//! The host is checked when the model is added (an address, or a name that is known to
//! be internal) and again at every connection: the guarded client's resolver drops the
//! addresses a name resolves to that are not allowed, so a name that resolves to
//! loopback (or is made to, later) is refused too. Added models never go through a proxy
//! (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` are ignored by their client): a proxy would
//! resolve the name itself, past this check. An added model that must go through one is
//! the configuration file's to add.
//!
//! And no call comes back through the gateway that sent it, however its entry came: each
//! call carries [`HOP_HEADER`] with the gateways it passed, and a gateway that finds
//! itself there (or too many others) refuses the call.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use http::{HeaderMap, HeaderName};
use sandgate_proto::special_addresses::SPECIAL_V4;

/// The gateways a call passed, one id each, comma-separated.
pub static HOP_HEADER: HeaderName = HeaderName::from_static("x-sandgate-hop");
/// Gateways one call may pass, at most.
const MAX_HOPS: usize = 8;

/// Names of cloud metadata services and of this machine, refused whatever they resolve to.
const INTERNAL_NAMES: [&str; 7] = [
    "localhost",
    "metadata",
    "metadata.google.internal",
    "metadata.goog",
    "metadata.azure.internal",
    "instance-data",
    "instance-data.ec2.internal",
];

/// Why an address may not be an added model's upstream, if it may not.
pub fn forbidden_address(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(ip) => forbidden_v4(ip),
        IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
            Some(mapped) => forbidden_v4(mapped),
            None => forbidden_v6(ip),
        },
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    SPECIAL_V4
        .iter()
        .find(|(network, length, _)| {
            let mask = u32::MAX.checked_shl(32 - u32::from(*length)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(*network)
        })
        .map(|(_, _, why)| *why)
}

/// The IPv4 address in the low 32 bits of `ip`.
fn low_v4(ip: Ipv6Addr) -> Ipv4Addr {
    let segments = ip.segments();
    Ipv4Addr::from((u32::from(segments[6]) << 16) | u32::from(segments[7]))
}

/// IPv6: only global unicast (2000::/3) may be reached, less IANA's special-purpose
/// blocks in it; an address that stands for an IPv4 one (mapped, compatible, NAT64's
/// 64:ff9b::/96) is judged as that address.
fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let segments = ip.segments();
    let first = segments[0];
    if ip.is_loopback() {
        Some("a loopback address")
    } else if ip.is_unspecified() {
        Some("an unspecified address")
    } else if segments[..6] == [0, 0, 0, 0, 0, 0] {
        // IPv4-compatible (deprecated), `::127.0.0.1` and the like.
        forbidden_v4(low_v4(ip))
    } else if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        // NAT64's well-known prefix reaches the IPv4 address it embeds.
        forbidden_v4(low_v4(ip))
    } else if first & 0xffc0 == 0xfe80 {
        Some("a link-local address")
    } else if first & 0xfe00 == 0xfc00 {
        Some("a private (unique local) address")
    } else if ip.is_multicast() {
        Some("a multicast address")
    } else if first & 0xe000 != 0x2000 {
        Some("a special-purpose address (not global unicast)")
    } else if first == 0x2001 && segments[1] < 0x0200 {
        Some("a special-purpose address (IETF protocol assignments, Teredo, benchmarking)")
    } else if first == 0x2001 && segments[1] == 0x0db8 || first & 0xfff0 == 0x3ff0 {
        Some("a documentation address")
    } else if first == 0x2002 {
        Some("a special-purpose address (6to4)")
    } else {
        None
    }
}

/// The hosts an operator allows added models to reach whatever their addresses.
#[derive(Clone, Debug, Default)]
pub struct AllowedHosts(Arc<[String]>);

impl AllowedHosts {
    pub fn new(hosts: impl IntoIterator<Item = String>) -> Self {
        Self(
            hosts
                .into_iter()
                .map(|host| normalized(&host))
                .filter(|host| !host.is_empty())
                .collect(),
        )
    }

    pub(crate) fn allows(&self, host: &str) -> bool {
        let host = normalized(host);
        self.0.contains(&host)
    }

    /// Why an added model may not call `host`, judged from its text alone (an address,
    /// or an internal name); `None` when it may, or when only its addresses can tell.
    pub fn refusal(&self, host: &str) -> Option<String> {
        if self.allows(host) {
            return None;
        }
        let name = normalized(host);
        if let Ok(ip) = name.parse::<IpAddr>() {
            return forbidden_address(ip).map(|why| format!("{host} is {why}"));
        }
        let internal = INTERNAL_NAMES.contains(&name.as_str()) || name.ends_with(".localhost");
        internal.then(|| format!("{host} names this machine or a cloud metadata service"))
    }
}

/// A host as compared: lower case, without a final dot.
fn normalized(host: &str) -> String {
    host.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// Whether a call already passed the gateway `id`, or too many: a loop.
pub fn looped(metadata: &tonic::metadata::MetadataMap, id: &str) -> bool {
    let headers: &HeaderMap = metadata.as_ref();
    let hops: Vec<&str> = headers
        .get_all(&HOP_HEADER)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .collect();
    hops.len() >= MAX_HOPS || hops.contains(&id)
}

/// The hop header a call leaves with: the hops it came with, and this gateway.
pub fn hop_value(headers: &HeaderMap, id: &str) -> Option<http::HeaderValue> {
    let mut hops: Vec<&str> = headers
        .get_all(&HOP_HEADER)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .collect();
    hops.push(id);
    http::HeaderValue::from_str(&hops.join(",")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_and_names_are_refused_unless_allowed() {
        let allowed = AllowedHosts::new(["LiteLLM.internal.".to_owned(), "10.0.0.7".to_owned()]);
        for refused in [
            "127.0.0.1",
            "0.0.0.0",
            "169.254.169.254",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "localhost",
            "LOCALHOST.",
            "api.localhost",
            "metadata.google.internal",
            "::1",
            "::ffff:127.0.0.1",
            "fe80::1",
            "fd00:ec2::254",
            "::",
            // IANA's special-purpose blocks.
            "240.0.0.1",
            "255.255.255.255",
            "198.18.0.1",
            "198.19.255.255",
            "192.0.0.8",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.9",
            "100.127.255.255",
            "0.1.2.3",
            "224.0.0.1",
            "239.255.255.250",
            "192.88.99.1",
            "64:ff9b::7f00:1",
            "64:ff9b::a00:1",
            "64:ff9b:1::1",
            "::ffff:198.18.0.1",
            "100::1",
            "2001:db8::1",
            "2001::1",
            "2001:2::1",
            "2002:7f00:1::1",
            "3fff::1",
            "fec0::1",
            "ff02::1",
            "5f00::1",
        ] {
            assert!(allowed.refusal(refused).is_some(), "{refused}");
        }
        for accepted in [
            "api.openai.com",
            "8.8.8.8",
            "litellm.internal",
            "10.0.0.7",
            "2606:4700::1",
            "1.1.1.1",
            "100.128.0.1",
            "198.20.0.1",
            "223.255.255.255",
            "64:ff9b::808:808",
            "2001:4860:4860::8888",
            "2a00:1450::1",
        ] {
            assert_eq!(allowed.refusal(accepted), None, "{accepted}");
        }
    }

    #[test]
    fn a_call_that_passed_this_gateway_or_too_many_is_a_loop() {
        let mut headers = HeaderMap::new();
        let looped = |headers: &HeaderMap, id| {
            looped(
                &tonic::metadata::MetadataMap::from_headers(headers.clone()),
                id,
            )
        };
        assert!(!looped(&headers, "me"));
        headers.insert(&HOP_HEADER, http::HeaderValue::from_static("other, me"));
        assert!(looped(&headers, "me"));
        assert!(!looped(&headers, "third"));
        assert_eq!(
            hop_value(&headers, "third")
                .as_ref()
                .map(|value| value.to_str().ok()),
            Some(Some("other, me,third"))
        );
        let many = (0..MAX_HOPS)
            .map(|hop| hop.to_string())
            .collect::<Vec<_>>()
            .join(",");
        headers.insert(
            &HOP_HEADER,
            http::HeaderValue::from_str(&many).unwrap_or_else(|_| unreachable!()),
        );
        assert!(looped(&headers, "new"));
    }
}
