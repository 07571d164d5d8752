//! What the URLs that name several nodes share (`redis+sentinel://`, `redis+cluster://`):
//! `[user:password@]host:port[,host:port…]`, read into the redis crate's addresses and
//! credentials.

use redis::{ConnectionAddr, IntoConnectionInfo};

/// The part of such a URL between `://` and the path.
#[derive(Debug, PartialEq, Eq)]
pub struct Authority {
    /// `[user][:password]`, as the URL has it (percent-encoded).
    pub userinfo: Option<String>,
    /// host, port
    pub nodes: Vec<(String, u16)>,
}

impl Authority {
    /// `[userinfo@]host[:port][,host[:port]…]`, each without a port on `default_port`.
    /// Errors never echo the password.
    pub fn parse(authority: &str, default_port: u16) -> Result<Self, String> {
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo.to_owned()), hosts),
            None => (None, authority),
        };
        let nodes = hosts
            .split(',')
            .map(|node| host_port(node, default_port))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { userinfo, nodes })
    }

    /// The nodes as the redis crate addresses them, over TLS or not.
    pub fn addresses(&self, tls: bool) -> impl Iterator<Item = ConnectionAddr> + '_ {
        self.nodes.iter().map(move |(host, port)| {
            if tls {
                ConnectionAddr::TcpTls {
                    host: host.clone(),
                    port: *port,
                    insecure: false,
                    tls_params: None,
                }
            } else {
                ConnectionAddr::Tcp(host.clone(), *port)
            }
        })
    }

    /// The user name and password, percent-decoded as the redis crate reads a URL's.
    pub fn credentials(&self) -> redis::RedisResult<(Option<String>, Option<String>)> {
        let Some(userinfo) = &self.userinfo else {
            return Ok((None, None));
        };
        let info = format!("redis://{userinfo}@localhost/").into_connection_info()?;
        let settings = info.redis_settings();
        Ok((
            settings.username().map(str::to_owned),
            settings.password().map(str::to_owned),
        ))
    }
}

/// `host[:port]` or `[v6][:port]`, with `default_port` when none is given.
fn host_port(text: &str, default_port: u16) -> Result<(String, u16), String> {
    let (host, port) = match text.strip_prefix('[') {
        // [v6]:port
        Some(v6) => {
            let (host, rest) = v6
                .split_once(']')
                .ok_or_else(|| format!("{text:?} is not host:port"))?;
            (host, rest.strip_prefix(':'))
        }
        None => match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        },
    };
    if host.is_empty() {
        return Err(format!("{text:?} is not host:port"));
    }
    let port = match port {
        None => default_port,
        Some(port) => port
            .parse()
            .map_err(|_| format!("{text:?}: the port is not a number"))?,
    };
    Ok((host.to_owned(), port))
}
