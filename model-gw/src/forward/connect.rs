//! How a connection to an upstream is opened: resolved (through the guarded resolver for
//! models added at runtime, see `egress`), over TCP, through the environment's proxy
//! where it names one for the upstream (configured entries only), and over TLS for an
//! `https` upstream, with the system's roots.
//!
//! A plain `http` upstream behind a proxy is sent its requests through the proxy's
//! connection in absolute form (the proxy's `Proxy-Authorization` with them, see
//! [`Connector::proxy_auth`]); an `https` one is tunnelled (`CONNECT`) and the TLS
//! session runs through the tunnel, as curl and every HTTP client do.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderValue, Uri};
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use tower_service::Service;

use crate::egress::{AllowedHosts, forbidden_address};

pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The guarded resolver's refusal of an added model's upstream, in its words: found in a
/// failed connection's causes to tell the client why.
#[derive(Debug)]
pub(super) struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// The TCP connector, plain: the TLS layers wrap it.
type Tcp = HttpConnector<Resolver>;
type TcpStream = TokioIo<tokio::net::TcpStream>;

/// Opens connections to upstreams.
#[derive(Clone)]
pub(super) struct Connector {
    /// Plain or TLS, as the upstream's scheme says.
    direct: HttpsConnector<Tcp>,
    tls: Arc<rustls::ClientConfig>,
    /// The environment's proxies; `None` for the guarded client, which never uses one.
    proxies: Option<Arc<Matcher>>,
}

impl Connector {
    /// A connector giving up on a connection after `connect_timeout`; `allowed`: the
    /// guarded resolver's rules (no proxy), `None`: the system's resolver and proxies.
    pub(super) fn new(
        connect_timeout: Duration,
        guarded: Option<AllowedHosts>,
    ) -> Result<Self, String> {
        let proxies = guarded.is_none().then(|| Arc::new(Matcher::from_env()));
        let mut tcp = HttpConnector::new_with_resolver(Resolver { guarded });
        tcp.enforce_http(false);
        tcp.set_connect_timeout(Some(connect_timeout));
        tcp.set_nodelay(true);
        tcp.set_happy_eyeballs_timeout(Some(Duration::from_millis(300)));
        // As reqwest did: a long stream's connection behind a NAT is kept alive.
        tcp.set_keepalive(Some(Duration::from_secs(15)));
        tcp.set_keepalive_interval(Some(Duration::from_secs(15)));
        tcp.set_keepalive_retries(Some(3));
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let verifier = rustls_platform_verifier::Verifier::new(provider.clone())
            .map_err(|err| format!("cannot read the system's TLS roots: {err}"))?;
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|err| format!("cannot set up TLS: {err}"))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let tls = Arc::new(tls);
        Ok(Self {
            direct: HttpsConnector::from((tcp, tls.clone())),
            tls,
            proxies,
        })
    }

    /// The `Proxy-Authorization` a request to `uri` carries: set when a proxy with
    /// credentials is sent the request itself (a plain `http` upstream behind it).
    pub(super) fn proxy_auth(&self, uri: &Uri) -> Option<HeaderValue> {
        if uri.scheme() != Some(&http::uri::Scheme::HTTP) {
            return None;
        }
        let proxy = self.proxies.as_ref()?.intercept(uri)?;
        let mut auth = proxy.basic_auth()?.clone();
        auth.set_sensitive(true);
        Some(auth)
    }

    async fn connect(mut self, dst: Uri) -> Result<Conn, BoxError> {
        let Some(proxy) = self
            .proxies
            .as_ref()
            .and_then(|proxies| proxies.intercept(&dst))
        else {
            return Ok(Conn::Direct(Box::new(self.direct.call(dst).await?), false));
        };
        if dst.scheme() == Some(&http::uri::Scheme::HTTPS) {
            // Tunnelled through the proxy (itself reached over TLS when its URL says
            // `https`), then TLS to the upstream through the tunnel.
            let mut tunnel = Tunnel::new(proxy.uri().clone(), self.direct.clone());
            if let Some(auth) = proxy.basic_auth() {
                tunnel = tunnel.with_auth(auth.clone());
            }
            let mut tls = HttpsConnector::from((tunnel, self.tls.clone()));
            return Ok(Conn::Tunneled(Box::new(tls.call(dst).await?)));
        }
        // A plain upstream: the proxy is sent the request itself, in absolute form.
        let connection = self.direct.call(proxy.uri().clone()).await?;
        Ok(Conn::Direct(Box::new(connection), true))
    }
}

impl Service<Uri> for Connector {
    type Response = Conn;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        Box::pin(self.clone().connect(dst))
    }
}

/// A connection to an upstream, or to the proxy in front of it (boxed: a TLS session's
/// state is a kilobyte, allocated once per connection).
pub(super) enum Conn {
    /// To the upstream, or (`true`) to a proxy sent plain requests in absolute form.
    Direct(Box<MaybeHttpsStream<TcpStream>>, bool),
    /// TLS to the upstream through a proxy's tunnel.
    Tunneled(Box<MaybeHttpsStream<MaybeHttpsStream<TcpStream>>>),
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        match self {
            Self::Direct(io, proxied) => io.connected().proxy(*proxied),
            Self::Tunneled(io) => io.connected(),
        }
    }
}

/// Calls `$method` on the connection's stream, whichever it is.
macro_rules! on_stream {
    ($self:ident, $method:ident($($arg:expr),*)) => {
        match Pin::get_mut($self) {
            Conn::Direct(io, _) => Pin::new(io.as_mut()).$method($($arg),*),
            Conn::Tunneled(io) => Pin::new(io.as_mut()).$method($($arg),*),
        }
    };
}

impl Read for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        on_stream!(self, poll_read(cx, buf))
    }
}

impl Write for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        on_stream!(self, poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        on_stream!(self, poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        on_stream!(self, poll_shutdown(cx))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Direct(io, _) => io.is_write_vectored(),
            Self::Tunneled(io) => io.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        on_stream!(self, poll_write_vectored(cx, bufs))
    }
}

/// The system's resolver; for the guarded client, less the addresses an added model may
/// not reach (unless its host is allowed).
#[derive(Clone)]
pub(super) struct Resolver {
    guarded: Option<AllowedHosts>,
}

impl Service<Name> for Resolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let guarded = self.guarded.clone();
        Box::pin(async move {
            let host = name.as_str();
            // A name refused for what it is is not even resolved.
            if let Some(refusal) = guarded.as_ref().and_then(|allowed| allowed.refusal(host)) {
                return Err(Refused(refusal).into());
            }
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host, 0)).await?.collect();
            match guarded {
                Some(allowed) if !allowed.allows(host) => {
                    Ok(permitted_addresses(host, found)?.into_iter())
                }
                _ => Ok(found.into_iter()),
            }
        })
    }
}

/// The addresses of `host` an added model may reach: none is an error saying why.
fn permitted_addresses(host: &str, found: Vec<SocketAddr>) -> Result<Vec<SocketAddr>, BoxError> {
    let why = found
        .first()
        .and_then(|address| forbidden_address(address.ip()))
        .unwrap_or("no address");
    let permitted: Vec<SocketAddr> = found
        .into_iter()
        .filter(|address| forbidden_address(address.ip()).is_none())
        .collect();
    if permitted.is_empty() {
        tracing::warn!(host = %host, "an added model's upstream resolves to {why}; refused");
        return Err(Refused(format!(
            "{host} resolves to {why}, which added models may not reach"
        ))
        .into());
    }
    Ok(permitted)
}
