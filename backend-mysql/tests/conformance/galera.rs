//! Every case on a Galera cluster, the store's connections on one node (the default: the
//! first of the URL that serves), its writes applied on the other two, with the
//! skip-locked claim: the one a store on Galera takes. Spreading them over every node
//! (`MySqlOptions::every_node`) has its own case below; the suite under it met anomalies
//! of the server that the guide's Scale-out chapter lists.

use super::*;
mod skip_locked {
    use super::*;
    backstop_testkit::conformance!(MySqlHarness(ClaimStrategy::SkipLocked, Transport::Galera));
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
/// earlier writes before it reads or writes (`wsrep_sync_wait = 7`).
async fn six_connections_nodes(store: &MySqlStore) -> Vec<String> {
    let mut held = Vec::new();
    let mut nodes = Vec::new();
    for _ in 0..6 {
        let mut conn = store.pool().acquire().await.expect("a connection");
        let (node, wait): (String, i64) =
            sqlx::query_as("SELECT @@wsrep_node_name, CAST(@@wsrep_sync_wait AS SIGNED)")
                .fetch_one(&mut *conn)
                .await
                .expect("the node's name");
        assert_eq!(wait, 7, "wsrep_sync_wait on {node}");
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
    let nodes = six_connections_nodes(&store).await;
    let first: String = sqlx::query_scalar("SELECT @@wsrep_node_name")
        .fetch_one(&ctx.db.admin)
        .await
        .expect("the first node's name");
    assert!(
        nodes.iter().all(|n| *n == first),
        "all on {first}: {nodes:?}"
    );
}

/// With `every_node`, a store's connections go round the nodes of its URL.
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
    let nodes = six_connections_nodes(&store).await;
    let servers = galera_nodes(ctx.db.store_url.rsplit_once('/').expect("a database").0);
    // each round of new connections covers every node (within a round the order
    // may vary: the pool can open two connections at once)
    for round in nodes.chunks(servers.len()) {
        let on: std::collections::BTreeSet<_> = round.iter().collect();
        assert_eq!(on.len(), servers.len(), "each node once a round: {nodes:?}");
    }
}
