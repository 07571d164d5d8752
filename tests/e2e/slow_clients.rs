//! Clients that connect and then take their time: each is cut by a deadline, they cannot
//! use up the connections, and they do not hold back a shutdown. The real binary, raw TCP.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::SandgateProcess;
use crate::common::{Backend, serve_args};

/// How long a test waits for what must happen far sooner; only a hang reaches it.
const HANG: Duration = Duration::from_secs(30);

async fn serve(backend: &Backend, extra: &[&str]) -> SandgateProcess {
    let mut args = serve_args(backend);
    args.extend(extra.iter().map(|arg| (*arg).to_owned()));
    SandgateProcess::spawn(&args, &[]).await
}

/// Reads until the server closes the connection; returns what it sent.
async fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut received = Vec::new();
    let read = tokio::time::timeout(HANG, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the server never closed the connection");
    received
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_idle_timeout() {
    let backend = Backend::embedded();
    let sandgate = serve(&backend, &["--idle-timeout", "1"]).await;
    let mut silent = TcpStream::connect(&sandgate.address).await.unwrap();
    let opened = Instant::now();
    let received = read_to_close(&mut silent).await;
    assert!(
        received.is_empty(),
        "nothing was asked, nothing is answered"
    );
    assert!(
        opened.elapsed() >= Duration::from_millis(900),
        "closed before the idle timeout"
    );
}

#[tokio::test]
async fn a_keep_alive_connection_is_closed_once_idle_and_served_until_then() {
    let backend = Backend::embedded();
    let sandgate = serve(&backend, &["--idle-timeout", "1"]).await;
    let mut stream = TcpStream::connect(&sandgate.address).await.unwrap();
    stream
        .write_all(b"GET /health HTTP/1.1\r\nhost: sandgate\r\n\r\n")
        .await
        .unwrap();
    let received = read_to_close(&mut stream).await;
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}

#[tokio::test]
async fn headers_trickled_in_are_cut_at_the_header_deadline() {
    let backend = Backend::embedded();
    let sandgate = serve(
        &backend,
        &["--header-read-timeout", "1", "--idle-timeout", "60"],
    )
    .await;
    let mut stream = TcpStream::connect(&sandgate.address).await.unwrap();
    stream
        .write_all(b"GET /health HTTP/1.1\r\nhost: sandgate\r\n")
        .await
        .unwrap();
    // A header every 200 ms, never the blank line: the slowloris pattern. Each write
    // keeps the connection busy; only the deadline on the whole header ends it.
    let began = Instant::now();
    let mut cut = false;
    for n in 0..100 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let header = format!("x-slow-{n}: {n}\r\n");
        if stream.write_all(header.as_bytes()).await.is_err() {
            cut = true;
            break;
        }
        let mut probe = [0u8; 1];
        if let Ok(read) =
            tokio::time::timeout(Duration::from_millis(1), stream.read(&mut probe)).await
        {
            // EOF, a reset, or an error answer: the server is done with it.
            assert!(matches!(read, Ok(0) | Err(_)) || probe[0] == b'H');
            cut = true;
            break;
        }
    }
    assert!(
        cut,
        "20 s of trickled headers and the connection is still open"
    );
    assert!(began.elapsed() >= Duration::from_millis(900));
}

#[tokio::test]
async fn a_body_that_stops_arriving_fails_the_request_and_a_slow_steady_one_passes() {
    let backend = Backend::embedded();
    let sandgate = serve(&backend, &["--body-idle-timeout", "1"]).await;
    let body = crate::common::conversation(
        "7c5e7f0e-6a40-4a53-9c2f-1d9f1b0c2a11",
        "2026-01-01T00:00:00Z",
        "running",
    )
    .to_string();
    let body = body.as_bytes();
    let head = format!(
        "POST /api/v1/webhooks/conversations HTTP/1.1\r\nhost: sandgate\r\n\
         x-session-api-key: {}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        crate::common::WEBHOOK_KEY,
        body.len()
    );

    // Stalled: 10 bytes of the body, then nothing.
    let mut stalled = TcpStream::connect(&sandgate.address).await.unwrap();
    stalled.write_all(head.as_bytes()).await.unwrap();
    stalled.write_all(&body[..10]).await.unwrap();
    let answer = read_to_close(&mut stalled).await;
    let answer = String::from_utf8_lossy(&answer);
    let status: u16 = answer
        .get(9..12)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {answer:?}"));
    assert!((400..500).contains(&status), "{answer}");

    // Slow but steady: three parts 300 ms apart, each within the body deadline.
    let mut steady = TcpStream::connect(&sandgate.address).await.unwrap();
    steady.write_all(head.as_bytes()).await.unwrap();
    for part in body.chunks(body.len().div_ceil(3)) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        steady.write_all(part).await.unwrap();
    }
    let answer = read_to_close(&mut steady).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn idle_connections_past_the_cap_give_way_and_health_answers() {
    const CAP: usize = 8;
    const HOLDERS: usize = 60;
    let backend = Backend::embedded();
    let sandgate = serve(
        &backend,
        &[
            "--max-connections",
            &CAP.to_string(),
            "--idle-timeout",
            "600",
            "--header-read-timeout",
            "600",
        ],
    )
    .await;
    // Each holder sends half a request line and then nothing.
    let mut holders = Vec::new();
    for _ in 0..HOLDERS {
        let mut stream = TcpStream::connect(&sandgate.address).await.unwrap();
        stream.write_all(b"GET /hea").await.unwrap();
        holders.push(stream);
    }
    let client = reqwest::Client::new();
    let health = tokio::time::timeout(HANG, client.get(sandgate.url("/health")).send())
        .await
        .expect("/health answers while clients hold connections")
        .unwrap();
    assert_eq!(health.status(), 200);

    // The server holds at most CAP of them: the others were closed to make room.
    let mut closed = 0;
    for holder in &mut holders {
        let mut probe = [0u8; 1];
        if let Ok(read) =
            tokio::time::timeout(Duration::from_millis(20), holder.read(&mut probe)).await
        {
            assert!(matches!(read, Ok(0) | Err(_)), "a holder got an answer");
            closed += 1;
        }
    }
    assert!(
        closed >= HOLDERS - CAP,
        "{closed} of {HOLDERS} holders closed; the cap is {CAP}"
    );
}

#[tokio::test]
async fn shutdown_does_not_wait_for_idle_or_half_sent_connections() {
    let backend = Backend::embedded();
    let mut sandgate = serve(&backend, &["--shutdown-grace", "120"]).await;
    let mut idle = Vec::new();
    for n in 0..20 {
        let mut stream = TcpStream::connect(&sandgate.address).await.unwrap();
        match n % 3 {
            // Silent.
            0 => {}
            // Half a request's headers.
            1 => stream
                .write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n")
                .await
                .unwrap(),
            // A finished request, the connection kept alive.
            _ => {
                stream
                    .write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
                    .await
                    .unwrap();
                let mut buf = [0u8; 512];
                let n = stream.read(&mut buf).await.unwrap();
                assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
            }
        }
        idle.push(stream);
    }
    sandgate.signal_terminate();
    // The grace period is two minutes; nothing is in flight, so nothing waits for it.
    let code = sandgate.wait_exit(HANG).await;
    assert_eq!(code, Some(0), "{}", sandgate.log());
    assert!(
        !sandgate.log().contains("grace period over"),
        "{}",
        sandgate.log()
    );
    drop(idle);
}
