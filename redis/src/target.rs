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
/// - `redis+sentinel://[[user]:password@]host[:port][,host[:port]…]/<master>[/db]`: the
///   master the Sentinels at those addresses (port 26379 by default) name `<master>`.
///   The credentials and database are the master's; the Sentinels are asked without
///   credentials.
#[derive(Clone)]
pub(crate) enum Target {
    Server(redis::Client),
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
        redis::Client::open(url)
            .map(Target::Server)
            .map_err(|e| Error::config(operation, format!("invalid Redis URL: {e}")))
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
            Target::Server(client) => Ok(client.clone()),
            Target::Sentinel(w) => {
                let mut sentinels = w.sentinels.lock().await;
                sentinels.async_master_for(&w.master, Some(&w.node)).await
            }
        }
    }
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
