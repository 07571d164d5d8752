//! The certificates of a server that speaks TLS only: a CA, a server certificate for
//! 127.0.0.1 and a client certificate, and what a client needs to trust them.

use sandgate_store::RedisTls;

/// A CA, a server certificate for 127.0.0.1 and a client certificate it issued, as PEM
/// files in a directory of their own.
pub(super) struct Tls {
    dir: tempfile::TempDir,
    pub(super) client_auth: bool,
}

impl Tls {
    pub(super) fn issue(client_auth: bool) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        // Names of their own: OpenSSL (redis-server, checking the client's certificate)
        // takes a certificate whose subject is its issuer's for a self-signed one.
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "Sandgate test CA");
        let ca = rcgen::CertifiedIssuer::self_signed(
            ca_params,
            rcgen::KeyPair::generate().expect("key"),
        )
        .expect("CA");
        let write = |name: &str, pem: String| {
            std::fs::write(dir.path().join(name), pem).expect("write a PEM file");
        };
        write("ca.pem", ca.pem());
        for (name, subject) in [("server", "127.0.0.1"), ("client", "sandgate")] {
            let key = rcgen::KeyPair::generate().expect("key");
            let mut params =
                rcgen::CertificateParams::new(vec![subject.to_owned()]).expect("params");
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, subject);
            let certificate = params.signed_by(&key, &ca).expect("certificate");
            write(&format!("{name}.pem"), certificate.pem());
            write(&format!("{name}.key"), key.serialize_pem());
        }
        Self { dir, client_auth }
    }

    pub(super) fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    pub(super) fn client(&self) -> RedisTls {
        let read = |name: &str| std::fs::read(self.path(name)).expect("read a PEM file");
        RedisTls {
            ca_cert: Some(read("ca.pem")),
            client: self
                .client_auth
                .then(|| (read("client.pem"), read("client.key"))),
        }
    }
}
