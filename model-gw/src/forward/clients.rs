//! The upstream clients: a pair (configured upstreams, and models added at runtime behind
//! the guarded resolver) for each thread that forwards calls.
//!
//! A pooled connection's I/O is driven by a task on the runtime that opened it. The HTTP
//! server serves each client connection on one thread from start to end
//! (`sandgate::http_server`); a call that took an upstream connection opened on another
//! thread would hop to it and back for every read and write, as calls did when every
//! thread shared one pool. With a pool per thread, a call's upstream connection is
//! driven where the call runs, as nginx's workers each keep their own upstream
//! connections.

use std::sync::Arc;
use std::time::Duration;

use thread_local::ThreadLocal;

use crate::egress::{AllowedHosts, GuardedResolver};

#[derive(Clone)]
struct Pair {
    /// Configured upstreams: the system's resolver and proxies.
    plain: reqwest::Client,
    /// Models added at runtime: their resolver keeps them outside (see `egress`).
    guarded: reqwest::Client,
}

/// How a thread's clients are built.
#[derive(Clone)]
struct Settings {
    connect_timeout: Duration,
    read_timeout: Duration,
    allowed: AllowedHosts,
}

impl Settings {
    fn build(&self) -> Result<Pair, String> {
        let builder = || {
            reqwest::Client::builder()
                .connect_timeout(self.connect_timeout)
                .read_timeout(self.read_timeout)
                .redirect(reqwest::redirect::Policy::none())
        };
        let built = |builder: reqwest::ClientBuilder| {
            builder
                .build()
                .map_err(|err| format!("cannot build the HTTP client: {err}"))
        };
        Ok(Pair {
            plain: built(builder())?,
            guarded: built(
                builder()
                    // No proxy: it would resolve the name past the guarded resolver.
                    .no_proxy()
                    .dns_resolver(Arc::new(GuardedResolver {
                        allowed: self.allowed.clone(),
                    })),
            )?,
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
    pub(super) fn get(&self, guarded: bool) -> &reqwest::Client {
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
                            let response = clients.get(false).get(&url).send().await?;
                            response.text().await
                        });
                        assert_eq!(answer.unwrap(), "ok");
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
