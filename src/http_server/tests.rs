use std::sync::Arc;

use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use super::*;

/// How long a test waits for what must happen before calling it hung.
const HANG: Duration = Duration::from_secs(30);

/// What a test holds of a server whose one route never answers.
struct InFlight {
    /// A client with a request in flight.
    client: TcpStream,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<io::Result<()>>,
}

/// A server whose one route never answers, and a client with a request in flight on it.
async fn request_in_flight(grace: Duration) -> InFlight {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let entered = Arc::new(Notify::new());
    let app = {
        let entered = entered.clone();
        Router::new().route(
            "/",
            get(move || {
                entered.notify_one();
                std::future::pending::<&'static str>()
            }),
        )
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let config = Config {
        grace,
        limits: Limits::default(),
        threads: Threads::Own,
    };
    let server = tokio::spawn(serve(
        listener,
        app,
        async {
            drop(stopped.await);
        },
        config,
    ));
    let mut client = TcpStream::connect(address).await.unwrap();
    client
        .write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .unwrap();
    tokio::time::timeout(HANG, entered.notified())
        .await
        .unwrap();
    InFlight {
        client,
        stop,
        server,
    }
}

/// Whether the server closes `client`'s connection (before `HANG`), and what it sent.
async fn closed(client: &mut TcpStream) -> Option<Vec<u8>> {
    let mut rest = Vec::new();
    let read = tokio::time::timeout(HANG, client.read_to_end(&mut rest)).await;
    read.is_ok().then_some(rest)
}

/// The serving threads outlive a server; its connections do not: a request still in
/// flight when the grace period ends is cut, its connection closed.
#[tokio::test]
async fn a_request_past_the_grace_period_is_cut() {
    let mut in_flight = request_in_flight(Duration::from_millis(10)).await;
    in_flight.stop.send(()).unwrap();
    let rest = closed(&mut in_flight.client).await;
    assert_eq!(
        rest.as_deref(),
        Some(&[][..]),
        "the connection was not closed"
    );
    in_flight.server.await.unwrap().unwrap();
}

/// A server dropped (its task aborted with its runtime, say) ends its connections too.
#[tokio::test]
async fn a_server_dropped_ends_its_connections() {
    let mut in_flight = request_in_flight(HANG).await;
    in_flight.server.abort();
    let rest = closed(&mut in_flight.client).await;
    assert!(rest.is_some(), "the connection was not closed");
}

/// A server serving `app` until dropped, and its address.
async fn serving(app: Router) -> (SocketAddr, tokio::task::JoinHandle<io::Result<()>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let config = Config {
        grace: HANG,
        limits: Limits::default(),
        threads: Threads::Own,
    };
    let server = tokio::spawn(serve(listener, app, std::future::pending(), config));
    (address, server)
}

/// Each server has serving threads of its own: one whose every thread is held (a request
/// blocking its thread on each) does not hold another server's requests, as it did when
/// every server of a process shared one set of threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_threads_are_all_held_does_not_hold_another() {
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let release = Arc::new(std::sync::Barrier::new(threads + 1));
    let (entered, mut entries) = tokio::sync::mpsc::unbounded_channel::<()>();
    let held = {
        let release = release.clone();
        Router::new().route(
            "/",
            get(move || {
                let (release, entered) = (release.clone(), entered.clone());
                async move {
                    entered.send(()).unwrap_or_default();
                    // Holds its serving thread until the test lets it go.
                    release.wait();
                    "released"
                }
            }),
        )
    };
    let (held_address, held_server) = serving(held).await;
    let mut clients = Vec::new();
    for _ in 0..threads {
        // One at a time: each connection goes to the thread serving the fewest.
        let mut client = TcpStream::connect(held_address).await.unwrap();
        client
            .write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
            .await
            .unwrap();
        tokio::time::timeout(HANG, entries.recv())
            .await
            .expect("the request reached its handler");
        clients.push(client);
    }

    let (other_address, other_server) =
        serving(Router::new().route("/", get(|| async { "ok" }))).await;
    let mut client = TcpStream::connect(other_address).await.unwrap();
    client
        .write_all(b"GET / HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(HANG, client.read_to_end(&mut answer)).await;
    let released = tokio::task::spawn_blocking(move || {
        release.wait();
    });
    assert!(read.is_ok(), "the other server's request was held");
    assert!(
        answer.starts_with(b"HTTP/1.1 200 OK"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    released.await.unwrap();
    held_server.abort();
    other_server.abort();
}
