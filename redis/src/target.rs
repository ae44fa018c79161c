//! Where the crate's connections go: one Redis server, or the master that a set of
//! Sentinels names (asked again on every new connection, so a failover is followed).

use std::sync::Arc;

use backstop_core::{Error, Result};
use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};
use redis::{IntoConnectionInfo, RedisResult};

/// The scheme of a URL naming Sentinels: `redis+sentinel://`.
pub const SENTINEL_SCHEME: &str = "redis+sentinel://";

/// The port a Sentinel listens on when its address names none.
const SENTINEL_PORT: u16 = 26379;

/// A Redis server or a Sentinel-watched master, parsed from a URL:
///
/// - `redis://[[user]:password@]host[:port][/db]`: one server (redis-rs's own URL);
/// - `rediss://…[?sslrootcert=<ca.pem>]`: one server over TLS (rustls), its certificate
///   checked against the CA file `sslrootcert` names (PostgreSQL's parameter), or
///   against the system's roots without it;
/// - `redis+sentinel://[[user]:password@]host[:port][,host[:port]…]/<master>[/db]`: the
///   master the Sentinels at those addresses (port 26379 by default) name `<master>`.
///   The credentials and database are the master's; the Sentinels are asked without
///   credentials.
#[derive(Clone)]
pub(crate) enum Target {
    Server(Box<redis::Client>),
    Sentinel(Arc<Watched>),
}

/// A master found through Sentinels.
pub(crate) struct Watched {
    sentinels: tokio::sync::Mutex<Sentinel>,
    master: String,
    node: SentinelNodeConnectionInfo,
}

impl Target {
    /// The target `url` names; a malformed URL is a `Config` error of `operation`.
    pub fn open(url: &str, operation: &'static str) -> Result<Self> {
        if url.starts_with(SENTINEL_SCHEME) {
            return Self::sentinel(url, operation);
        }
        let bad =
            |e: redis::RedisError| Error::config(operation, format!("invalid Redis URL: {e}"));
        if url.starts_with("rediss://") {
            let (url, ca) = without_root_cert(url);
            let root_cert = match ca {
                Some(path) => Some(std::fs::read(&path).map_err(|e| {
                    Error::config(operation, format!("cannot read sslrootcert {path}: {e}"))
                })?),
                None => None,
            };
            let certs = redis::TlsCertificates {
                client_tls: None,
                root_cert,
            };
            return redis::Client::build_with_tls(url, certs)
                .map(|c| Target::Server(Box::new(c)))
                .map_err(bad);
        }
        redis::Client::open(url)
            .map(|c| Target::Server(Box::new(c)))
            .map_err(bad)
    }

    fn sentinel(url: &str, operation: &'static str) -> Result<Self> {
        let bad = |why: &str| {
            Error::config(
                operation,
                format!(
                    "invalid Sentinel URL ({why}): expected \
                     redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/master[/db]"
                ),
            )
        };
        let rest = &url[SENTINEL_SCHEME.len()..];
        let (authority, path) = rest.split_once('/').ok_or_else(|| bad("no master name"))?;
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (master, db) = match path.split_once('/') {
            Some((m, d)) => (m, Some(d)),
            None => (path, None),
        };
        if master.is_empty() {
            return Err(bad("no master name"));
        }
        let mut sentinels = Vec::new();
        for host in hosts.split(',') {
            if host.is_empty() {
                return Err(bad("an empty address"));
            }
            let addr = if host.contains(':') {
                host.to_owned()
            } else {
                format!("{host}:{SENTINEL_PORT}")
            };
            let info = format!("redis://{addr}")
                .into_connection_info()
                .map_err(|e| bad(&e.to_string()))?;
            sentinels.push(info);
        }
        // the master's credentials and database, parsed as a plain URL's would be
        let node_url = match userinfo {
            Some(u) => format!("redis://{u}@localhost/{}", db.unwrap_or("0")),
            None => format!("redis://localhost/{}", db.unwrap_or("0")),
        };
        let node = node_url
            .into_connection_info()
            .map_err(|e| bad(&e.to_string()))?;
        let node = SentinelNodeConnectionInfo::default()
            .set_redis_connection_info(node.redis_settings().clone());
        let sentinels = Sentinel::build(sentinels).map_err(|e| bad(&e.to_string()))?;
        Ok(Target::Sentinel(Arc::new(Watched {
            sentinels: tokio::sync::Mutex::new(sentinels),
            master: master.to_owned(),
            node,
        })))
    }

    /// A client of the server, or of the master the Sentinels name now (one that
    /// answers `ROLE` as master).
    pub async fn client(&self) -> RedisResult<redis::Client> {
        match self {
            Target::Server(client) => Ok((**client).clone()),
            Target::Sentinel(w) => {
                let mut sentinels = w.sentinels.lock().await;
                sentinels.async_master_for(&w.master, Some(&w.node)).await
            }
        }
    }
}

/// `url` without its `sslrootcert` parameter, and the parameter's value.
fn without_root_cert(url: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), None);
    };
    let mut ca = None;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|p| match p.strip_prefix("sslrootcert=") {
            Some(path) => {
                ca = Some(path.to_owned());
                false
            }
            None => !p.is_empty(),
        })
        .collect();
    let url = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    (url, ca)
}

/// Whether `e` means the connection should be made again: it broke or timed out, or
/// the server is no longer the master (`READONLY`, `MASTERDOWN`: a failover moved it),
/// or no Sentinel named a master yet.
pub(crate) fn reconnect(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || matches!(
            e.kind(),
            ErrorKind::Server(ServerErrorKind::ReadOnly)
                | ErrorKind::Server(ServerErrorKind::MasterDown)
                | ErrorKind::MasterNameNotFoundBySentinel
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn master(url: &str) -> (String, String) {
        match Target::open(url, "test") {
            Ok(Target::Sentinel(w)) => {
                let info = w.node.clone();
                (w.master.clone(), format!("{info:?}"))
            }
            Ok(Target::Server(_)) => panic!("{url}: a server, not Sentinels"),
            Err(e) => panic!("{url}: {e}"),
        }
    }

    #[test]
    fn sentinel_urls_name_the_master_and_its_database() {
        let (name, node) = master("redis+sentinel://h1:1,h2/mymaster/3");
        assert_eq!(name, "mymaster");
        assert!(node.contains("db: 3"), "{node}");
        let (name, node) = master("redis+sentinel://u:secret@h1/m");
        assert_eq!(name, "m");
        assert!(node.contains("db: 0"), "{node}");
        assert!(node.contains("\"u\""), "{node}");
    }

    #[test]
    fn the_root_certificate_parameter_is_taken_out_of_the_url() {
        assert_eq!(
            without_root_cert("rediss://h:1/2?sslrootcert=/ca.pem"),
            ("rediss://h:1/2".to_owned(), Some("/ca.pem".to_owned()))
        );
        assert_eq!(
            without_root_cert("rediss://h:1/?protocol=resp3&sslrootcert=/c&x=y"),
            (
                "rediss://h:1/?protocol=resp3&x=y".to_owned(),
                Some("/c".to_owned())
            )
        );
        assert_eq!(
            without_root_cert("rediss://h:1"),
            ("rediss://h:1".to_owned(), None)
        );
        let e = Target::open("rediss://h:1/?sslrootcert=/no/such/ca.pem", "test")
            .err()
            .expect("refused");
        assert_eq!(e.kind(), backstop_core::ErrorKind::Config, "{e}");
        assert!(e.to_string().contains("/no/such/ca.pem"), "{e}");
    }

    #[test]
    fn malformed_sentinel_urls_are_config_errors() {
        for url in [
            "redis+sentinel://h1:1",
            "redis+sentinel://h1:1/",
            "redis+sentinel://h1,,h2/m",
            "redis+sentinel://h1:notaport/m",
            "redis+sentinel://h1/m/notadb",
        ] {
            let e = Target::open(url, "test")
                .err()
                .unwrap_or_else(|| panic!("{url}"));
            assert_eq!(e.kind(), backstop_core::ErrorKind::Config, "{url}: {e}");
            assert!(e.to_string().contains("Sentinel URL"), "{url}: {e}");
        }
    }
}
