//! What the Redis tests share: the test server, skipping, unique names.
#![allow(dead_code)] // each test binary uses its own share of these

use std::sync::atomic::{AtomicUsize, Ordering};

use backstop_redis::redis;

/// Whether `service` is named in `BACKSTOP_TEST_REQUIRE`.
pub fn required(service: &str) -> bool {
    std::env::var("BACKSTOP_TEST_REQUIRE")
        .map(|v| v.split(',').any(|b| b.trim().eq_ignore_ascii_case(service)))
        .unwrap_or(false)
}

/// The test Redis's URL, or `None` (printed) when not set and not required.
pub fn redis_url(case: &str) -> Option<String> {
    match std::env::var("BACKSTOP_TEST_REDIS_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            assert!(!required("redis"), "redis is required for {case}");
            eprintln!("SKIPPED {case}: BACKSTOP_TEST_REDIS_URL is not set");
            None
        }
    }
}

/// A name no other test of this process uses.
pub fn unique(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// A connection to the Redis at `url`.
pub async fn conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// A TCP port of 127.0.0.1 free at the time of asking.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
