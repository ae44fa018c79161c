//! Every case on a Galera cluster with the skip-locked claim (the one a store on Galera
//! takes), twice: the store's connections on one node (the default: the first of the
//! URL that serves), its writes applied on the other two; and the store's connections
//! going round every node (`MySqlOptions::every_node`, each statement replicated as it
//! runs). Either way the cases' application transactions go round every node.

use super::*;
mod skip_locked {
    use super::*;
    backstop_testkit::conformance!(MySqlHarness(ClaimStrategy::SkipLocked, Transport::Galera));
}

/// Every case with the store's own connections on every node in turn.
mod every_node {
    use super::*;
    backstop_testkit::conformance!(MySqlHarness(
        ClaimStrategy::SkipLocked,
        Transport::GaleraEveryNode
    ));
}

/// On Galera `Auto` is skip locked, and the claims that queue on row locks (ordered
/// update, queue-then-skip) are refused: `Config`, naming the strategy and Galera.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_on_galera_claims_with_skip_locked_only() {
    let harness = MySqlHarness(ClaimStrategy::SkipLocked, Transport::Galera);
    let Some(ctx) =
        backstop_testkit::Ctx::setup(harness, "a_store_on_galera_claims_with_skip_locked_only")
            .await
    else {
        return;
    };
    let auto = MySqlStore::connect_with(&ctx.db.store_url, MySqlOptions::default())
        .await
        .expect("open with Auto");
    assert_eq!(auto.claim_strategy(), ClaimStrategy::SkipLocked);
    for refused in [ClaimStrategy::OrderedUpdate, ClaimStrategy::QueueThenSkip] {
        let e = MySqlStore::connect_with(
            &ctx.db.store_url,
            MySqlOptions::default().claim_strategy(refused),
        )
        .await
        .expect_err("refused on Galera");
        assert_eq!(e.kind(), backstop_core::ErrorKind::Config, "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("{refused:?}")) && msg.contains("Galera"),
            "{msg}"
        );
    }
}

/// The nodes of six connections held at once, each checked to wait for the cluster's
/// earlier writes before it reads or writes (`wsrep_sync_wait = 7`), and to replicate
/// each statement as it runs (`wsrep_trx_fragment_size = 1`, in statements) when
/// `streaming`, else at `COMMIT` (0, the server's default).
async fn six_connections_nodes(store: &MySqlStore, streaming: bool) -> Vec<String> {
    let mut held = Vec::new();
    let mut nodes = Vec::new();
    for _ in 0..6 {
        let mut conn = store.pool().acquire().await.expect("a connection");
        let (node, wait, fragment, unit): (String, i64, i64, String) = sqlx::query_as(
            "SELECT @@wsrep_node_name, CAST(@@wsrep_sync_wait AS SIGNED),
                    CAST(@@wsrep_trx_fragment_size AS SIGNED), @@wsrep_trx_fragment_unit",
        )
        .fetch_one(&mut *conn)
        .await
        .expect("the node's name");
        assert_eq!(wait, 7, "wsrep_sync_wait on {node}");
        if streaming {
            assert_eq!((fragment, unit.as_str()), (1, "statements"), "on {node}");
        } else {
            assert_eq!(fragment, 0, "no streaming on {node}");
        }
        nodes.push(node);
        held.push(conn);
    }
    nodes
}

/// By default a store's connections all go to one node: the URL's first, which serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_connections_go_to_one_node_by_default() {
    let harness = MySqlHarness(ClaimStrategy::SkipLocked, Transport::Galera);
    let Some(ctx) =
        backstop_testkit::Ctx::setup(harness, "store_connections_go_to_one_node_by_default").await
    else {
        return;
    };
    let store = MySqlStore::connect_with(
        &ctx.db.store_url,
        MySqlOptions::default().max_connections(6),
    )
    .await
    .expect("open the store");
    let nodes = six_connections_nodes(&store, false).await;
    let first: String = sqlx::query_scalar("SELECT @@wsrep_node_name")
        .fetch_one(&ctx.db.admin)
        .await
        .expect("the first node's name");
    assert!(
        nodes.iter().all(|n| *n == first),
        "all on {first}: {nodes:?}"
    );
}

/// With `every_node`, a store's connections go round the nodes of its URL, each
/// replicating every statement as it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_connections_go_round_every_node() {
    let harness = MySqlHarness(ClaimStrategy::SkipLocked, Transport::Galera);
    let Some(ctx) =
        backstop_testkit::Ctx::setup(harness, "store_connections_go_round_every_node").await
    else {
        return;
    };
    let store = MySqlStore::connect_with(
        &ctx.db.store_url,
        MySqlOptions::default().max_connections(6).every_node(true),
    )
    .await
    .expect("open the store");
    let nodes = six_connections_nodes(&store, true).await;
    let servers = galera_nodes(ctx.db.store_url.rsplit_once('/').expect("a database").0);
    // every node serves some of the six (each connection opened turns the pool to the
    // next node once it is set up, so two the pool opens at once may share one: a round
    // of three can hold a node twice)
    let on: std::collections::BTreeSet<_> = nodes.iter().collect();
    assert_eq!(on.len(), servers.len(), "every node: {nodes:?}");
}

/// A TCP proxy in front of one node, which the case can cut: every connection through
/// it closed, every new one closed as soon as it is accepted.
struct Cuttable {
    port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    links: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Cuttable {
    async fn start(upstream: String) -> Cuttable {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener.local_addr().expect("its address").port();
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let links = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (cut2, links2) = (cut.clone(), links.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if cut2.load(std::sync::atomic::Ordering::SeqCst) {
                    continue; // dropped: closed at once
                }
                let upstream = upstream.clone();
                let link = tokio::spawn(async move {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
                links2.lock().expect("links").push(link);
            }
        });
        Cuttable { port, cut, links }
    }

    fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for link in self.links.lock().expect("links").drain(..) {
            link.abort();
        }
    }
}

/// One writer node, cut off (a proxy in front of it closes every connection and
/// refuses new ones): the store's next acquire times out, the pool moves to the next
/// node of the URL, and the store goes on there; every task is claimed and completed
/// once, none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_moves_to_the_next_node_when_its_node_is_cut_off() {
    use backstop_core::TaskStore;
    let harness = MySqlHarness(ClaimStrategy::SkipLocked, Transport::Galera);
    let Some(ctx) = backstop_testkit::Ctx::setup(
        harness,
        "a_store_moves_to_the_next_node_when_its_node_is_cut_off",
    )
    .await
    else {
        return;
    };
    let (nodes, db) = ctx.db.store_url.rsplit_once('/').expect("a database");
    let (prefix, hosts) = nodes.split_at(nodes.rfind('@').expect("user info") + 1);
    let hosts: Vec<&str> = hosts.split(',').collect();
    let proxy = Cuttable::start(hosts[0].to_owned()).await;
    let url = format!(
        "{prefix}127.0.0.1:{},{}/{db}",
        proxy.port,
        hosts[1..].join(",")
    );
    let store = MySqlStore::connect_with(
        &url,
        MySqlOptions::default()
            .max_connections(2)
            .acquire_timeout(Duration::from_secs(2)),
    )
    .await
    .expect("open through the proxy");
    let node = |store: MySqlStore| async move {
        let mut conn = store.pool().acquire().await.expect("a connection");
        sqlx::query_scalar::<_, String>("SELECT @@wsrep_node_name")
            .fetch_one(&mut *conn)
            .await
            .expect("the node's name")
    };
    let first: String = sqlx::query_scalar("SELECT @@wsrep_node_name")
        .fetch_one(&ctx.db.admin)
        .await
        .expect("node 1's name");
    assert_eq!(
        node(store.clone()).await,
        first,
        "through the proxy to node 1"
    );
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(
            store
                .enqueue(backstop_core::NewTask::new("CUT", format!("k{i}")))
                .await
                .expect("enqueue")
                .id,
        );
    }
    let types = ["CUT".to_owned()];
    let mut done = Vec::new();
    let finish = |got: Vec<backstop_core::Task>| {
        let store = store.clone();
        async move {
            let marks: Vec<_> = got
                .iter()
                .map(|t| backstop_core::Mark::success(t.lease()))
                .collect();
            let applied = store.mark(&marks).await.expect("mark");
            assert!(applied.iter().all(|a| *a), "each completion applies");
            got.into_iter().map(|t| t.id).collect::<Vec<_>>()
        }
    };
    let got = store
        .claim_batch(&ctx.owner, &types, 8)
        .await
        .expect("claim");
    done.extend(finish(got).await);

    proxy.cut();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut errors = 0;
    while done.len() < ids.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "{errors} errors, {} done",
            done.len()
        );
        match store.claim_batch(&ctx.owner, &types, 8).await {
            Ok(got) => done.extend(finish(got).await),
            Err(e) => {
                assert!(e.is_temporary(), "{e}");
                errors += 1;
            }
        }
    }
    assert!(errors >= 1, "the cut was noticed");
    let second = node(store.clone()).await;
    assert_ne!(second, first, "the store moved off the cut node");
    done.sort_unstable();
    ids.sort_unstable();
    assert_eq!(done, ids, "each task claimed and completed once");
    for id in ids {
        let t = store.get(id).await.expect("get").expect("the task");
        assert_eq!(
            (t.status, t.attempts),
            (backstop_core::Status::Succeeded, 1)
        );
    }
}
