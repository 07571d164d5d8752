//! Redis behind Sentinel: `redis+sentinel://[user:password@]host:port[,host:port…]/<master>`
//! (`rediss+sentinel://` for TLS to the sentinels and the servers). The sentinels name the
//! primary; the store connects to it, and a watcher follows it: every
//! [`CHECK_INTERVAL`] it asks the connected server its `ROLE`, and when that is not a
//! primary (a failover demoted it) or it does not answer (it died), it asks the sentinels
//! again and moves every later call to the primary they name. Credentials and the
//! database number are the servers'; the sentinels are asked without them.

use std::sync::{PoisonError, RwLock, Weak};
use std::time::Duration;

use redis::TlsMode;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};

use super::nodes::Authority;
use super::{Primary, RedisTls};

/// How often the watcher checks that the connected server is still the primary.
const CHECK_INTERVAL: Duration = Duration::from_millis(500);

/// The sentinels' default port.
const SENTINEL_PORT: u16 = 26379;

/// What a Sentinel URL names.
#[derive(Debug, PartialEq, Eq)]
pub struct SentinelUrl {
    pub tls: bool,
    /// The sentinels, and the servers' credentials.
    pub sentinels: Authority,
    pub master: String,
    db: i64,
}

/// `url` as a Sentinel URL: `None` when it is not one, an error (never echoing a
/// password) when it is one that does not parse.
pub fn parse(url: &str) -> Option<Result<SentinelUrl, String>> {
    let (scheme, rest) = url.split_once("://")?;
    let tls = match scheme {
        "redis+sentinel" => false,
        "rediss+sentinel" => true,
        _ => return None,
    };
    Some(parse_rest(tls, rest))
}

fn parse_rest(tls: bool, rest: &str) -> Result<SentinelUrl, String> {
    let (authority, path) = rest
        .split_once('/')
        .ok_or("no master name: write …/<master-name> after the sentinels")?;
    let sentinels = Authority::parse(authority, SENTINEL_PORT)?;
    let mut segments = path.split('/');
    let master = segments.next().unwrap_or_default().to_owned();
    if master.is_empty() || master.contains(['?', '#']) {
        return Err("no master name: write …/<master-name> after the sentinels".to_owned());
    }
    let db = match segments.next() {
        None | Some("") => 0,
        Some(db) => db
            .parse()
            .map_err(|_| format!("database {db:?} is not a number"))?,
    };
    Ok(SentinelUrl {
        tls,
        sentinels,
        master,
        db,
    })
}

impl SentinelUrl {
    /// A client of the sentinels that names the primary, with the servers' credentials,
    /// database and TLS material.
    pub fn client(&self, tls: &RedisTls) -> redis::RedisResult<SentinelClient> {
        let mut builder = SentinelClientBuilder::new(
            self.sentinels.addresses(self.tls),
            &self.master,
            SentinelServerType::Master,
        )?
        .set_client_to_redis_db(self.db);
        let (username, password) = self.sentinels.credentials()?;
        if let Some(username) = username {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = password {
            builder = builder.set_client_to_redis_password(password);
        }
        if self.tls {
            builder = builder
                .set_client_to_redis_tls_mode(TlsMode::Secure)
                .set_client_to_sentinel_tls_mode(TlsMode::Secure);
            if let Some(certificates) = tls.certificates() {
                builder = builder
                    .set_client_to_redis_certificates(certificates.clone())
                    .set_client_to_sentinel_certificates(certificates);
            }
        }
        builder.build()
    }
}

/// Whether `connection` is to a primary (`ROLE` says `master`).
pub async fn is_primary(connection: &mut impl redis::aio::ConnectionLike) -> bool {
    let role: redis::RedisResult<Vec<redis::Value>> =
        redis::cmd("ROLE").query_async(connection).await;
    matches!(
        role.as_deref(),
        Ok([redis::Value::BulkString(role), ..]) if role == b"master"
    )
}

/// Follows the primary the sentinels name, for as long as the store lives: see the
/// module's documentation.
pub async fn follow_primary(primary: Weak<RwLock<Primary>>, mut sentinels: SentinelClient) {
    let mut warned = false;
    loop {
        tokio::time::sleep(CHECK_INTERVAL).await;
        let Some(shared) = primary.upgrade() else {
            return;
        };
        let (mut connection, lanes) = {
            let current = shared.read().unwrap_or_else(PoisonError::into_inner);
            (current.connection.clone(), current.lanes.len())
        };
        if is_primary(&mut connection).await {
            continue;
        }
        let opened = match sentinels.async_get_client().await {
            Ok(client) => Primary::open(client, lanes).await,
            Err(err) => Err(err),
        };
        match opened {
            Ok(next) => {
                tracing::info!(primary = %next.address(), "following the Redis primary the sentinels name");
                *shared.write().unwrap_or_else(PoisonError::into_inner) = next;
                warned = false;
            }
            Err(err) if !warned => {
                tracing::warn!(error = %err, "the Redis primary is gone and the sentinels name no reachable one yet");
                warned = true;
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_urls_name_their_sentinels_master_and_database() {
        let parsed = parse("redis+sentinel://:pw@s1:26380,[::1]:26381,s3/mymaster/2");
        assert_eq!(
            parsed,
            Some(Ok(SentinelUrl {
                tls: false,
                sentinels: Authority {
                    userinfo: Some(":pw".into()),
                    nodes: vec![
                        ("s1".into(), 26380),
                        ("::1".into(), 26381),
                        ("s3".into(), SENTINEL_PORT)
                    ],
                },
                master: "mymaster".into(),
                db: 2,
            }))
        );
        assert!(matches!(
            parse("rediss+sentinel://s1/primary"),
            Some(Ok(SentinelUrl { tls: true, .. }))
        ));
        assert_eq!(parse("redis://host:6379"), None);
        for bad in [
            "redis+sentinel://s1:26379",
            "redis+sentinel://s1:26379/",
            "redis+sentinel://s1:port/m",
            "redis+sentinel://:pw@/m",
            "redis+sentinel://s1/m/zero",
        ] {
            let err = parse(bad).and_then(Result::err).unwrap_or_default();
            assert!(!err.is_empty(), "{bad}");
            assert!(!err.contains("pw"), "{err}");
        }
    }
}
