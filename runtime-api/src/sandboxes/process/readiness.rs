//! Whether a sandbox's process is ready: a server answers on its port, and it is the
//! sandbox's own (issue 50, point 4).
//!
//! Without a network of its own a sandbox's port is on the machine's loopback, where
//! another sandbox may listen on it while it is paused or before its server is up; in a
//! network of its own, pasta accepts on the port before the sandbox's server listens. So a
//! process is ready only once the server on its port *identifies* it, with the keys
//! Sandgate started it with, which nothing else can know (Sandgate gives them to that
//! process alone, and every resume rotates them). Where the port is on the machine's
//! loopback, the keys go to it only once the socket listening there is seen held by a
//! process of the sandbox (its PID namespace, `/proc`): a thief listening there would
//! otherwise be handed the key that opens the sandbox's agent-server once the thief has
//! gone. The agent-server then:
//! - the agent-server's session-key check, on every `/api/…` route of every release,
//!   takes its session key (an answer, or 503 while a dormant 1.34 waits for its
//!   `/api/init`) and refuses another (401);
//! - a dormant server of a release that answers 503 before it looks at the key (1.58)
//!   is asked at `POST /api/init` with its init key (its secret key) and a body that
//!   cannot initialise it: it judges the key first, 422 for its own, 401 for another.
//!
//! Once identified, the port is its server's for as long as the process runs, and a
//! cheaper probe follows it: an HTTP answer in a network of its own, a connection
//! accepted without.

use std::time::Duration;

use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::sandboxes::driver::SandboxKeys;
use crate::sandboxes::process_isolation::{group_members, namespace_members};

/// How long a probe of a known server waits for its answer.
const PROBE_TIMEOUT: Duration = Duration::from_millis(250);
/// How long an identity probe waits for each of its two answers: an agent-server that
/// just started answers its first request slowly.
const IDENTIFY_TIMEOUT: Duration = Duration::from_secs(2);
/// The route the identity probe asks: behind the session key on every agent-server
/// release, and cheap (a count of its conversations).
pub const IDENTITY_PATH: &str = "/api/conversations/count";
/// The agent-server's session-key header.
const SESSION_KEY_HEADER: &str = "X-Session-API-Key";
/// Where a dormant agent-server takes its configuration, behind its init key.
const INIT_PATH: &str = "/api/init";
const INIT_KEY_HEADER: &str = "X-Init-API-Key";
/// An init body no release accepts (not an object): the key is judged, nothing is set.
const NO_INIT: &str = "[]";

/// Whose the listener on a sandbox's port can be.
pub(super) enum PortOf {
    /// Its own network's: only its own processes listen behind it.
    OwnNetwork,
    /// The machine's loopback: its own once held by a process of the sandbox whose first
    /// process (Sandgate's child) is this one.
    Loopback(i32),
    /// The machine's loopback, its first process unknown (gone): never its own.
    Unknown,
}

/// How a sandbox's port is probed.
pub(super) enum Probe {
    /// Not identified since its process started: with these keys, its own, once the
    /// listener on its port is its own.
    Identify { keys: SandboxKeys, port_of: PortOf },
    /// Identified, in a network of its own: an HTTP answer.
    Answers,
    /// Identified, on the machine's loopback: a connection accepted.
    Accepts,
}

impl Probe {
    /// Whether `port` passes.
    pub(super) async fn passes(&self, client: &reqwest::Client, port: u16) -> bool {
        match self {
            Self::Identify { keys, port_of } => {
                let own = match port_of {
                    PortOf::OwnNetwork => true,
                    PortOf::Loopback(first) => listener_held_by_sandbox(port, *first),
                    PortOf::Unknown => false,
                };
                own && identifies(client, port, keys).await
            }
            Self::Answers => answers(port).await,
            Self::Accepts => accepts(port).await,
        }
    }
}

/// Whether the server on `port` takes the sandbox's `keys` and refuses keys nobody was
/// given.
async fn identifies(client: &reqwest::Client, port: u16, keys: &SandboxKeys) -> bool {
    let base = format!("http://127.0.0.1:{port}");
    let asked = |key: String| {
        client
            .get(format!("{base}{IDENTITY_PATH}"))
            .header(SESSION_KEY_HEADER, key)
    };
    let (own, other) = tokio::join!(
        status(asked(keys.session.clone())),
        status(asked(stranger()))
    );
    match (own, other) {
        (Some(own), Some(StatusCode::UNAUTHORIZED))
            if own.is_success() || own == StatusCode::SERVICE_UNAVAILABLE =>
        {
            true
        }
        (Some(StatusCode::SERVICE_UNAVAILABLE), Some(StatusCode::SERVICE_UNAVAILABLE)) => {
            let asked = |key: String| {
                client
                    .post(format!("{base}{INIT_PATH}"))
                    .header(INIT_KEY_HEADER, key)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(NO_INIT)
            };
            let (own, other) = tokio::join!(
                status(asked(keys.secret.clone())),
                status(asked(stranger()))
            );
            own == Some(StatusCode::UNPROCESSABLE_ENTITY) && other == Some(StatusCode::UNAUTHORIZED)
        }
        _ => false,
    }
}

/// Whether the socket listening on `port` (of this machine's network) is held by a
/// process of the sandbox whose first process is `first`: of its PID namespace, or of its
/// process group where it has none.
fn listener_held_by_sandbox(port: u16, first: i32) -> bool {
    let sockets = listening_sockets(port);
    if sockets.is_empty() {
        return false;
    }
    let members = namespace_members(first).unwrap_or_else(|| group_members(first));
    members.into_iter().any(|pid| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| {
                std::fs::read_link(fd.path()).is_ok_and(|target| {
                    sockets
                        .iter()
                        .any(|socket| target.as_os_str() == socket.as_str())
                })
            })
    })
}

/// The sockets (`socket:[inode]`, as a descriptor's link names them) listening on TCP
/// `port`, at any address, IPv4 or IPv6.
fn listening_sockets(port: u16) -> Vec<String> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    let local = fields.get(1)?.rsplit(':').next()?;
                    if fields.get(3) != Some(&LISTEN)
                        || u16::from_str_radix(local, 16).ok()? != port
                    {
                        return None;
                    }
                    Some(format!("socket:[{}]", fields.get(9)?))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A listening socket's state in `/proc/net/tcp`.
const LISTEN: &str = "0A";

/// A key nobody was given.
fn stranger() -> String {
    format!("not-a-key-{}", uuid::Uuid::new_v4().simple())
}

/// The status `request` is answered with, if it is within [`IDENTIFY_TIMEOUT`].
async fn status(request: reqwest::RequestBuilder) -> Option<StatusCode> {
    let answer = request.timeout(IDENTIFY_TIMEOUT).send().await.ok()?;
    Some(answer.status())
}

/// Whether an HTTP server answers on `port`: the start of a status line.
async fn answers(port: u16) -> bool {
    let exchange = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream
            .write_all(b"GET /alive HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await?;
        let mut head = [0_u8; 7];
        stream.read_exact(&mut head).await?;
        Ok::<_, std::io::Error>(&head == b"HTTP/1.")
    };
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, exchange).await,
        Ok(Ok(true))
    )
}

/// Whether something accepts connections on `port`.
async fn accepts(port: u16) -> bool {
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, TcpStream::connect(("127.0.0.1", port))).await,
        Ok(Ok(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server on a port of its own that answers each request by `answer` of its head
    /// (request line and headers, lower case); its port.
    async fn server(answer: fn(&str) -> u16) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buffer = [0_u8; 1024];
                    while !head.windows(4).any(|end| end == b"\r\n\r\n") {
                        match stream.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(read) => head.extend_from_slice(&buffer[..read]),
                        }
                    }
                    let status = answer(&String::from_utf8_lossy(&head).to_ascii_lowercase());
                    let reply = format!(
                        "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    );
                    let _ = stream.write_all(reply.as_bytes()).await;
                });
            }
        });
        port
    }

    /// Whether `head` carries `header` with `value`.
    fn carries(head: &str, header: &str, value: &str) -> bool {
        head.lines().any(|line| {
            line.split_once(':')
                .is_some_and(|(name, sent)| name == header && sent.trim() == value)
        })
    }

    fn keys() -> SandboxKeys {
        SandboxKeys {
            session: "own-session".into(),
            secret: "own-secret".into(),
        }
    }

    /// An agent-server that runs, or a dormant 1.34: its session key, else 401.
    fn session_checked(head: &str, own: u16) -> u16 {
        if carries(head, "x-session-api-key", "own-session") {
            own
        } else {
            401
        }
    }

    /// A dormant 1.58: 503 on `/api/…` whatever the key; its init key judged first.
    fn gated(head: &str) -> u16 {
        if !head.starts_with("post /api/init ") {
            503
        } else if carries(head, "x-init-api-key", "own-secret") {
            422
        } else {
            401
        }
    }

    #[tokio::test]
    async fn only_the_server_holding_the_sandbox_s_keys_identifies_it() {
        let client = reqwest::Client::new();
        let own = Probe::Identify {
            keys: keys(),
            port_of: PortOf::OwnNetwork,
        };
        let running = server(|head| session_checked(head, 200)).await;
        let dormant = server(|head| session_checked(head, 503)).await;
        let dormant_gated = server(gated).await;
        for port in [running, dormant, dormant_gated] {
            assert!(own.passes(&client, port).await, "{port}");
        }
        // Another sandbox's keys are not these.
        let another = Probe::Identify {
            keys: SandboxKeys {
                session: "another".into(),
                secret: "another".into(),
            },
            port_of: PortOf::OwnNetwork,
        };
        for port in [running, dormant, dormant_gated] {
            assert!(!another.passes(&client, port).await, "{port}");
        }
        // A thief cannot know the keys: it answers every request alike.
        for thief in [
            |_: &str| 200,
            |_: &str| 401,
            |_: &str| 404,
            |_: &str| 422,
            |_: &str| 503,
        ] {
            assert!(!own.passes(&client, server(thief).await).await);
        }
        // Nothing listening.
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = closed.local_addr().expect("addr").port();
        drop(closed);
        assert!(!own.passes(&client, port).await);
    }

    #[tokio::test]
    async fn a_listener_counts_as_the_sandbox_s_only_when_one_of_its_processes_holds_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        // This test's process group holds it (a sandbox without a PID namespace of its own).
        let group = rustix::process::getpgrp().as_raw_nonzero().get();
        assert!(listener_held_by_sandbox(port, group));
        // Another group does not, nor does anyone hold a port nobody listens on.
        assert!(!listener_held_by_sandbox(port, i32::MAX - 1));
        drop(listener);
        assert!(!listener_held_by_sandbox(port, group));
        // And no key is sent to a listener that is not the sandbox's.
        let port = server(|head| session_checked(head, 200)).await;
        for port_of in [PortOf::Loopback(i32::MAX - 1), PortOf::Unknown] {
            let probe = Probe::Identify {
                keys: keys(),
                port_of,
            };
            assert!(!probe.passes(&reqwest::Client::new(), port).await);
        }
        let probe = Probe::Identify {
            keys: keys(),
            port_of: PortOf::Loopback(group),
        };
        assert!(probe.passes(&reqwest::Client::new(), port).await, "its own");
    }
}
