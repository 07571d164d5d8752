//! The `sandgate admin` client: templates, saves, lists and deletes configurations, and
//! checks the server's HTTPS certificate.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::common::{Backend, RUNTIME_KEY, Sandgate};

use super::*;

/// Runs `sandgate admin <args>` against `sandgate`, feeding `stdin`.
async fn admin_cli(
    sandgate: &Sandgate,
    password: &str,
    args: &[&str],
    stdin: &[u8],
) -> (bool, String, String) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_sandgate"))
        .arg("admin")
        .args(args)
        .env("RUNTIME_API_URL", format!("http://{}", sandgate.address))
        .env("ADMIN_PASSWORD", password)
        .env_remove("API_KEY")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn sandgate admin");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin).await.expect("write stdin");
    drop(input);
    let output = child.wait_with_output().await.expect("sandgate admin");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_cli_templates_saves_lists_and_deletes() {
    let backend = Backend::embedded();
    let file = installer_file(V1_CURRENT);
    let sandgate = start(&backend, Some(&file), &[]).await;

    let (ok, out, err) = admin_cli(&sandgate, PASSWORD, &["list"], b"").await;
    assert!(ok, "{err}");
    let list: Value = serde_json::from_str(&out).expect("list is JSON");
    assert_eq!(list["configs"][0]["name"], "v1_current");
    // With API_KEY, listing needs no admin login (the password here is wrong).
    let (ok, out, err) =
        admin_cli(&sandgate, "wrong", &["--api-key", RUNTIME_KEY, "list"], b"").await;
    assert!(ok, "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).expect("JSON"), list);

    // `template v1_current --image X --count 2 | save custom`
    let (ok, template, err) = admin_cli(
        &sandgate,
        PASSWORD,
        &[
            "template",
            "v1_current",
            "--image",
            "ghcr.io/acme/custom:1",
            "--count",
            "2",
        ],
        b"",
    )
    .await;
    assert!(ok, "{err}");
    let body: Value = serde_json::from_str(&template).expect("template is JSON");
    assert_eq!(body["image"], "ghcr.io/acme/custom:1");
    assert_eq!(body["count"], 2);
    assert_eq!(body["working_dir"], "/workspace");
    assert!(body.get("name").is_none() && body.get("source").is_none());
    let (ok, saved, err) = admin_cli(
        &sandgate,
        PASSWORD,
        &["save", "custom"],
        template.as_bytes(),
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&saved).expect("saved is JSON")["source"],
        "db"
    );
    assert_eq!(
        listed(&sandgate).await,
        [entry("custom", "db", "ghcr.io/acme/custom:1", 2)]
    );

    let (ok, out, err) = admin_cli(&sandgate, PASSWORD, &["delete", "custom"], b"").await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "Configuration \"custom\" deleted successfully");

    // Failures print the server's detail and exit non-zero.
    let (ok, _, err) = admin_cli(&sandgate, PASSWORD, &["delete", "custom"], b"").await;
    assert!(!ok);
    assert!(err.contains("Configuration \"custom\" not found"), "{err}");
    let (ok, _, err) = admin_cli(&sandgate, "wrong", &["delete", "custom"], b"").await;
    assert!(!ok);
    assert!(err.contains("Invalid admin password"), "{err}");
    let (ok, _, err) = admin_cli(
        &sandgate,
        PASSWORD,
        &["save", "custom"],
        b"{\"image\": \"x\"}",
    )
    .await;
    assert!(!ok);
    assert!(err.contains("working_dir"), "{err}");
    let (ok, _, err) = admin_cli(
        &sandgate,
        PASSWORD,
        &["template", "nope", "--image", "x", "--count", "1"],
        b"",
    )
    .await;
    assert!(!ok);
    assert!(err.contains("no configuration named \"nope\""), "{err}");
}

/// An https server with a certificate issued by a test CA, answering every request with
/// an empty configuration list; the CA's PEM file.
async fn tls_server() -> (std::net::SocketAddr, tempfile::NamedTempFile) {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca =
        rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().expect("key"))
            .expect("CA");
    let leaf_key = rcgen::KeyPair::generate().expect("key");
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .expect("params")
        .signed_by(&leaf_key, &ca)
        .expect("leaf");
    let ca_file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(ca_file.path(), ca.pem()).expect("write CA");

    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
        )
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                // A client that refuses the certificate ends the handshake here.
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                while !request.windows(4).any(|window| window == b"\r\n\r\n") {
                    match tls.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(read) => request.extend_from_slice(&buffer[..read]),
                    }
                }
                let body = r#"{"configs":[]}"#;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                drop(tls.write_all(answer.as_bytes()).await);
                drop(tls.shutdown().await);
            });
        }
    });
    (address, ca_file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_cli_checks_https_certificates() {
    let (address, ca_file) = tls_server().await;
    let list = |trust: Option<&std::path::Path>| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_sandgate"));
        command
            .args(["admin", "--api-key", "k", "list"])
            .env("RUNTIME_API_URL", format!("https://{address}"))
            .env_remove("ADMIN_PASSWORD");
        match trust {
            Some(path) => command.env("SSL_CERT_FILE", path),
            None => command.env_remove("SSL_CERT_FILE"),
        };
        command.output()
    };
    let trusted = list(Some(ca_file.path())).await.expect("sandgate admin");
    assert!(
        trusted.status.success(),
        "{}",
        String::from_utf8_lossy(&trusted.stderr)
    );
    let out: Value = serde_json::from_slice(&trusted.stdout).expect("JSON");
    assert_eq!(out, json!({ "configs": [] }));

    let untrusted = list(None).await.expect("sandgate admin");
    assert!(!untrusted.status.success());
    let err = String::from_utf8_lossy(&untrusted.stderr);
    assert!(err.contains("certificate"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_cli_prints_the_audit_log_newest_first() {
    let backend = Backend::embedded();
    let sandgate = start(&backend, None, &[]).await;
    let token = login(&sandgate).await;
    for name in ["one", "two", "three"] {
        let config = json!({"image": format!("example/{name}:1"), "working_dir": "/w", "command": ["run"], "environment": {}, "count": 0});
        let (status, body) = put(&sandgate, &token, name, &config).await;
        assert_eq!(status, 200, "{body}");
    }
    // Two pages of the server's, as the CLI reads them: each entry once.
    let (ok, out, err) = admin_cli(&sandgate, PASSWORD, &["audit", "--limit", "2"], b"").await;
    assert!(ok, "{err}");
    let targets: Vec<String> = out
        .lines()
        .map(|line| {
            let entry: Value = serde_json::from_str(line).expect("a JSON line");
            assert_eq!(entry["action"], "warm_config.put", "{entry}");
            entry["target"].as_str().expect("target").to_owned()
        })
        .collect();
    assert_eq!(targets, ["three", "two"]);
    let (ok, out, err) = admin_cli(&sandgate, PASSWORD, &["audit"], b"").await;
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 3, "{out}");
    let (ok, _, err) = admin_cli(&sandgate, "wrong", &["audit"], b"").await;
    assert!(!ok && !err.is_empty(), "a wrong password fails: {err}");
}
