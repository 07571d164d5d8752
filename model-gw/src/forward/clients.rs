//! The upstream clients: a pair (configured upstreams, and models added at runtime behind
//! the guarded resolver) for each thread that forwards calls, and the answers they get.
//!
//! A pooled connection's I/O is driven by a task on the runtime that opened it. The HTTP
//! server serves each client connection on one thread from start to end
//! (`sandgate::http_server`); a call that took an upstream connection opened on another
//! thread would hop to it and back for every read and write, as calls did when every
//! thread shared one pool. With a pool per thread, a call's upstream connection is
//! driven where the call runs, as nginx's workers each keep their own upstream
//! connections.
//!
//! hyper's pooled client, without a general-purpose client's layers around it (redirects,
//! retries, URL parsing of every request and answer): this gateway follows no redirect,
//! retries as its entries say, and knows its upstreams' URLs from their entries.

use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::client::legacy;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use thread_local::ThreadLocal;

use super::body::Pieces;
use super::connect::Connector;
use super::failure::UpstreamError;
use crate::egress::AllowedHosts;

/// How long an idle upstream connection stays in its pool.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// One pool of upstream connections.
#[derive(Clone)]
pub(super) struct Client {
    client: legacy::Client<Connector, Pieces>,
    connector: Connector,
    /// How long an answer's body may stay silent.
    read_timeout: Duration,
}

impl Client {
    fn new(connector: Connector, read_timeout: Duration) -> Self {
        let client = legacy::Client::builder(TokioExecutor::new())
            .pool_idle_timeout(IDLE_TIMEOUT)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .build(connector.clone());
        Self {
            client,
            connector,
            read_timeout,
        }
    }

    /// Sends `request` and waits for its answer's head (the caller bounds the wait).
    pub(super) async fn send(&self, mut request: Request<Pieces>) -> Result<Answer, UpstreamError> {
        if let Some(auth) = self.connector.proxy_auth(request.uri()) {
            request
                .headers_mut()
                .insert(http::header::PROXY_AUTHORIZATION, auth);
        }
        let response = self
            .client
            .request(request)
            .await
            .map_err(UpstreamError::of_send)?;
        let (head, body) = response.into_parts();
        Ok(Answer {
            status: head.status,
            headers: head.headers,
            body,
            read_timeout: self.read_timeout,
        })
    }
}

/// An upstream's answer: its head, and its body read as it arrives.
pub(crate) struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Incoming,
    read_timeout: Duration,
}

impl Answer {
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    pub(crate) fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The length its head announced, if it did.
    pub(crate) fn content_length(&self) -> Option<u64> {
        self.headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse().ok())
    }

    /// The body's next bytes, `None` at its end: a failure when the upstream stays silent
    /// longer than the read timeout, or past `deadline`.
    pub(crate) async fn chunk(
        &mut self,
        deadline: tokio::time::Instant,
    ) -> Result<Option<Bytes>, UpstreamError> {
        loop {
            let silent_by = tokio::time::Instant::now() + self.read_timeout;
            let by = deadline.min(silent_by);
            let Ok(frame) = tokio::time::timeout_at(by, self.body.frame()).await else {
                return Err(if by == deadline {
                    UpstreamError::deadline()
                } else {
                    UpstreamError::silent()
                });
            };
            if let Some(read) = data(frame) {
                return read;
            }
        }
    }

    /// What [`Self::chunk`] would give if the upstream connection has it already (its
    /// task has decoded it), without waiting; `None` when nothing is in yet.
    pub(crate) fn ready_chunk(&mut self) -> Option<Result<Option<Bytes>, UpstreamError>> {
        loop {
            if let Some(read) = data(self.body.frame().now_or_never()?) {
                return Some(read);
            }
        }
    }
}

/// A body's frame as its bytes (`None` at its end); `None` for a frame without any
/// (trailers, or an empty one): read on.
fn data(
    frame: Option<Result<hyper::body::Frame<Bytes>, hyper::Error>>,
) -> Option<Result<Option<Bytes>, UpstreamError>> {
    match frame {
        None => Some(Ok(None)),
        Some(Err(err)) => Some(Err(UpstreamError::of_body(err))),
        Some(Ok(frame)) => match frame.into_data() {
            Ok(data) if !data.is_empty() => Some(Ok(Some(data))),
            _ => None,
        },
    }
}

/// What a thread's pair is built from.
#[derive(Clone)]
struct Settings {
    connect_timeout: Duration,
    read_timeout: Duration,
    allowed: AllowedHosts,
}

#[derive(Clone)]
struct Pair {
    /// Configured upstreams: the system's resolver and proxies.
    plain: Client,
    /// Models added at runtime: their resolver keeps them outside (see `egress`).
    guarded: Client,
}

impl Settings {
    fn build(&self) -> Result<Pair, String> {
        let client = |allowed| -> Result<Client, String> {
            let connector = Connector::new(self.connect_timeout, allowed)?;
            Ok(Client::new(connector, self.read_timeout))
        };
        Ok(Pair {
            plain: client(None)?,
            guarded: client(Some(self.allowed.clone()))?,
        })
    }
}

/// Each thread's upstream clients, built at its first call.
pub(super) struct Clients {
    settings: Settings,
    per_thread: ThreadLocal<Pair>,
    /// Built at start, so that a client that cannot be built fails the start; a thread
    /// whose own could not be built (it was, with the same settings) shares it.
    first: Pair,
}

impl Clients {
    pub(super) fn new(
        connect_timeout: Duration,
        read_timeout: Duration,
        allowed: AllowedHosts,
    ) -> Result<Self, String> {
        let settings = Settings {
            connect_timeout,
            read_timeout,
            allowed,
        };
        let first = settings.build()?;
        Ok(Self {
            settings,
            per_thread: ThreadLocal::new(),
            first,
        })
    }

    /// This thread's client for an upstream, guarded or not.
    pub(super) fn get(&self, guarded: bool) -> &Client {
        let pair = self.per_thread.get_or(|| {
            self.settings.build().unwrap_or_else(|err| {
                tracing::debug!(error = %err, "sharing the first HTTP client");
                self.first.clone()
            })
        });
        if guarded { &pair.guarded } else { &pair.plain }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// An upstream answering every request of a keep-alive connection, counting the
    /// connections it accepted.
    async fn upstream(listener: TcpListener, accepted: Arc<AtomicUsize>) {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            accepted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                let mut chunk = [0u8; 1024];
                while let Ok(read @ 1..) = stream.read(&mut chunk).await {
                    buffer.extend_from_slice(&chunk[..read]);
                    while let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                        buffer.drain(..end + 4);
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if stream.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    }

    /// Two threads, each with a runtime of its own, call the same upstream twice, one
    /// after the other: each thread opens one connection and reuses it; no thread takes
    /// a connection another thread's runtime drives.
    #[test]
    fn each_thread_keeps_its_own_upstream_connections() {
        let clients = Arc::new(
            Clients::new(
                Duration::from_secs(10),
                Duration::from_secs(10),
                AllowedHosts::new(Vec::new()),
            )
            .unwrap(),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let server = {
            let accepted = accepted.clone();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async {
                    upstream(TcpListener::from_std(listener).unwrap(), accepted).await;
                });
            })
        };
        // The first thread's calls are done before the second's begin, and its runtime
        // (driving its connection) runs until both are done.
        let (first_done, all_done) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
        let threads: Vec<_> = [true, false]
            .into_iter()
            .map(|first| {
                let (clients, url) = (clients.clone(), url.clone());
                let (first_done, all_done) = (first_done.clone(), all_done.clone());
                std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    if !first {
                        first_done.wait();
                    }
                    for _ in 0..2 {
                        let answer = runtime.block_on(async {
                            let request =
                                Request::get(url.as_str()).body(Pieces::new(&[])).unwrap();
                            let mut answer = clients.get(false).send(request).await.unwrap();
                            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                            let mut body = Vec::new();
                            while let Some(chunk) = answer.chunk(deadline).await.unwrap() {
                                body.extend_from_slice(&chunk);
                            }
                            body
                        });
                        assert_eq!(answer, b"ok");
                    }
                    if first {
                        first_done.wait();
                    }
                    // Driving this thread's connection while the other thread calls.
                    runtime.block_on(async {
                        tokio::task::spawn_blocking(move || all_done.wait())
                            .await
                            .unwrap();
                    });
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        drop(server);
    }
}
