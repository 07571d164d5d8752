//! Redis Cluster: `redis+cluster://[user:password@]host:port[,host:port…]` (`rediss+cluster://`
//! for TLS). The nodes listed are seeds: the redis crate's cluster client learns the slot
//! map from them, follows `MOVED` and `ASK`, and learns it again after a failover.
//!
//! What the cluster changes in the store is its [`Layout`]: a command, script or pipeline
//! must stay within one slot, and the keys every call of a kind would share (the index of
//! all conversations, every sandbox) are spread over [`CLUSTER_BUCKETS`] hash tags, so
//! that their load spreads over the masters. Calls that read a whole index or every
//! sandbox ask each bucket, concurrently, and merge.

use redis::cluster::ClusterClientBuilder;
use redis::{IntoConnectionInfo, TlsMode};

use super::RedisTls;
use super::nodes::Authority;

/// Redis's default port.
const REDIS_PORT: u16 = 6379;

/// Buckets of the keys shared by a kind of record on a cluster. Part of the data's layout:
/// a cluster's data is read with the number it was written with.
pub const CLUSTER_BUCKETS: u16 = 16;

/// What a Cluster URL names.
#[derive(Debug, PartialEq, Eq)]
pub struct ClusterUrl {
    pub tls: bool,
    /// The seed nodes, and their credentials.
    pub nodes: Authority,
}

/// `url` as a Cluster URL: `None` when it is not one, an error (never echoing a password)
/// when it is one that does not parse.
pub fn parse(url: &str) -> Option<Result<ClusterUrl, String>> {
    let (scheme, rest) = url.split_once("://")?;
    let tls = match scheme {
        "redis+cluster" => false,
        "rediss+cluster" => true,
        _ => return None,
    };
    Some(parse_rest(tls, rest))
}

fn parse_rest(tls: bool, rest: &str) -> Result<ClusterUrl, String> {
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if !path.is_empty() {
        return Err(
            "a cluster has one database: nothing may follow the nodes but a final /".to_owned(),
        );
    }
    Ok(ClusterUrl {
        tls,
        nodes: Authority::parse(authority, REDIS_PORT)?,
    })
}

impl ClusterUrl {
    /// A client of the whole cluster.
    pub fn client(&self, tls: &RedisTls) -> redis::RedisResult<redis::cluster::ClusterClient> {
        let mut builder = ClusterClientBuilder::new(self.nodes.addresses(self.tls))
            .connection_timeout(std::time::Duration::from_secs(2))
            .response_timeout(std::time::Duration::from_secs(2))
            .retries(3);
        let (username, password) = self.nodes.credentials()?;
        if let Some(username) = username {
            builder = builder.username(username);
        }
        if let Some(password) = password {
            builder = builder.password(password);
        }
        if self.tls {
            builder = builder.tls(TlsMode::Secure);
            if let Some(certificates) = tls.certificates() {
                builder = builder.certs(certificates);
            }
        }
        builder.build()
    }

    /// A client of each seed node, for the Pub/Sub connection: a message published on any
    /// node of a cluster reaches the subscribers of every node.
    pub fn node_clients(&self, tls: &RedisTls) -> redis::RedisResult<Vec<redis::Client>> {
        let (username, password) = self.nodes.credentials()?;
        self.nodes
            .addresses(self.tls)
            .map(|addr| {
                let mut info = addr.into_connection_info()?;
                let mut settings = info.redis_settings().clone();
                if let Some(username) = &username {
                    settings = settings.set_username(username);
                }
                if let Some(password) = &password {
                    settings = settings.set_password(password);
                }
                info = info.set_redis_settings(settings);
                match tls.certificates() {
                    Some(certificates) => redis::Client::build_with_tls(info, certificates),
                    None => redis::Client::open(info),
                }
            })
            .collect()
    }
}

/// Where a record's keys live: one bucket of the kind's keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// 1 on one Redis (whose keys are those of the releases before clusters), else
    /// [`CLUSTER_BUCKETS`].
    buckets: u16,
}

impl Layout {
    /// One Redis (or Sentinel's primary): every key of a kind in one place, named as it
    /// always was.
    pub const SINGLE: Self = Self { buckets: 1 };
    /// A Redis Cluster.
    pub const CLUSTER: Self = Self {
        buckets: CLUSTER_BUCKETS,
    };

    pub fn is_cluster(self) -> bool {
        self.buckets > 1
    }

    /// Every bucket.
    pub fn buckets(self) -> impl Iterator<Item = Bucket> {
        (0..self.buckets).map(move |number| Bucket {
            number,
            cluster: self.is_cluster(),
        })
    }

    /// The bucket of the record with this id: FNV-1a, stable across releases and
    /// platforms, as the layout must be.
    pub fn bucket(self, id: &[u8]) -> Bucket {
        let hash = id.iter().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
        });
        Bucket {
            number: (hash % u64::from(self.buckets)) as u16,
            cluster: self.is_cluster(),
        }
    }
}

/// One bucket: on one Redis the only one, whose keys have no bucket in their names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    number: u16,
    cluster: bool,
}

impl Bucket {
    /// The hash tag of `kind`'s keys in this bucket: `{kind}` on one Redis, `{kind:N}` on a
    /// cluster.
    pub fn tag(self, kind: &str) -> String {
        if self.cluster {
            format!("{{{kind}:{}}}", self.number)
        } else {
            format!("{{{kind}}}")
        }
    }

    /// `sandgate:idx:<index>` on one Redis, `sandgate:idx:{N:<index>}` on a cluster.
    pub fn index_key(self, encoded: &str) -> String {
        if self.cluster {
            format!("sandgate:idx:{{{}:{encoded}}}", self.number)
        } else {
            format!("sandgate:idx:{encoded}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_name_their_nodes() {
        assert_eq!(
            parse("redis+cluster://:pw@n1:7000,[::1]:7001,n3/"),
            Some(Ok(ClusterUrl {
                tls: false,
                nodes: Authority {
                    userinfo: Some(":pw".into()),
                    nodes: vec![
                        ("n1".into(), 7000),
                        ("::1".into(), 7001),
                        ("n3".into(), REDIS_PORT)
                    ],
                },
            }))
        );
        assert!(matches!(
            parse("rediss+cluster://n1:7000"),
            Some(Ok(ClusterUrl { tls: true, .. }))
        ));
        assert_eq!(parse("redis://host:6379"), None);
        for bad in [
            "redis+cluster://n1:7000/2",
            "redis+cluster://n1:port",
            "redis+cluster://:pw@",
            "redis+cluster://n1,,n2",
        ] {
            let err = parse(bad).and_then(Result::err).unwrap_or_default();
            assert!(!err.is_empty(), "{bad}");
            assert!(!err.contains("pw"), "{err}");
        }
    }

    #[test]
    fn one_redis_keeps_the_key_names_it_always_had() {
        let bucket = Layout::SINGLE.bucket(b"any id");
        assert_eq!(Layout::SINGLE.buckets().collect::<Vec<_>>(), [bucket]);
        assert_eq!(bucket.tag("sandboxes"), "{sandboxes}");
        assert_eq!(bucket.index_key("owner:a"), "sandgate:idx:owner:a");
    }

    #[test]
    fn a_cluster_spreads_records_over_its_buckets() {
        let mut seen = std::collections::BTreeSet::new();
        for id in 0..1_000 {
            let bucket = Layout::CLUSTER.bucket(format!("runtime-{id}").as_bytes());
            assert_eq!(
                bucket,
                Layout::CLUSTER.bucket(format!("runtime-{id}").as_bytes())
            );
            seen.insert(bucket.tag("sandboxes"));
        }
        assert_eq!(seen.len(), usize::from(CLUSTER_BUCKETS));
        // Pinned (FNV-1a of "a" is af63dc4c8601ec8c): the layout must never change under
        // data already written.
        assert_eq!(
            Layout::CLUSTER.bucket(b"a").index_key("all"),
            format!("sandgate:idx:{{{}:all}}", 0xaf63_dc4c_8601_ec8c_u64 % 16)
        );
    }
}
