//! Every case on a Galera cluster, the store's connections spread over its nodes, with
//! the skip-locked claim: the one a store on Galera takes.

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

/// A store's connections go round the nodes of its URL, and each waits for
/// the cluster's earlier writes before it reads or writes (`wsrep_sync_wait = 7`).
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
        MySqlOptions::default().max_connections(6),
    )
    .await
    .expect("open the store");
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
    let servers = galera_nodes(ctx.db.store_url.rsplit_once('/').expect("a database").0);
    // each round of new connections covers every node (within a round the order
    // may vary: the pool can open two connections at once)
    for round in nodes.chunks(servers.len()) {
        let on: std::collections::BTreeSet<_> = round.iter().collect();
        assert_eq!(on.len(), servers.len(), "each node once a round: {nodes:?}");
    }
}
