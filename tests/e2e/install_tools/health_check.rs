//! `health-check`, the kubelet's probe over HTTP and gRPC: exit 0 on a healthy server,
//! one line and exit 1 on a closed port, an error status or past its timeout.

use std::time::{Duration, Instant};

use tokio::net::TcpListener;

use super::stderr;
use crate::common::{Backend, Sandgate, run_sandgate};

async fn health_check(args: &[&str]) -> std::process::Output {
    let mut argv = vec!["health-check"];
    argv.extend_from_slice(args);
    run_sandgate(&argv, &[]).await
}

/// A port nothing listens on.
async fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    listener.local_addr().expect("address").port()
}

#[tokio::test]
async fn health_check_passes_on_a_healthy_serve_over_http_and_grpc() {
    let backend = Backend::embedded();
    let sandgate = Sandgate::start(&backend).await;
    let output = health_check(&["--http", &sandgate.url("/health")]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let output = health_check(&["--grpc", &format!("http://{}", sandgate.address)]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(output.stdout.is_empty() && output.stderr.is_empty());

    let output = health_check(&["--http", &sandgate.url("/no-such-path")]).await;
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("404"), "{}", stderr(&output));
    sandgate.stop().await;
}

#[tokio::test]
async fn health_check_fails_in_one_line_on_a_closed_port() {
    let port = closed_port().await;
    for args in [
        ["--http", &format!("http://127.0.0.1:{port}/health")],
        ["--grpc", &format!("http://127.0.0.1:{port}")],
    ] {
        let output = health_check(&args).await;
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let message = stderr(&output);
        assert_eq!(message.lines().count(), 1, "{message}");
        assert!(message.starts_with("sandgate health-check: "), "{message}");
        assert!(message.contains("refused"), "{message}");
    }
}

/// A server that accepts connections and never answers: the probe gives up at its timeout.
#[tokio::test]
async fn health_check_gives_up_at_its_timeout() {
    let silent = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = silent.local_addr().expect("address");
    for args in [
        ["--http", &format!("http://{address}/health")],
        ["--grpc", &format!("http://{address}")],
    ] {
        let started = Instant::now();
        let output = health_check(&[args[0], args[1], "--timeout", "0.5"]).await;
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert_eq!(stderr(&output).lines().count(), 1, "{}", stderr(&output));
        assert!(started.elapsed() < Duration::from_secs(3), "{args:?}");
    }
    drop(silent);
}
