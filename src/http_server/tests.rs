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
