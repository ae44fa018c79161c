//! The one runner of a store's release of order keys
//! ([`release_order_keys`](crate::TaskStore::release_order_keys)), and its policy: a
//! backend supplies only SQL ([`EnqueueSql`]) and a connection.

use super::{
    BlockingTxConnection, EnqueueSql, KeyReleasePlan, KeysReleasePlan, OwnConnection, TxPlan,
};
use crate::error::Result;
use crate::model::TaskId;

/// Move `keys` (sorted, distinct) along on the store's own connection `conn`; the tasks
/// made pending.
///
/// # Behavior
///
/// - Several keys, on a backend that
///   [releases keys together](EnqueueSql::releases_keys_together): one transaction for
///   all of them ([`KeysReleasePlan`]). A temporary failure of it (a deadlock the
///   database broke, a lost race) is rolled back and every key is released on its own
///   instead: the set-based release is an optimization, the per-key protocol the
///   definition. The keys whose rows were gone at its lock are released on their own
///   after its commit.
/// - Otherwise, and for what the set-based release left: one transaction per key
///   ([`KeyReleasePlan`]), so a key's lock is never held while another is waited for.
/// - Any other error ends the call; the transaction it was in is rolled back.
pub async fn release_order_keys<C: OwnConnection + ?Sized>(
    sql: &dyn EnqueueSql,
    conn: &mut C,
    keys: &[String],
) -> Result<Vec<TaskId>> {
    let mut promoted = Vec::new();
    let mut one_by_one = keys.to_vec();
    if keys.len() > 1 && sql.releases_keys_together() {
        conn.begin().await?;
        match KeysReleasePlan::new(sql, keys.to_vec()).run(conn).await {
            Ok(release) => {
                conn.commit().await?;
                promoted.extend_from_slice(release.promoted_ids());
                one_by_one = release.leftover().to_vec();
            }
            Err(e) if e.is_temporary() => {
                tracing::debug!(error = %e, keys = keys.len(),
                    "releasing order keys together failed; releasing them one by one");
                conn.rollback().await?;
            }
            Err(e) => {
                let _ = conn.rollback().await;
                return Err(e);
            }
        }
    }
    for key in &one_by_one {
        conn.begin().await?;
        match KeyReleasePlan::new(sql, key).run(conn).await {
            Ok(id) => {
                conn.commit().await?;
                promoted.extend(id);
            }
            Err(e) => {
                let _ = conn.rollback().await;
                return Err(e);
            }
        }
    }
    Ok(promoted)
}

/// [`release_order_keys`] for an embedded database whose writes run in one transaction
/// the caller holds (`conn`, SQLite's write lock): each key released on it in turn.
pub fn release_order_keys_blocking<C: BlockingTxConnection + ?Sized>(
    sql: &dyn EnqueueSql,
    conn: &mut C,
    keys: &[String],
) -> Result<Vec<TaskId>> {
    let mut promoted = Vec::new();
    for key in keys {
        promoted.extend(KeyReleasePlan::new(sql, key).run_blocking(conn)?);
    }
    Ok(promoted)
}
