//! Attempts and their outcomes: retries, backoff, permanent failures, panics, timeouts.

use super::*;

/// retries: the backoff is honoured between attempts, and a retry never runs ahead.
pub async fn engine_retries_with_backoff_then_succeeds<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let backoff = Duration::from_millis(300);
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config())
        .handler(
            "PAY",
            flaky(calls.clone(), 2),
            opts().retry(RetryPolicy::fixed(5, backoff)),
        )
        .start()
        .unwrap();
    let (enq, run) = engine.enqueue(engine.task("PAY", "o1")).await.unwrap();
    assert_eq!(run, RunAhead::Started);
    eventually("first attempt to fail", || async {
        let t = ctx.store.get(enq.id).await.unwrap().unwrap();
        t.status == Status::Pending && t.attempts == 1
    })
    .await;
    assert_eq!(
        engine.run_now(&enq).await,
        RunAhead::NotClaimed,
        "a retry waits for its backoff; it is not run ahead"
    );
    let t = wait_status(&ctx.store, enq.id, Status::Succeeded).await;
    assert_eq!(t.attempts, 3);
    assert_eq!(t.last_error, None);
    let times = calls.times("o1");
    assert_eq!(times.len(), 3);
    for w in times.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            gap + Duration::from_millis(5) >= backoff,
            "attempts {gap:?} apart, backoff is {backoff:?}"
        );
    }
    let c = engine.counters();
    assert_eq!((c.retried, c.succeeded, c.failed), (2, 1, 0));
    engine.shutdown().await;
}

/// attempts exhausted → failed; an operator's reset runs it again to success.
pub async fn engine_fails_after_max_attempts_then_reset_runs_again<H: Harness>(ctx: &Ctx<H>) {
    let fixed = Arc::new(AtomicBool::new(false));
    let calls = Calls::default();
    let handler = {
        let fixed = Arc::clone(&fixed);
        recording(calls.clone(), move |_, _task| {
            let ok = fixed.load(Ordering::SeqCst);
            async move {
                if ok {
                    Ok(())
                } else {
                    Err(HandlerError::retry("contract service rejects the request"))
                }
            }
        })
    };
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config())
        .handler(
            "CONTRACT",
            handler,
            opts().retry(RetryPolicy::fixed(3, Duration::from_millis(10))),
        )
        .start()
        .unwrap();
    let (enq, _) = engine.enqueue(engine.task("CONTRACT", "c1")).await.unwrap();
    let t = wait_status(&ctx.store, enq.id, Status::Failed).await;
    assert_eq!(t.attempts, 3);
    assert_eq!(t.owner, None);
    assert_eq!(
        t.last_error.as_deref(),
        Some("contract service rejects the request")
    );
    assert_eq!(calls.count("c1"), 3);
    // counted once (a count of 2 would time out here too)
    eventually("the failure to be counted once", || async {
        engine.counters().failed == 1
    })
    .await;
    assert_eq!(engine.counters().failed, 1);
    fixed.store(true, Ordering::SeqCst);
    let reset = ctx.store.manual_reset(enq.id, HOUR).await.unwrap();
    assert_eq!((reset.status, reset.attempts), (Status::Pending, 0));
    engine.poll_now();
    let t = wait_status(&ctx.store, enq.id, Status::Succeeded).await;
    assert_eq!(t.attempts, 1);
    assert_eq!(calls.count("c1"), 4);
    engine.shutdown().await;
}

/// pre_check_skip: the business is already done → succeeded without running.
pub async fn engine_pre_check_skip_marks_success_without_running<H: Harness>(ctx: &Ctx<H>) {
    struct AlreadyDone(Calls);
    #[backstop_core::async_trait]
    impl Handler for AlreadyDone {
        async fn handle(&self, task: &Task) -> Result<(), HandlerError> {
            self.0.record(&task.biz_key);
            Ok(())
        }
        async fn pre_check_skip(&self, task: &Task) -> Result<bool, HandlerError> {
            Ok(task.biz_key.starts_with("done-"))
        }
    }
    let calls = Calls::default();
    let engine = Engine::builder(ctx.store.clone())
        .config(no_poll_config())
        .handler("PAY", AlreadyDone(calls.clone()), opts())
        .start()
        .unwrap();
    let (a, _) = engine.enqueue(engine.task("PAY", "done-1")).await.unwrap();
    let (b, _) = engine.enqueue(engine.task("PAY", "new-1")).await.unwrap();
    let ta = wait_status(&ctx.store, a.id, Status::Succeeded).await;
    wait_status(&ctx.store, b.id, Status::Succeeded).await;
    assert_eq!(ta.attempts, 1);
    assert_eq!(calls.count("done-1"), 0, "skipped: handle never ran");
    assert_eq!(calls.count("new-1"), 1);
    let c = engine.counters();
    assert_eq!((c.skipped, c.succeeded), (1, 2));
    engine.shutdown().await;
}

/// a panic in a handler is caught and retried like an error.
pub async fn engine_catches_a_panicking_handler_and_retries<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let handler = recording(calls.clone(), |n, _task| async move {
        if n == 1 {
            panic!("boom in the handler");
        }
        Ok(())
    });
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config())
        .handler(
            "PAY",
            handler,
            opts().retry(RetryPolicy::fixed(3, Duration::from_millis(300))),
        )
        .start()
        .unwrap();
    let (enq, _) = engine.enqueue(engine.task("PAY", "p1")).await.unwrap();
    eventually("the panic to be recorded as a retry", || async {
        let t = ctx.store.get(enq.id).await.unwrap().unwrap();
        t.status == Status::Pending && t.attempts == 1
    })
    .await;
    let t = ctx.task(enq.id).await;
    assert_eq!(
        t.last_error.as_deref(),
        Some("handler panicked: boom in the handler")
    );
    let t = wait_status(&ctx.store, enq.id, Status::Succeeded).await;
    assert_eq!(t.attempts, 2);
    let c = engine.counters();
    assert_eq!((c.panics, c.retried, c.succeeded), (1, 1, 1));
    engine.shutdown().await;
}

/// an attempt over its timeout is abandoned and retried.
pub async fn engine_times_out_a_slow_handler_and_retries<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let finished_slow = Arc::new(AtomicBool::new(false));
    let handler = {
        let finished_slow = Arc::clone(&finished_slow);
        recording(calls.clone(), move |n, _task| {
            let finished_slow = Arc::clone(&finished_slow);
            async move {
                if n == 1 {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    finished_slow.store(true, Ordering::SeqCst);
                }
                Ok(())
            }
        })
    };
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config())
        .handler(
            "PAY",
            handler,
            opts()
                .timeout(Duration::from_millis(150))
                .retry(RetryPolicy::fixed(3, Duration::from_millis(300))),
        )
        .start()
        .unwrap();
    let (enq, _) = engine.enqueue(engine.task("PAY", "slow")).await.unwrap();
    eventually("the timeout to be recorded as a retry", || async {
        let t = ctx.store.get(enq.id).await.unwrap().unwrap();
        t.status == Status::Pending && t.attempts == 1
    })
    .await;
    assert_eq!(
        ctx.task(enq.id).await.last_error.as_deref(),
        Some("timed out after 150ms")
    );
    let t = wait_status(&ctx.store, enq.id, Status::Succeeded).await;
    assert_eq!(t.attempts, 2);
    assert!(
        !finished_slow.load(Ordering::SeqCst),
        "the slow attempt was abandoned"
    );
    assert_eq!(engine.counters().timeouts, 1);
    engine.shutdown().await;
}

/// a payload that does not decode is a permanent failure that says why.
pub async fn engine_undecodable_payload_fails_permanently<H: Harness>(ctx: &Ctx<H>) {
    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Pay {
        order_id: u64,
    }
    struct PayHandler(Calls);
    #[backstop_core::async_trait]
    impl JsonHandler for PayHandler {
        type Payload = Pay;
        async fn handle(&self, pay: Pay, _task: &Task) -> Result<(), HandlerError> {
            self.0.record(&pay.order_id.to_string());
            Ok(())
        }
    }
    let calls = Calls::default();
    let engine = Engine::builder(ctx.store.clone())
        .config(no_poll_config())
        .handler("PAY", Json(PayHandler(calls.clone())), opts())
        .start()
        .unwrap();
    let (good, _) = engine
        .enqueue(
            engine
                .task("PAY", "g")
                .json(&serde_json::json!({"order_id": 7})),
        )
        .await
        .unwrap();
    let (bad, _) = engine
        .enqueue(
            engine
                .task("PAY", "b")
                .json(&serde_json::json!({"order": "x"})),
        )
        .await
        .unwrap();
    wait_status(&ctx.store, good.id, Status::Succeeded).await;
    let t = wait_status(&ctx.store, bad.id, Status::Failed).await;
    assert_eq!(t.attempts, 1, "no retries for a permanent failure");
    let err = t.last_error.unwrap();
    assert!(
        err.contains("payload does not decode") && err.contains("order_id"),
        "{err}"
    );
    assert_eq!(calls.count("7"), 1);
    engine.shutdown().await;
}

/// a handler's retry-after overrides the backoff, exactly.
pub async fn engine_retry_after_overrides_the_backoff<H: Harness>(ctx: &Ctx<H>) {
    let engine = Engine::builder(ctx.store.clone())
        .config(no_poll_config())
        .handler(
            "PAY",
            handler_fn(|_task: Task| async move {
                Err(HandlerError::retry_after(
                    Duration::from_secs(42),
                    "429 from the bank",
                ))
            }),
            opts(),
        )
        .start()
        .unwrap();
    let (enq, _) = engine.enqueue(engine.task("PAY", "k")).await.unwrap();
    let t = wait_status(&ctx.store, enq.id, Status::Pending).await;
    let t = if t.attempts == 0 {
        eventually("the attempt to be recorded", || async {
            ctx.store.get(enq.id).await.unwrap().unwrap().attempts == 1
        })
        .await;
        ctx.task(enq.id).await
    } else {
        t
    };
    assert_eq!(t.last_error.as_deref(), Some("429 from the bank"));
    assert_eq!(
        t.next_run_at - t.updated_at,
        chrono_dur(Duration::from_secs(42))
    );
    engine.shutdown().await;
}

/// A handler's cancel (`HandlerError::cancel`): the task ends cancelled with the reason,
/// after one attempt, with attempts left unspent; counted as cancelled, not failed. The
/// next task of its order key goes on at once.
pub async fn engine_handler_cancels_its_own_task<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let handler = recording(calls.clone(), |_n, task: Task| async move {
        match task.biz_key.as_str() {
            "first" => Err(HandlerError::cancel("the order was withdrawn")),
            _ => Ok(()),
        }
    });
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config().first_poll_delay(Duration::ZERO))
        .handler("PAY", handler, opts())
        .start()
        .unwrap();
    let (first, _) = engine
        .enqueue(engine.task("PAY", "first").order_key("acct-9"))
        .await
        .unwrap();
    let (second, _) = engine
        .enqueue(engine.task("PAY", "second").order_key("acct-9"))
        .await
        .unwrap();
    let c = wait_status(&ctx.store, first.id, Status::Cancelled).await;
    assert_eq!(
        (c.attempts, c.owner.as_deref(), c.last_error.as_deref()),
        (1, None, Some("the order was withdrawn"))
    );
    assert!(c.has_attempts_left());
    let s = wait_status(&ctx.store, second.id, Status::Succeeded).await;
    assert_eq!(s.attempts, 1);
    let k = engine.counters();
    assert_eq!((k.cancelled, k.failed, k.retried), (1, 0, 0), "{k:?}");
    engine.shutdown().await;
    assert_eq!((calls.count("first"), calls.count("second")), (1, 1));
}

/// A handler's snooze (`HandlerError::snooze`): the task runs again after the delay
/// without spending an attempt, so a task with one attempt snoozed three times then
/// succeeds (4 calls, attempts 1, no retry counted). Past the type's `max_snoozes` (2
/// here) a snooze spends an attempt: snoozing for ever, a task of 2 attempts fails after
/// 4 calls (2 snoozes given back, then 2 that spend the attempts), its last error saying
/// so; those two count as a retry and a failure, not as snoozes. Each call sees the
/// task's snooze count (`Task::snoozes`).
pub async fn engine_handler_snoozes_without_spending_attempts<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let snoozer = |calls: &Calls| {
        recording(calls.clone(), |n, task: Task| async move {
            let wait = Duration::from_millis(30);
            let seen = if task.biz_key == "never" {
                (n - 1).min(2)
            } else {
                n - 1
            };
            if task.snoozes as usize != seen {
                // the handler sees how often it snoozed (STRICT's bound stops the count at 2)
                return Err(HandlerError::fail(format!(
                    "call {n} saw {} snoozes",
                    task.snoozes
                )));
            }
            match task.biz_key.as_str() {
                "waits" if n <= 3 => Err(HandlerError::snooze(wait, "the upload is not there yet")),
                "waits" => Ok(()),
                _ => Err(HandlerError::snooze(wait, "never ready")),
            }
        })
    };
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config().first_poll_delay(Duration::ZERO))
        .handler("UPLOAD", snoozer(&calls), opts())
        .handler("STRICT", snoozer(&calls), opts().max_snoozes(2))
        .start()
        .unwrap();
    let once = RetryPolicy::fixed(1, Duration::from_secs(600));
    let twice = RetryPolicy::fixed(2, Duration::ZERO);
    let (waits, _) = engine
        .enqueue(engine.task("UPLOAD", "waits").retry(once))
        .await
        .unwrap();
    let (never, _) = engine
        .enqueue(engine.task("STRICT", "never").retry(twice))
        .await
        .unwrap();
    let w = wait_status(&ctx.store, waits.id, Status::Succeeded).await;
    assert_eq!((w.attempts, w.last_error.as_deref()), (1, None));
    let f = wait_status(&ctx.store, never.id, Status::Failed).await;
    assert_eq!(f.attempts, 2);
    let error = f.last_error.unwrap_or_default();
    assert!(
        error.starts_with("snoozed more than 2 times") && error.ends_with("never ready"),
        "{error}"
    );
    engine.shutdown().await;
    assert_eq!((calls.count("waits"), calls.count("never")), (4, 4));
    let k = engine.counters();
    assert_eq!(
        (k.snoozed, k.retried, k.failed),
        (5, 1, 1),
        "three and two snoozes; past its bound a snooze counts as the retry it is, and the \
         last as the failure: {k:?}"
    );
}

/// jitter: tasks that fail together come back spread over `[w · (1 − jitter), w]` (`w`
/// the backoff's wait), never later than the backoff says.
pub async fn engine_spreads_retries_of_tasks_that_failed_together<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let wait = Duration::from_secs(600);
    let engine = Engine::builder(ctx.store.clone())
        .config(no_poll_config())
        .handler(
            "PAY",
            flaky(calls.clone(), 1),
            opts().retry(RetryPolicy::exponential(3, wait).jitter(50)),
        )
        .start()
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..20 {
        let (e, run) = engine
            .enqueue(engine.task("PAY", format!("o{i}")))
            .await
            .unwrap();
        assert_eq!(run, RunAhead::Started);
        ids.push(e.id);
    }
    let mut waits = std::collections::BTreeSet::new();
    for id in ids {
        eventually("the first attempt to fail", || async {
            let t = ctx.store.get(id).await.unwrap().unwrap();
            t.status == Status::Pending && t.attempts == 1
        })
        .await;
        let t = ctx.task(id).await;
        let waited = (t.next_run_at - t.updated_at).num_milliseconds();
        assert!(
            (300_000..=600_000).contains(&waited),
            "task {id} waits {waited} ms; the backoff says 600 s, jitter 50 %"
        );
        waits.insert(waited);
    }
    assert!(
        waits.len() >= 10,
        "20 retries should be spread out, got {waits:?}"
    );
    engine.shutdown().await;
}

/// a task's own timeout overrides its event type's, shorter or longer; it is stored with
/// the task and named in the error.
pub async fn engine_applies_a_tasks_own_timeout<H: Harness>(ctx: &Ctx<H>) {
    let slow = || {
        handler_fn(|_task: Task| async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok::<_, HandlerError>(())
        })
    };
    let once = RetryPolicy::fixed(1, Duration::ZERO);
    let engine = Engine::builder(ctx.store.clone())
        .config(no_poll_config())
        .handler("LONG_DEFAULT", slow(), opts().retry(once))
        .handler(
            "SHORT_DEFAULT",
            slow(),
            opts().retry(once).timeout(Duration::from_millis(100)),
        )
        .start()
        .unwrap();
    let short = engine
        .task("LONG_DEFAULT", "a")
        .timeout(Duration::from_millis(50));
    let (a, _) = engine.enqueue(short).await.unwrap();
    assert_eq!(
        ctx.task(a.id).await.timeout,
        Some(Duration::from_millis(50))
    );
    let long = engine
        .task("SHORT_DEFAULT", "b")
        .timeout(Duration::from_secs(5));
    let (b, _) = engine.enqueue(long).await.unwrap();
    let (c, _) = engine
        .enqueue(engine.task("SHORT_DEFAULT", "c"))
        .await
        .unwrap();
    assert_eq!(ctx.task(c.id).await.timeout, None);
    let ta = wait_status(&ctx.store, a.id, Status::Failed).await;
    assert!(
        ta.last_error
            .as_deref()
            .unwrap_or("")
            .contains("timed out after 50ms"),
        "{:?}",
        ta.last_error
    );
    wait_status(&ctx.store, b.id, Status::Succeeded).await;
    let tc = wait_status(&ctx.store, c.id, Status::Failed).await;
    assert!(
        tc.last_error
            .as_deref()
            .unwrap_or("")
            .contains("timed out after 100ms"),
        "{:?}",
        tc.last_error
    );
    let bad = engine
        .enqueue(engine.task("SHORT_DEFAULT", "d").timeout(Duration::ZERO))
        .await;
    assert_eq!(
        bad.unwrap_err().kind(),
        backstop_core::ErrorKind::InvalidInput
    );
    engine.shutdown().await;
}

/// Best-effort notification ([`RetryPolicy::best_effort_in`]): the policy round-trips
/// through the row; the retries follow the schedule (1, 5, 10, 30, 60 units apart, here
/// 20 ms units); when the schedule is used up (6 attempts) the task parks as failed
/// with a last error beginning "to reconcile:" and keeping the handler's. A task that
/// gets through before then succeeds with no such mark.
pub async fn engine_best_effort_follows_its_schedule_then_parks<H: Harness>(ctx: &Ctx<H>) {
    let unit = Duration::from_millis(20);
    let calls = Calls::default();
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config())
        .handler(
            "NOTIFY",
            flaky(calls.clone(), 100),
            opts().retry(RetryPolicy::best_effort_in(unit)),
        )
        .handler(
            "NOTIFY_OK",
            flaky(calls.clone(), 2),
            opts().retry(RetryPolicy::best_effort_in(unit)),
        )
        .start()
        .unwrap();
    let (enq, _) = engine.enqueue(engine.task("NOTIFY", "n1")).await.unwrap();
    let (ok, _) = engine
        .enqueue(engine.task("NOTIFY_OK", "n2"))
        .await
        .unwrap();
    let stored = ctx.task(enq.id).await;
    assert_eq!(stored.retry, RetryPolicy::best_effort_in(unit));
    let t = wait_status(&ctx.store, enq.id, Status::Failed).await;
    assert_eq!(t.attempts, 6);
    let error = t.last_error.unwrap_or_default();
    assert!(
        error.starts_with(RetryPolicy::TO_RECONCILE) && error.contains("downstream down (call 6)"),
        "{error}"
    );
    let times = calls.times("n1");
    assert_eq!(times.len(), 6);
    for (w, units) in times.windows(2).zip([1u32, 5, 10, 30, 60]) {
        let (gap, wait) = (w[1] - w[0], unit * units);
        assert!(
            gap + Duration::from_millis(5) >= wait,
            "attempts {gap:?} apart, the schedule says {wait:?}"
        );
    }
    let t = wait_status(&ctx.store, ok.id, Status::Succeeded).await;
    assert_eq!((t.attempts, t.last_error), (3, None));
    engine.shutdown().await;
}
