//! Redis for the harnesses of backends whose wake-ups go over Redis pub/sub (MySQL,
//! SQLite): the server named by `BACKSTOP_TEST_REDIS_URL` (scripts/test starts one).
//!
//! Each case connects as a Redis user of its own (`ACL SETUSER`), so a case can cut its
//! own listeners (`CLIENT KILL USER`) without touching the cases running beside it.

use std::sync::Arc;

use backstop_core::Notifier;
use backstop_redis::redis;
use backstop_redis::RedisNotifier;

use crate::{server_url, Unavailable};

/// The variable naming the test Redis.
pub const URL_VAR: &str = "BACKSTOP_TEST_REDIS_URL";

/// The Redis user of the case whose database is `db_name`.
fn user(db_name: &str) -> String {
    let safe: String = db_name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("bst_{safe}")
}

async fn admin() -> Result<(String, redis::aio::MultiplexedConnection), Unavailable> {
    let url = server_url(URL_VAR)?;
    let client =
        redis::Client::open(url.as_str()).map_err(|e| Unavailable(format!("{URL_VAR}: {e}")))?;
    let conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| Unavailable(format!("cannot reach Redis at {URL_VAR}: {e}")))?;
    Ok((url, conn))
}

/// A new notifier on the test Redis, connected as the case's own user, on a channel of
/// its own for the case's database `db_name` (parallel cases do not wake each other).
pub async fn notifier(db_name: &str) -> Result<Arc<dyn Notifier>, Unavailable> {
    let (url, mut conn) = admin().await?;
    let user = user(db_name);
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&user)
        .arg("on")
        .arg(">backstop")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .query_async(&mut conn)
        .await
        .expect("ACL SETUSER for the case");
    let rest = url
        .strip_prefix("redis://")
        .expect("a redis:// URL")
        .rsplit('@')
        .next()
        .unwrap_or_default()
        .to_owned();
    let case_url = format!("redis://{user}:backstop@{rest}");
    let n = RedisNotifier::open(&case_url, format!("backstop-test:{db_name}"))
        .map_err(|e| Unavailable(format!("{URL_VAR}: {e}")))?;
    Ok(Arc::new(n))
}

/// Cut the pub/sub connections of the case whose database is `db_name`.
pub async fn cut_listeners(db_name: &str) {
    let (_, mut conn) = admin().await.expect("the test Redis");
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("USER")
        .arg(user(db_name))
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut conn)
        .await
        .expect("CLIENT KILL USER … TYPE pubsub");
    assert!(killed > 0, "no pub/sub connection of {db_name} to cut");
}
