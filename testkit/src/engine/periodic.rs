//! Periodic tasks: each tick fires once across instances, with no leader.

use backstop_core::{Missed, Periodic, Schedule};

use super::*;

/// three instances fire one periodic task every 100 ms for 30 ticks: every tick between
/// the first and the last runs exactly once (no tick twice, none skipped), each at or
/// after its tick.
pub async fn engine_fires_each_periodic_tick_once_across_instances<H: Harness>(ctx: &Ctx<H>) {
    let interval = Duration::from_millis(100);
    let ran: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let late: Arc<AtomicUsize> = Arc::default();
    let make = || {
        let (ran, late) = (Arc::clone(&ran), Arc::clone(&late));
        handler_fn(move |task: Task| {
            let (ran, late) = (Arc::clone(&ran), Arc::clone(&late));
            async move {
                if chrono::Utc::now() + chrono_dur(Duration::from_millis(250)) < task.next_run_at {
                    late.fetch_add(1, Ordering::SeqCst); // ran well before its tick
                }
                *ran.lock().unwrap().entry(task.biz_key.clone()).or_default() += 1;
                Ok(())
            }
        })
    };
    let periodic = Periodic::new(
        "heartbeat-report",
        Schedule::every(interval).unwrap(),
        NewTask::new("TICK", "-").json(&"report"),
    );
    let mut engines = Vec::new();
    for _ in 0..3 {
        let store = ctx.new_store().await;
        engines.push(
            Engine::builder(store)
                .config(fast_config().first_poll_delay(Duration::ZERO))
                .handler("TICK", make(), opts())
                .periodic(periodic.clone())
                .start()
                .unwrap(),
        );
    }
    eventually("30 ticks to run", || async {
        ran.lock().unwrap().len() >= 30
    })
    .await;
    for e in &engines {
        e.shutdown().await;
    }
    let ran = ran.lock().unwrap().clone();
    let mut ticks: Vec<chrono::DateTime<chrono::Utc>> = ran
        .keys()
        .map(|k| {
            let t = k.strip_prefix("heartbeat-report@").unwrap();
            chrono::DateTime::parse_from_rfc3339(t).unwrap().to_utc()
        })
        .collect();
    ticks.sort();
    for (key, n) in ran.iter() {
        assert_eq!(*n, 1, "tick {key} ran {n} times");
    }
    for w in ticks.windows(2) {
        assert_eq!(
            w[1] - w[0],
            chrono_dur(interval),
            "a tick was skipped between {} and {}",
            w[0],
            w[1]
        );
    }
    assert_eq!(late.load(Ordering::SeqCst), 0);
    // each tick is one row, keyed by its tick, due at its tick
    let rows = ctx
        .store
        .list(
            &backstop_core::TaskFilter::default()
                .event_type("TICK")
                .limit(1000),
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), ran.len());
    for t in rows {
        let tick = t.biz_key.strip_prefix("heartbeat-report@").unwrap();
        let tick = chrono::DateTime::parse_from_rfc3339(tick).unwrap().to_utc();
        assert!(t.next_run_at >= tick - chrono_dur(crate::CLOCK_SLACK));
        assert_eq!(t.payload, "\"report\"");
    }
}

/// missed ticks: `Skip` fires nothing at start, `CatchUpOne` fires the latest past tick
/// at start — once, however many instances start.
pub async fn engine_handles_missed_ticks_by_policy<H: Harness>(ctx: &Ctx<H>) {
    let hourly = Schedule::every(HOUR).unwrap();
    let template = || NewTask::new("HOURLY", "-");
    let start = |periodic: Periodic| {
        let store = ctx.store.clone();
        async move {
            Engine::builder(store)
                .config(no_poll_config())
                .handler("HOURLY", handler_fn(|_t: Task| async { Ok(()) }), opts())
                .periodic(periodic)
                .start()
                .unwrap()
        }
    };
    let skip = start(Periodic::new("skipper", hourly.clone(), template())).await;
    let a = start(Periodic::new("catcher", hourly.clone(), template()).missed(Missed::CatchUpOne))
        .await;
    let b = start(Periodic::new("catcher", hourly.clone(), template()).missed(Missed::CatchUpOne))
        .await;
    let last_tick = hourly.at_or_before(chrono::Utc::now());
    eventually("the missed tick to be enqueued", || async {
        !ctx.store
            .list(&backstop_core::TaskFilter::default().event_type("HOURLY"))
            .await
            .unwrap()
            .is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rows = ctx
        .store
        .list(&backstop_core::TaskFilter::default().event_type("HOURLY"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        rows[0].biz_key,
        format!(
            "catcher@{}",
            last_tick.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        )
    );
    for e in [skip, a, b] {
        e.shutdown().await;
    }
    // a bad name or template is refused at start
    let bad = Engine::builder(ctx.store.clone())
        .handler("HOURLY", handler_fn(|_t: Task| async { Ok(()) }), opts())
        .periodic(Periodic::new("has space", hourly.clone(), template()))
        .start();
    assert_eq!(
        bad.err().map(|e| e.kind()),
        Some(backstop_core::ErrorKind::Config)
    );
}

/// An engine with a daily `CatchUpOne` periodic ("daily", the handler counting runs per
/// tick) and `retention` for succeeded tasks.
fn daily_engine<S: TaskStore + Clone>(
    store: S,
    ran: &Arc<Mutex<HashMap<String, usize>>>,
    retention: Option<Duration>,
) -> Engine<S> {
    let ran = Arc::clone(ran);
    let handler = handler_fn(move |task: Task| {
        let ran = Arc::clone(&ran);
        async move {
            *ran.lock().unwrap().entry(task.biz_key.clone()).or_default() += 1;
            Ok(())
        }
    });
    let daily = Schedule::every(Duration::from_secs(24 * 3600)).unwrap();
    Engine::builder(store)
        .config(
            fast_config()
                .first_poll_delay(Duration::ZERO)
                .retention(retention),
        )
        .handler("DAILY", handler, opts())
        .periodic(
            Periodic::new("daily", daily, NewTask::new("DAILY", "-")).missed(Missed::CatchUpOne),
        )
        .start()
        .unwrap()
}

/// A tick computed by an instance after that tick's task has already finished is not
/// run again: the tick's row keeps its key (`Dedup::Forever`, not only while active).
/// Instance A catches up the latest daily tick at start and runs it; later instance B
/// starts and computes the same tick: its enqueue is a duplicate, the tick ran once.
pub async fn engine_periodic_tick_computed_after_its_task_finished_runs_once<H: Harness>(
    ctx: &Ctx<H>,
) {
    let ran: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let a = daily_engine(ctx.store.clone(), &ran, None);
    eventually("A to run the caught-up tick", || async {
        ran.lock().unwrap().len() == 1
    })
    .await;
    let row = ctx
        .store
        .list(&backstop_core::TaskFilter::default().event_type("DAILY"))
        .await
        .unwrap();
    let row = wait_status(&ctx.store, row[0].id, Status::Succeeded).await;
    a.shutdown().await;
    let b = daily_engine(ctx.new_store().await, &ran, None);
    tokio::time::sleep(Duration::from_millis(500)).await;
    b.shutdown().await;
    let rows = ctx
        .store
        .list(&backstop_core::TaskFilter::default().event_type("DAILY"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!((rows[0].id, rows[0].status), (row.id, Status::Succeeded));
    let ran = ran.lock().unwrap().clone();
    assert_eq!(ran.get(&row.biz_key), Some(&1), "{ran:?}");
}

/// Catch-up is bounded by retention: a tick older than the succeeded tasks' retention
/// may have had its row purged, and is not caught up (it would run again). A catches up
/// the latest daily tick and runs it; its row is purged; B, whose retention (1 s) is
/// shorter than the tick's age, starts and enqueues nothing: the tick ran once.
pub async fn engine_catch_up_never_reruns_a_tick_retention_removed<H: Harness>(ctx: &Ctx<H>) {
    let ran: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let a = daily_engine(ctx.store.clone(), &ran, None);
    eventually("A to run the caught-up tick", || async {
        ran.lock().unwrap().len() == 1
    })
    .await;
    let rows = ctx
        .store
        .list(&backstop_core::TaskFilter::default().event_type("DAILY"))
        .await
        .unwrap();
    let row = wait_status(&ctx.store, rows[0].id, Status::Succeeded).await;
    a.shutdown().await;
    // retention removes it (as the retention job would, later)
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        ctx.store
            .purge_succeeded(Duration::from_millis(1), 100)
            .await
            .unwrap(),
        1
    );
    let b = daily_engine(ctx.new_store().await, &ran, Some(Duration::from_secs(1)));
    tokio::time::sleep(Duration::from_millis(500)).await;
    b.shutdown().await;
    let rows = ctx
        .store
        .list(&backstop_core::TaskFilter::default().event_type("DAILY"))
        .await
        .unwrap();
    assert!(rows.is_empty(), "the purged tick enqueued again: {rows:?}");
    let ran = ran.lock().unwrap().clone();
    assert_eq!(ran.get(&row.biz_key), Some(&1), "{ran:?}");
}

/// Periodic tasks added and removed while the engine runs: an added one fires its ticks
/// (each run once) from the moment it is added; a removed one fires no more (counted
/// over five intervals); a duplicate name or a bad name is `InvalidInput` and adds
/// nothing; a cron in a time zone added with `CatchUpOne` fires its latest past tick at
/// once (keyed by that tick's instant); once the engine stops, adding is `Conflict`.
pub async fn engine_adds_and_removes_periodic_tasks_at_runtime<H: Harness>(ctx: &Ctx<H>) {
    let interval = Duration::from_millis(200);
    let calls = Calls::default();
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config().first_poll_delay(Duration::ZERO))
        .handler("TICK", succeeding(&calls), opts())
        .start()
        .unwrap();
    assert!(engine.periodic_names().is_empty());
    let beat = Periodic::new(
        "beat",
        Schedule::every(interval).unwrap(),
        NewTask::new("TICK", "-"),
    );
    engine.add_periodic(beat.clone()).unwrap();
    let e = engine.add_periodic(beat).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains("\"beat\""), "{e}");
    let bad = Periodic::new(
        "bad name!",
        Schedule::every(interval).unwrap(),
        NewTask::new("TICK", "-"),
    );
    let e = engine.add_periodic(bad).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert_eq!(engine.periodic_names(), vec!["beat".to_owned()]);

    let ticks = || async {
        ctx.store
            .list(
                &backstop_core::TaskFilter::default()
                    .event_type("TICK")
                    .limit(1000),
            )
            .await
            .unwrap()
    };
    eventually("three ticks of the added task to run", || async {
        ticks()
            .await
            .iter()
            .filter(|t| t.status == Status::Succeeded)
            .count()
            >= 3
    })
    .await;
    assert!(engine.remove_periodic("beat"));
    assert!(!engine.remove_periodic("beat"));
    assert!(engine.periodic_names().is_empty());
    tokio::time::sleep(interval).await; // a tick on its way at the removal lands
    let fired = ticks().await.len();
    tokio::time::sleep(5 * interval).await;
    assert_eq!(ticks().await.len(), fired, "no tick after the removal");

    // a zoned cron, caught up at once: the tick of the current minute (Kathmandu's
    // offset, 5:45, keeps minutes whole)
    let every_minute = Schedule::cron("* * * * *")
        .unwrap()
        .in_zone("Asia/Kathmandu")
        .unwrap();
    let before = every_minute.at_or_before(chrono::Utc::now());
    let zoned = Periodic::new("zoned", every_minute.clone(), NewTask::new("TICK", "-"))
        .missed(Missed::CatchUpOne);
    engine.add_periodic(zoned).unwrap();
    eventually("the zoned task's caught-up tick", || async {
        ticks()
            .await
            .iter()
            .any(|t| t.biz_key.starts_with("zoned@"))
    })
    .await;
    let after = every_minute.at_or_before(chrono::Utc::now());
    let key = |t: chrono::DateTime<chrono::Utc>| {
        format!(
            "zoned@{}",
            t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        )
    };
    let zoned: Vec<String> = ticks()
        .await
        .into_iter()
        .map(|t| t.biz_key)
        .filter(|k| k.starts_with("zoned@"))
        .collect();
    assert!(
        zoned.iter().all(|k| *k == key(before) || *k == key(after)),
        "{zoned:?} vs {before} / {after}"
    );
    engine.shutdown().await;
    let beats = ticks().await;
    let beats: Vec<&Task> = beats
        .iter()
        .filter(|t| t.biz_key.starts_with("beat@"))
        .collect();
    assert!(beats.len() >= 3);
    for t in beats {
        let runs = calls.count(&t.biz_key);
        match t.status {
            Status::Succeeded => assert_eq!(runs, 1, "{}", t.biz_key),
            _ => assert_eq!(runs, 0, "{} is {}", t.biz_key, t.status),
        }
    }
    let late = Periodic::new(
        "late",
        Schedule::every(interval).unwrap(),
        NewTask::new("TICK", "-"),
    );
    let e = engine.add_periodic(late).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
}
