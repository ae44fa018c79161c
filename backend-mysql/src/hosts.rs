//! A URL naming several servers (`mysql://user:pass@db1:3306,db2:3306,db3:3306/app`):
//! the nodes of a Galera cluster, every one a primary. sqlx connects a pool to one
//! server; the store points its pool at one node at a time and moves it on when that
//! node fails (the default), or turns its connections over every node, one new
//! connection after another (`MySqlOptions::every_node`).
//!
//! How: sqlx reads the pool's connect options afresh at each connection attempt
//! (`Pool::set_connect_options`). A node fails when it refuses the store's check
//! (`wsrep_ready = OFF`: outside the primary component) or an acquire fails (no
//! connection could be made, refused, closed or timed out), or a statement on a pooled
//! connection is refused with MySQL error 1047 (the node left the primary component
//! after the connection opened); the ring then moves the options on to the node after
//! it, once however many acquires saw it fail, and the connections opened before the
//! move are closed as they are next acquired. Spread over
//! every node, each connection opened also moves them on, so a pool's connections go
//! round the nodes in the URL's order.

use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use backstop_core::driver::prelude::*;
use sqlx::mysql::MySqlConnectOptions;
use sqlx::MySqlPool;

/// The servers a URL names, as one connect options each, in the URL's order.
///
/// A URL with one server gives one. `host1:port1,host2:port2` after the user info names
/// several; each gets the URL's user, database and parameters. A bad URL, or an empty
/// server between commas, is a `Config` error.
pub(crate) fn parse(url: &str, op: &'static str) -> Result<Vec<MySqlConnectOptions>> {
    let bad = |why: String| Error::config(op, format!("invalid MySQL URL: {why}"));
    let one = |url: &str| {
        MySqlConnectOptions::from_str(url)
            .map_err(|e| Error::config(op, format!("invalid MySQL URL: {e}")).with_source(e))
    };
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return one(url).map(|o| vec![o]);
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let (user, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    if !hosts.contains(',') {
        return one(url).map(|o| vec![o]);
    }
    hosts
        .split(',')
        .map(|host| {
            if host.trim().is_empty() {
                return Err(bad(format!("an empty server in {hosts:?}")));
            }
            one(&format!(
                "{}{user}{host}{}",
                &url[..scheme_end],
                &rest[authority_end..]
            ))
        })
        .collect()
}

/// The nodes a store's pool connects to, turned one step per connection opened (and
/// per acquire that timed out).
pub(crate) struct Ring {
    nodes: Vec<MySqlConnectOptions>,
    /// Each connection opened moves the pool on (every node), or only a failure does.
    every_node: bool,
    next: AtomicUsize,
    /// The pool whose connect options turn; taken out when the store is dropped (the
    /// pool's own hooks hold the ring, so the ring must not keep the pool alive).
    pool: Mutex<Option<MySqlPool>>,
    /// When the pool last moved off a failed node (one writer node); the connections
    /// opened before are discarded as they are next acquired ([`stale`](Self::stale)).
    moved: Mutex<Option<Instant>>,
}

impl Ring {
    pub(crate) fn new(nodes: Vec<MySqlConnectOptions>, every_node: bool) -> Self {
        Ring {
            nodes,
            every_node,
            next: AtomicUsize::new(1),
            pool: Mutex::new(None),
            moved: Mutex::new(None),
        }
    }

    /// Every node, in the URL's order.
    pub(crate) fn nodes(&self) -> &[MySqlConnectOptions] {
        &self.nodes
    }

    /// The pool's first connection goes to node `i`: its next to the node after it.
    pub(crate) fn start_at(&self, i: usize) {
        self.next.store(i + 1, Ordering::Relaxed);
    }

    /// The pool to turn from now on.
    pub(crate) fn attach(&self, pool: &MySqlPool) {
        if let Ok(mut slot) = self.pool.lock() {
            *slot = Some(pool.clone());
        }
    }

    /// Stop turning (the store is gone): lets the pool go.
    pub(crate) fn detach(&self) {
        if let Ok(mut slot) = self.pool.lock() {
            *slot = None;
        }
    }

    /// The node the pool connects to now (`None` for one node, or without a pool).
    pub(crate) fn at(&self) -> Option<usize> {
        if self.nodes.len() < 2 {
            return None;
        }
        let slot = self.pool.lock().ok()?;
        let options = slot.as_ref()?.connect_options();
        self.nodes
            .iter()
            .position(|n| n.get_host() == options.get_host() && n.get_port() == options.get_port())
    }

    /// A connection was opened: spread over every node, the next goes to the next node.
    pub(crate) fn opened(&self) {
        if self.every_node {
            self.turn();
        }
    }

    /// Node `at` (as [`at`](Self::at) read it before trying) failed: the pool moves on to
    /// the node after it, unless it has moved on already (several acquires may see one
    /// node fail; it moves once). Spread over every node, it simply turns.
    pub(crate) fn failed(&self, at: Option<usize>) {
        if self.every_node {
            return self.turn();
        }
        let (Some(i), Ok(slot)) = (at, self.pool.lock()) else {
            return;
        };
        if let Some(pool) = slot.as_ref() {
            let now = pool.connect_options();
            let node = &self.nodes[i];
            if node.get_host() == now.get_host() && node.get_port() == now.get_port() {
                pool.set_connect_options(self.nodes[(i + 1) % self.nodes.len()].clone());
                if let Ok(mut moved) = self.moved.lock() {
                    *moved = Some(Instant::now());
                }
            }
        }
    }

    /// Whether a pooled connection `age` old was opened before the pool last moved off
    /// a failed node: it may be on that node (still open, but outside the primary
    /// component, or about to be cut off), so the pool closes it and opens one on the
    /// node it moved to. Spread over every node, nothing is stale.
    pub(crate) fn stale(&self, age: Duration) -> bool {
        let Ok(moved) = self.moved.lock() else {
            return false;
        };
        moved.is_some_and(|at| age > at.elapsed())
    }

    /// Point the pool's next connection at the next node.
    fn turn(&self) {
        if self.nodes.len() < 2 {
            return;
        }
        if let Ok(slot) = self.pool.lock() {
            if let Some(pool) = slot.as_ref() {
                let i = self.next.fetch_add(1, Ordering::Relaxed) % self.nodes.len();
                pool.set_connect_options(self.nodes[i].clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn one_server_is_one_node() {
        let nodes = parse("mysql://u:p@db:3307/app?ssl-mode=disabled", "t").unwrap();
        assert_eq!(nodes.len(), 1);
        assert_eq!((nodes[0].get_host(), nodes[0].get_port()), ("db", 3307));
    }

    #[test]
    fn servers_between_commas_share_user_database_and_parameters() {
        let nodes = parse("mysql://u:p@a:1,b:2,c/app?charset=utf8mb4", "t").unwrap();
        let got: Vec<_> = nodes
            .iter()
            .map(|o| {
                (
                    o.get_host().to_owned(),
                    o.get_port(),
                    o.get_username().to_owned(),
                    o.get_database().map(str::to_owned),
                )
            })
            .collect();
        let app = Some("app".to_owned());
        assert_eq!(
            got,
            [
                ("a".to_owned(), 1, "u".to_owned(), app.clone()),
                ("b".to_owned(), 2, "u".to_owned(), app.clone()),
                ("c".to_owned(), 3306, "u".to_owned(), app),
            ]
        );
        let no_db = parse("mysql://a:1,b:2", "t").unwrap();
        assert_eq!(no_db.len(), 2);
        assert_eq!(no_db[1].get_database(), None);
    }

    #[tokio::test]
    async fn the_ring_turns_a_pool_round_the_nodes_from_where_it_started() {
        let nodes = parse("mysql://u:p@a:1,b:2,c:3/app", "t").unwrap();
        let ring = Ring::new(nodes.clone(), true);
        // no connection is made: a lazy pool only holds its options
        let pool = sqlx::mysql::MySqlPoolOptions::new().connect_lazy_with(nodes[1].clone());
        let port = |pool: &MySqlPool| pool.connect_options().get_port();
        ring.start_at(1);
        ring.opened(); // not attached yet: nothing to turn
        assert_eq!(port(&pool), 2);
        ring.attach(&pool);
        let mut seen = Vec::new();
        for _ in 0..4 {
            ring.opened();
            seen.push(port(&pool));
        }
        assert_eq!(seen, [3, 1, 2, 3]);
        ring.failed(Some(0));
        assert_eq!(port(&pool), 1, "every node: a failure turns too");
        ring.detach();
        ring.opened();
        assert_eq!(port(&pool), 1, "a detached ring turns nothing");
    }

    #[tokio::test]
    async fn on_one_node_only_a_failure_moves_the_pool_and_only_once() {
        let nodes = parse("mysql://u:p@a:1,b:2,c:3/app", "t").unwrap();
        let ring = Ring::new(nodes.clone(), false);
        let pool = sqlx::mysql::MySqlPoolOptions::new().connect_lazy_with(nodes[0].clone());
        let port = |pool: &MySqlPool| pool.connect_options().get_port();
        ring.start_at(0);
        ring.attach(&pool);
        for _ in 0..3 {
            ring.opened();
        }
        assert_eq!(
            (port(&pool), ring.at()),
            (1, Some(0)),
            "connections stay on a"
        );
        // three acquires saw a fail: the pool moves to b once
        let at = ring.at();
        for _ in 0..3 {
            ring.failed(at);
        }
        assert_eq!((port(&pool), ring.at()), (2, Some(1)));
        ring.failed(Some(1));
        ring.failed(Some(2));
        assert_eq!(port(&pool), 1, "past the last node, the first again");
        ring.failed(None);
        assert_eq!(port(&pool), 1, "an unknown node moves nothing");
    }

    #[test]
    fn an_empty_server_is_a_config_error() {
        let e = parse("mysql://u:p@a:1,,c/app", "open_store").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        assert!(e.to_string().contains("empty server"), "{e}");
    }
}
