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
//! move are closed as they are next acquired. Once the URL's first node serves again
//! the pool goes back to it ([`Ring::fail_back`]), so every process writes to one node. Spread over
//! every node, each connection opened also moves them on, so a pool's connections go
//! round the nodes in the URL's order.

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
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

/// The nodes a store's pool connects to: every node in turn (`every_node`), or the one
/// node elected to write to.
pub(crate) struct Ring {
    nodes: Vec<MySqlConnectOptions>,
    /// Each connection opened moves the pool on (every node), or only an election does.
    every_node: bool,
    next: AtomicUsize,
    /// The pool whose connect options turn; taken out when the store is dropped (the
    /// pool's own hooks hold the ring, so the ring must not keep the pool alive).
    pool: Mutex<Option<MySqlPool>>,
    /// When the pool last moved; the connections opened before are discarded as they
    /// are next acquired ([`stale`](Self::stale)).
    moved: Mutex<Option<Instant>>,
    /// When (ms since the Unix epoch) an acquire may next start an election while the
    /// pool is not on the URL's first node ([`fail_back`](Self::fail_back)).
    next_check_ms: AtomicU64,
    /// One election at a time; a failure seen meanwhile waits for its result.
    election: tokio::sync::Mutex<()>,
}

/// How often a pool that is not on the URL's first node holds an election: at each
/// multiple of it on the wall clock, so that the processes of a deployment elect at the
/// same moment (their clocks agree to milliseconds), and move back together, not one
/// after another over the interval with writers on two nodes meanwhile.
pub(crate) const FAIL_BACK_EVERY: Duration = Duration::from_secs(5);

/// How long a node has, in an election, to accept a connection and say it serves.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// Milliseconds since the Unix epoch: the wall clock every process shares.
fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The first multiple of [`FAIL_BACK_EVERY`] after `ms`.
fn next_boundary(ms: u64) -> u64 {
    let every = FAIL_BACK_EVERY.as_millis() as u64;
    (ms / every + 1) * every
}

impl Ring {
    pub(crate) fn new(nodes: Vec<MySqlConnectOptions>, every_node: bool) -> Self {
        Ring {
            nodes,
            every_node,
            next: AtomicUsize::new(1),
            pool: Mutex::new(None),
            moved: Mutex::new(None),
            next_check_ms: AtomicU64::new(0),
            election: tokio::sync::Mutex::new(()),
        }
    }

    /// Whether the pool spreads its connections over every node.
    pub(crate) fn every_node(&self) -> bool {
        self.every_node
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

    /// Node `at` (as [`at`](Self::at) read it before trying) failed: it refused a new
    /// connection's check (outside the primary component), refused a statement (error
    /// 1047), broke a connection (an I/O error: the node may have died), or no
    /// connection to it came within the acquire timeout. Unless the pool has moved off
    /// it meanwhile, an election follows: the pool goes to the first node of the URL
    /// that serves, caught up (`Synced`) if one is, else merely in the primary
    /// component; that may be the node it is on (only one connection was lost). Every
    /// process that sees the same cluster elects the same node, so the processes of a
    /// deployment keep writing to one node through a failure, whichever of them saw it
    /// first. When no node answers the pool stays. Spread over every node, it turns.
    pub(crate) async fn failed(&self, at: Option<usize>) {
        if self.every_node {
            return self.turn();
        }
        let Some(i) = at else { return };
        let _one = self.election.lock().await;
        if self.at() == Some(i) {
            self.elect().await;
        }
    }

    /// Elect the node to write to (see [`failed`](Self::failed)) and point the pool at
    /// it.
    async fn elect(&self) {
        let mut ready = None;
        for i in 0..self.nodes.len() {
            match self.serves(i).await {
                Some(true) => return self.point_at(i),
                Some(false) => {
                    ready.get_or_insert(i);
                }
                None => {}
            }
        }
        if let Some(i) = ready {
            self.point_at(i);
        }
    }

    /// Node `i`'s answer within [`ANSWER_WITHIN`] to a new connection: `Some(true)`
    /// serving and `Synced`, `Some(false)` serving (in the primary component) but
    /// catching up or donating, `None` no connection or not serving. The connection is
    /// closed.
    async fn serves(&self, i: usize) -> Option<bool> {
        let check = async {
            let mut conn = sqlx::ConnectOptions::connect(&self.nodes[i]).await?;
            let state = crate::connect::node_state(&mut conn).await;
            let _ = sqlx::Connection::close(conn).await;
            state
        };
        match tokio::time::timeout(ANSWER_WITHIN, check).await {
            Ok(Ok(state)) => state,
            _ => None,
        }
    }

    /// Point the pool at node `i`, unless it is there already: its older connections
    /// are stale from now, and the next fail-back election comes at the boundary after
    /// [`FAIL_BACK_EVERY`] from now.
    fn point_at(&self, i: usize) {
        let Ok(slot) = self.pool.lock() else { return };
        let Some(pool) = slot.as_ref() else { return };
        let now = pool.connect_options();
        let node = &self.nodes[i];
        if node.get_host() == now.get_host() && node.get_port() == now.get_port() {
            return;
        }
        pool.set_connect_options(node.clone());
        if let Ok(mut moved) = self.moved.lock() {
            *moved = Some(Instant::now());
        }
        let next = next_boundary(epoch_ms() + FAIL_BACK_EVERY.as_millis() as u64);
        self.next_check_ms.store(next, Ordering::Relaxed);
        tracing::warn!(
            from = %format!("{}:{}", now.get_host(), now.get_port()),
            to = %format!("{}:{}", node.get_host(), node.get_port()),
            "the store's connections move to another MySQL node of the URL"
        );
    }

    /// On one writer node, a pool that is not on the URL's first node holds an election
    /// at each [`FAIL_BACK_EVERY`] boundary of the wall clock (checked at each acquire;
    /// the election runs in the background), so once the first node serves and is
    /// `Synced` again the pool goes back to it, and its older connections are closed as
    /// they are next acquired. Without it a process started after a failover would
    /// write to the first node, back from its failure, while the processes that moved
    /// stayed on the next one: writers on two nodes for as long as both live (see the
    /// guide on writers on every node).
    pub(crate) fn fail_back(self: &Arc<Self>) {
        if self.every_node || self.nodes.len() < 2 {
            return;
        }
        let now = epoch_ms();
        let due = self.next_check_ms.load(Ordering::Relaxed);
        if now < due
            || self
                .next_check_ms
                .compare_exchange(
                    due,
                    next_boundary(now),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return;
        }
        if matches!(self.at(), Some(0) | None) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let ring = Arc::clone(self);
        runtime.spawn(async move {
            let Ok(_one) = ring.election.try_lock() else {
                return;
            };
            ring.elect().await;
        });
    }

    /// Whether a pooled connection `age` old was opened before the pool last moved: it
    /// may be on a node that failed (still open, but outside the primary component), so
    /// the pool closes it and opens one on the node it moved to. Spread over every
    /// node, nothing is stale.
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
        ring.failed(Some(0)).await;
        assert_eq!(port(&pool), 1, "every node: a failure turns too");
        ring.detach();
        ring.opened();
        assert_eq!(port(&pool), 1, "a detached ring turns nothing");
    }

    /// A port nothing listens on: every connection to it refused.
    fn refusing_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    }

    #[tokio::test]
    async fn an_election_no_node_answers_leaves_the_pool_where_it_is() {
        let (a, b) = (refusing_port(), refusing_port());
        let url = format!("mysql://u:p@127.0.0.1:{a},127.0.0.1:{b}/app");
        let nodes = parse(&url, "t").unwrap();
        let ring = Ring::new(nodes.clone(), false);
        let pool = sqlx::mysql::MySqlPoolOptions::new().connect_lazy_with(nodes[1].clone());
        ring.start_at(1);
        ring.attach(&pool);
        ring.failed(Some(1)).await;
        assert_eq!(
            (pool.connect_options().get_port(), ring.at()),
            (b, Some(1)),
            "no node serves: the pool stays"
        );
        ring.failed(Some(0)).await;
        ring.failed(None).await;
        assert_eq!(ring.at(), Some(1), "a failure of another node: no election");
        assert!(
            !ring.stale(Duration::from_secs(3600)),
            "never moved: nothing stale"
        );
    }

    #[test]
    fn fail_back_elections_fall_on_wall_clock_boundaries() {
        assert_eq!(next_boundary(0), 5_000);
        assert_eq!(next_boundary(4_999), 5_000);
        assert_eq!(next_boundary(5_000), 10_000);
        assert_eq!(next_boundary(1_796_506_851_123), 1_796_506_855_000);
    }

    #[test]
    fn an_empty_server_is_a_config_error() {
        let e = parse("mysql://u:p@a:1,,c/app", "open_store").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        assert!(e.to_string().contains("empty server"), "{e}");
    }
}
