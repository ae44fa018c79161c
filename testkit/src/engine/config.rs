//! The engine's settings.

use super::*;

/// bad engine settings are refused at start with a Config error.
pub async fn engine_refuses_bad_configuration<H: Harness>(ctx: &Ctx<H>) {
    let h = || flaky(Calls::default(), 0);
    let start = |cfg: EngineConfig, handlers: Vec<(&str, HandlerOptions)>| {
        let mut b = Engine::builder(ctx.store.clone()).config(cfg);
        for (et, o) in handlers {
            b = b.handler(et, h(), o);
        }
        b.start().map(|_| ())
    };
    type Case<'a> = (EngineConfig, Vec<(&'a str, HandlerOptions)>, &'a str);
    let cases: Vec<Case> = vec![
        (fast_config(), vec![], "at least one handler"),
        (
            fast_config(),
            vec![("A", opts()), ("A", opts())],
            "two handlers",
        ),
        (fast_config(), vec![("bad type", opts())], "event_type"),
        (
            fast_config(),
            vec![("A", opts().concurrency(0))],
            "concurrency",
        ),
        (
            fast_config(),
            vec![("A", opts().timeout(Duration::ZERO))],
            "timeout",
        ),
        (
            fast_config()
                .heartbeat_interval(Duration::from_secs(100))
                .dead_after(Duration::from_secs(180)),
            vec![("A", opts())],
            "at most half of dead_after",
        ),
        (
            fast_config().batch_size(0),
            vec![("A", opts())],
            "batch_size",
        ),
        (
            fast_config().poll_interval(Duration::ZERO),
            vec![("A", opts())],
            "poll_interval",
        ),
        (
            fast_config().barrier_retention(Some(Duration::from_secs(400 * 24 * 3600))),
            vec![("A", opts())],
            "barrier_retention",
        ),
    ];
    for (cfg, handlers, needle) in cases {
        match start(cfg, handlers) {
            Ok(()) => panic!("expected a Config error mentioning {needle:?}"),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Config, "{e}");
                assert!(
                    e.to_string().contains(needle),
                    "{e} should mention {needle:?}"
                );
            }
        }
    }
}
