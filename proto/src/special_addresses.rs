//! IANA's special-purpose address blocks: what no call to the internet needs to reach.
//! The model gateway refuses them as an added model's upstream (`sandgate-model-gw`'s
//! `egress`), the process driver's sandboxes cannot route to them.

use std::net::Ipv4Addr;

/// IANA's IPv4 special-purpose blocks (and multicast), none of them a host on the
/// internet: `(network, prefix length, what it is)`. Checked in order.
pub const SPECIAL_V4: [(Ipv4Addr, u8, &str); 19] = [
    (Ipv4Addr::new(127, 0, 0, 0), 8, "a loopback address"),
    (
        Ipv4Addr::new(0, 0, 0, 0),
        8,
        "an unspecified address (\"this network\")",
    ),
    (
        Ipv4Addr::new(169, 254, 0, 0),
        16,
        "a link-local address (the cloud metadata service's)",
    ),
    (Ipv4Addr::new(10, 0, 0, 0), 8, "a private address"),
    (Ipv4Addr::new(172, 16, 0, 0), 12, "a private address"),
    (Ipv4Addr::new(192, 168, 0, 0), 16, "a private address"),
    (
        Ipv4Addr::new(100, 64, 0, 0),
        10,
        "a private address (shared address space)",
    ),
    (
        Ipv4Addr::new(192, 0, 0, 0),
        24,
        "a special-purpose address (IETF protocol assignments)",
    ),
    (Ipv4Addr::new(192, 0, 2, 0), 24, "a documentation address"),
    (
        Ipv4Addr::new(198, 51, 100, 0),
        24,
        "a documentation address",
    ),
    (Ipv4Addr::new(203, 0, 113, 0), 24, "a documentation address"),
    (Ipv4Addr::new(198, 18, 0, 0), 15, "a benchmarking address"),
    (
        Ipv4Addr::new(192, 31, 196, 0),
        24,
        "a special-purpose address (AS112)",
    ),
    (
        Ipv4Addr::new(192, 175, 48, 0),
        24,
        "a special-purpose address (AS112)",
    ),
    (
        Ipv4Addr::new(192, 52, 193, 0),
        24,
        "a special-purpose address (AMT)",
    ),
    (
        Ipv4Addr::new(192, 88, 99, 0),
        24,
        "a special-purpose address (6to4 relay anycast)",
    ),
    (
        Ipv4Addr::new(224, 0, 0, 0),
        4,
        "a broadcast or multicast address",
    ),
    (
        Ipv4Addr::new(255, 255, 255, 255),
        32,
        "a broadcast or multicast address",
    ),
    (Ipv4Addr::new(240, 0, 0, 0), 4, "a reserved address"),
];

/// The IPv6 blocks outside the internet's: all but global unicast (`2000::/3`), and the
/// special-purpose blocks in it (IETF assignments, Teredo and benchmarking, documentation,
/// 6to4), as `(network, prefix length)`. Loopback and link-local fall in the first.
pub const SPECIAL_V6: [(&str, u8); 7] = [
    ("::", 3),
    ("4000::", 2),
    ("8000::", 1),
    ("2001::", 23),
    ("2001:db8::", 32),
    ("2002::", 16),
    ("3ff0::", 12),
];
