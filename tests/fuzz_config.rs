//! Property tests of the configuration surface: arbitrary connect URLs (the store's
//! options in the query), engine settings and handler options, from a seeded generator
//! (`BACKSTOP_FUZZ_SEED` replays one; the seed is in every failure). Each either works
//! or is refused with a `Config` / `InvalidInput` error before anything is opened or
//! started; none panics.
#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use std::time::Duration;

use backstop_testkit::gen::{seed, Gen};

use backstop::{Engine, EngineConfig, ErrorKind, HandlerError, HandlerOptions, RetryPolicy, Task};

/// One of the durations around the limits.
fn duration(g: &mut Gen) -> Duration {
    *g.pick(&[
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_millis(1),
        Duration::from_millis(250),
        Duration::from_secs(30),
        Duration::from_secs(400 * 24 * 3600),
        Duration::MAX,
    ])
}

const KEYS: &[&str] = &[
    "table",
    "max_connections",
    "acquire_timeout",
    "schema",
    "notify",
    "transaction_pooling",
    "claim",
    "every_node",
    "busy_timeout",
    "synchronous",
    "mode",
    "cache",
    "",
    "table[]",
    "%zz",
    "TABLE",
];
const VALUES: &[&str] = &[
    "",
    "0",
    "1",
    "4",
    "65536",
    "-1",
    "18446744073709551616",
    "true",
    "false",
    "yes",
    "500ms",
    "5s",
    "1h",
    "normal",
    "full",
    "off",
    "jobs",
    "bad name",
    "x;DROP TABLE t",
    "%00",
    "é",
    "skip_locked",
    "auto",
    "2.5s",
    "ms",
];

/// `connect` with arbitrary store options on an in-memory SQLite URL: it opens a store
/// or answers `Config`; nothing panics.
#[tokio::test]
async fn arbitrary_connect_urls_open_or_are_refused() {
    let seed = seed();
    let mut g = Gen::new(seed);
    let (mut opened, mut refused) = (0, 0);
    let files = || -> Vec<std::ffi::OsString> {
        let mut v: Vec<_> = std::fs::read_dir(".")
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let before = files();
    for _ in 0..300 {
        let n = g.below(4);
        let query: Vec<String> = (0..n)
            .map(|_| format!("{}={}", g.pick(KEYS), g.pick(VALUES)))
            .collect();
        let base = *g.pick(&[
            "sqlite::memory:",
            "sqlite::memory:?",
            "sqlite:",
            "nosuch://x",
        ]);
        let url = if query.is_empty() {
            base.to_string()
        } else if base.contains('?') {
            format!("{base}{}", query.join("&"))
        } else {
            format!("{base}?{}", query.join("&"))
        };
        match backstop::connect(&url).await {
            Ok(_) => opened += 1,
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Config, "seed {seed}: {url}: {e}");
                assert!(!e.to_string().is_empty());
                refused += 1;
            }
        }
    }
    assert!(
        opened > 0 && refused > 0,
        "seed {seed}: {opened} opened, {refused} refused"
    );
    // a refused URL opened nothing: no file named after its query
    assert_eq!(files(), before, "seed {seed}: files were created");
}

struct Nothing;

#[backstop::async_trait]
impl backstop::Handler for Nothing {
    async fn handle(&self, _task: &Task) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// Engines with arbitrary settings and handler options: each starts (and shuts down) or
/// `start` answers `Config` / `InvalidInput`; nothing panics.
#[tokio::test]
async fn arbitrary_engine_settings_start_or_are_refused() {
    let seed = seed();
    let mut g = Gen::new(seed);
    let store = backstop::connect("sqlite::memory:").await.unwrap();
    backstop::TaskStore::migrate(&store).await.unwrap();
    let (mut started, mut refused) = (0, 0);
    for _ in 0..200 {
        // each setting changed now and then, so that some combinations are valid
        let mut config = EngineConfig::default();
        let mut options = HandlerOptions::default();
        macro_rules! maybe {
            ($target:ident . $setter:ident ( $value:expr )) => {
                if g.below(100) < 12 {
                    let v = $value;
                    $target = $target.$setter(v);
                }
            };
        }
        maybe!(config.poll_interval(duration(&mut g)));
        maybe!(config.first_poll_delay(duration(&mut g)));
        maybe!(config.dead_after(duration(&mut g)));
        maybe!(config.heartbeat_interval(duration(&mut g)));
        maybe!(config.batch_size(*g.pick(&[0, 1, 50, 1000, 1001, usize::MAX])));
        maybe!(config.recycle_batch(*g.pick(&[0, 1, 100, 1001])));
        maybe!(config.shutdown_grace(duration(&mut g)));
        maybe!(config.retention(*g.pick(&[None, Some(Duration::ZERO), Some(Duration::MAX)])));
        maybe!(config.purge_interval(duration(&mut g)));
        maybe!(config.purge_batch(*g.pick(&[0, 1, 500, usize::MAX])));
        maybe!(config.max_unmarked(*g.pick(&[0, 1, 4096, usize::MAX])));
        maybe!(options.concurrency(*g.pick(&[0, 1, 4, 10_000, 10_001])));
        maybe!(options.queue_capacity(*g.pick(&[0, 64, 1_000_001])));
        maybe!(options.timeout(duration(&mut g)));
        maybe!(options.retry(RetryPolicy::fixed(
            *g.pick(&[0, 1, 10_001]),
            duration(&mut g)
        )));
        let event_type = *g.pick(&["PAY", "PAY", "PAY", "", "bad type"]);
        let input = format!("{config:?} {options:?} {event_type:?}");
        let built = Engine::builder(store.clone())
            .config(config)
            .handler(event_type, Nothing, options)
            .start();
        match built {
            Ok(engine) => {
                engine.shutdown().await;
                started += 1;
            }
            Err(e) => {
                assert!(
                    matches!(e.kind(), ErrorKind::Config | ErrorKind::InvalidInput),
                    "seed {seed}: {input}: {e}"
                );
                refused += 1;
            }
        }
    }
    assert!(
        started > 0 && refused > 0,
        "seed {seed}: {started} started, {refused} refused"
    );
}
