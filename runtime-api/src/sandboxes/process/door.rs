//! A sandbox's own way to Sandgate: in a network of its own, a sandbox reaches Sandgate's
//! port at its own `127.0.0.1`, and pasta leads it to a listener of Sandgate's that serves
//! that one sandbox and no other (its door). Every connection pasta makes for sandboxes
//! comes from this machine's `127.0.0.1`, so the TCP peer cannot tell one sandbox from
//! another; the listener can. The edge serves a door's connections as coming from the
//! door's peer address, an address no real peer has, written to the sandbox's record
//! (`source_address`) as a pod's IP is on Kubernetes: that is how the model gateway knows
//! a call comes from that sandbox, and whose conversation it is (`model-gw/src/session.rs`).
//!
//! A door is opened at each start and resume and closed when its process stops: a paused
//! sandbox has none, and a resumed one another, with another address.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

/// Opens doors: Sandgate's edge, which serves them (`sandgate serve`).
pub trait OpenDoor: Send + Sync {
    /// A new listener on this machine's loopback for one sandbox, served as coming from
    /// a peer address of its own.
    fn open(&self) -> std::io::Result<Door>;
}

/// One sandbox's listener: open while this value lives.
pub struct Door {
    /// Its port on this machine's `127.0.0.1`, which the sandbox's pasta forwards to.
    pub port: u16,
    /// The address its connections are served as coming from.
    pub peer: IpAddr,
    /// Closes the listener when dropped.
    _open: Box<dyn Send + Sync>,
}

impl Door {
    /// A door on `port`, served as `peer`, closed when `open` is dropped.
    pub fn new(port: u16, peer: IpAddr, open: impl Send + Sync + 'static) -> Self {
        Self {
            port,
            peer,
            _open: Box::new(open),
        }
    }
}

impl fmt::Debug for Door {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Door")
            .field("port", &self.port)
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

/// A door's peer address: in `100::/64`, IPv6's discard-only prefix (RFC 6666), which no
/// host is given and no packet comes from, so no real peer has it; the rest is `random`.
pub fn door_peer(random: u64) -> IpAddr {
    let [a, b, c, d] = [48, 32, 16, 0].map(|shift| (random >> shift) as u16);
    IpAddr::V6(Ipv6Addr::new(0x100, 0, 0, 0, a, b, c, d))
}

/// The doors of every process sandbox in a network of its own.
#[derive(Clone)]
pub struct Doors {
    /// Sandgate's port, as sandboxes name it (at their own `127.0.0.1`).
    pub inside: u16,
    pub opener: Arc<dyn OpenDoor>,
}

impl fmt::Debug for Doors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Doors")
            .field("inside", &self.inside)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_door_s_peer_is_in_the_discard_prefix_and_no_real_peer_s() {
        let peer = door_peer(0x0123_4567_89ab_cdef);
        assert_eq!(peer.to_string(), "100::123:4567:89ab:cdef");
        let IpAddr::V6(v6) = peer else {
            panic!("{peer}")
        };
        assert_eq!(v6.segments()[..4], [0x100, 0, 0, 0]);
        // The canonical form the gateway looks peers up by is the same text.
        assert_eq!(peer.to_canonical().to_string(), peer.to_string());
        assert!(!peer.is_loopback() && !peer.is_unspecified());
    }
}
