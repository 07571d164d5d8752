//! How configured entries reach their upstreams: over TLS, checked against the system's
//! roots (`SSL_CERT_FILE` here), and through the egress proxy the environment names, with
//! its credentials: a plain upstream is sent its requests through the proxy, an `https`
//! one is tunnelled (`CONNECT`) and its TLS runs through the tunnel.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{FakeUpstream, MASTER_KEY, UPSTREAM_KEY};
use crate::common::SandgateProcess;

/// What the proxy was asked: each connection's request line and `Proxy-Authorization`.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A forward proxy on loopback: `CONNECT host:port` is tunnelled, any other request is
/// passed (in absolute form, as it came) to the host its URI names.
async fn proxy() -> (SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let seen = Seen::default();
    let recorded = seen.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(relay(client, recorded.clone()));
        }
    });
    (address, seen)
}

async fn relay(mut client: TcpStream, seen: Seen) {
    let mut head = Vec::new();
    let mut buffer = [0u8; 4096];
    let end = loop {
        match client.read(&mut buffer).await {
            Ok(read @ 1..) => head.extend_from_slice(&buffer[..read]),
            _ => return,
        }
        if let Some(at) = head.windows(4).position(|window| window == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let text = String::from_utf8_lossy(&head[..end]).into_owned();
    let line = text.lines().next().unwrap_or_default().to_owned();
    let auth = text.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("proxy-authorization")
            .then(|| value.trim().to_owned())
    });
    seen.lock().expect("seen").push((line.clone(), auth));
    let mut words = line.split(' ');
    let (method, target) = (
        words.next().unwrap_or_default(),
        words.next().unwrap_or_default(),
    );
    let tunnel = method == "CONNECT";
    let host = if tunnel {
        target
    } else {
        let rest = target.strip_prefix("http://").unwrap_or(target);
        rest.split('/').next().unwrap_or_default()
    };
    let Ok(mut upstream) = TcpStream::connect(host).await else {
        return;
    };
    let sent = if tunnel {
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .and(upstream.write_all(&head[end..]).await)
    } else {
        upstream.write_all(&head).await
    };
    if sent.is_ok() {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    }
}

/// A TLS front for `target` on loopback, its certificate for 127.0.0.1 issued by a CA of
/// its own; the CA's PEM file is in the directory returned.
async fn tls_front(target: SocketAddr) -> (SocketAddr, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Sandgate egress test CA");
    let ca =
        rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().expect("key"))
            .expect("CA");
    std::fs::write(dir.path().join("ca.pem"), ca.pem()).expect("write the CA");
    let key = rcgen::KeyPair::generate().expect("key");
    let certificate = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .expect("params")
        .signed_by(&key, &ca)
        .expect("certificate");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(
        vec![certificate.der().clone()],
        rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("key"),
    )
    .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let (Ok(mut client), Ok(mut upstream)) = (
                    acceptor.accept(client).await,
                    TcpStream::connect(target).await,
                ) else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    (address, dir)
}

/// Sandgate with two configured entries, `plain` (http) and `tls` (https, trusted through
/// `SSL_CERT_FILE`), on the same upstream, and `envs`.
async fn gateway(
    upstream: &FakeUpstream,
    envs: &[(&str, &str)],
) -> (SandgateProcess, [tempfile::TempDir; 2]) {
    let upstream_address: SocketAddr = upstream
        .base()
        .trim_start_matches("http://")
        .parse()
        .expect("the upstream's address");
    let (front, certificates) = tls_front(upstream_address).await;
    let data = tempfile::tempdir().expect("temp dir");
    let config = data.path().join("gateway.yaml");
    std::fs::write(
        &config,
        format!(
            "model_list:\n  - model_name: plain\n    gateway_params: {{model: openai/m, api_base: \"{}/v1\", api_key: {UPSTREAM_KEY}}}\n  - model_name: tls\n    gateway_params: {{model: openai/m, api_base: \"https://{front}/v1\", api_key: {UPSTREAM_KEY}}}\n",
            upstream.base()
        ),
    )
    .expect("write the configuration");
    let (data_dir, config) = (
        data.path().display().to_string(),
        config.display().to_string(),
    );
    let ca = certificates.path().join("ca.pem").display().to_string();
    let mut all = vec![
        ("SANDGATE_DATA_DIR", data_dir.as_str()),
        ("PROXY_MASTER_KEY", MASTER_KEY),
        ("SSL_CERT_FILE", ca.as_str()),
    ];
    all.extend_from_slice(envs);
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--gateway-config",
        &config,
    ];
    let server = SandgateProcess::spawn(&args.map(str::to_owned), &all).await;
    (server, [data, certificates])
}

async fn chat(server: &SandgateProcess, model: &str) -> u16 {
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let answer = client
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(MASTER_KEY)
        .json(&json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .expect("chat");
    let status = answer.status().as_u16();
    assert_eq!(
        status,
        200,
        "{model}: {}",
        answer.text().await.unwrap_or_default()
    );
    status
}

/// Without a proxy, each entry is called directly, the `https` one over TLS checked
/// against the trusted CA; a CA the system does not trust is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_entries_reach_https_upstreams_with_the_systems_roots() {
    let upstream = FakeUpstream::start().await;
    let none = [("NO_PROXY", "*"), ("no_proxy", "*")];
    let (server, _files) = gateway(&upstream, &none).await;
    chat(&server, "plain").await;
    chat(&server, "tls").await;
    let recorded = upstream.all();
    assert_eq!(recorded.len(), 2, "both calls reached the upstream");
    for call in recorded {
        assert_eq!(call.path, "/v1/chat/completions");
        assert_eq!(
            call.headers
                .get("authorization")
                .map(|value| value.as_bytes()),
            Some(format!("Bearer {UPSTREAM_KEY}").as_bytes())
        );
    }
    // The same upstream behind a certificate no trusted CA issued: no connection.
    let (untrusted, _other) = gateway(&upstream, &[("SSL_CERT_FILE", "/dev/null")]).await;
    let answer = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
        .post(untrusted.url("/v1/chat/completions"))
        .bearer_auth(MASTER_KEY)
        .json(&json!({"model": "tls", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .expect("chat");
    assert_eq!(answer.status(), 502);
    assert_eq!(upstream.count(), 2, "nothing reached the upstream");
}

/// With `HTTP_PROXY` and `HTTPS_PROXY` naming a proxy with credentials, the plain entry's
/// call is sent to the proxy in absolute form and the `https` one tunnelled, each with the
/// proxy's `Proxy-Authorization`; both reach the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_entries_go_through_the_environments_proxy() {
    let upstream = FakeUpstream::start().await;
    let (proxy, seen) = proxy().await;
    let proxy_url = format!("http://egress:s3cret@{proxy}");
    let envs = [
        ("HTTP_PROXY", proxy_url.as_str()),
        ("HTTPS_PROXY", proxy_url.as_str()),
        ("http_proxy", proxy_url.as_str()),
        ("https_proxy", proxy_url.as_str()),
        ("NO_PROXY", ""),
        ("no_proxy", ""),
    ];
    let (server, _files) = gateway(&upstream, &envs).await;
    chat(&server, "plain").await;
    chat(&server, "tls").await;
    assert_eq!(upstream.count(), 2, "both calls reached the upstream");
    let seen = seen.lock().expect("seen").clone();
    // "egress:s3cret", as Basic credentials.
    let auth = Some("Basic ZWdyZXNzOnMzY3JldA==".to_owned());
    let plain = format!("POST {}/v1/chat/completions HTTP/1.1", upstream.base());
    assert!(seen.contains(&(plain, auth.clone())), "{seen:?}");
    assert!(
        seen.iter()
            .any(|(line, with)| line.starts_with("CONNECT 127.0.0.1:") && *with == auth),
        "{seen:?}"
    );
}
