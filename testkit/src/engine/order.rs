//! Order keys under engines: one at a time per key, in order, keys in parallel.

use super::*;

/// 1,000 tasks over 20 order keys, two engine instances: every key's tasks run one at a
/// time and in enqueue order (a failure with retries left holding its successors back),
/// while different keys run side by side; each task succeeds once.
pub async fn engine_runs_each_order_key_in_order_and_keys_in_parallel<H: Harness>(ctx: &Ctx<H>) {
    const KEYS: usize = 20;
    const PER_KEY: usize = 50;
    // enqueue in rounds over the keys, from 4 producers each owning 5 keys: each key's
    // tasks are enqueued in sequence order
    let mut producers = Vec::new();
    for p in 0..4 {
        let s = ctx.store.clone();
        producers.push(tokio::spawn(async move {
            for seq in 0..PER_KEY {
                for k in (p..KEYS).step_by(4) {
                    let task = NewTask::new("ORDERED", format!("k{k}-{seq}"))
                        .order_key(format!("k{k}"))
                        .json(&seq)
                        .retry(RetryPolicy::fixed(3, Duration::from_millis(20)));
                    s.enqueue(task).await.unwrap();
                }
            }
        }));
    }
    crate::joined("the producers", producers).await;
    #[derive(Default)]
    struct Seen {
        /// per key: the sequence numbers in the order they succeeded
        done: HashMap<String, Vec<usize>>,
        /// keys with a task in a handler right now: the task's business key and attempt
        running: HashMap<String, (String, u32)>,
        /// (the task running, the task that started beside it), each with its attempt
        overlaps: Vec<((String, u32), (String, u32))>,
        max_parallel_keys: usize,
        attempts: HashMap<String, usize>,
    }
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let make = || {
        let seen = Arc::clone(&seen);
        handler_fn(move |task: Task| {
            let seen = Arc::clone(&seen);
            async move {
                let key = task.order_key.clone().unwrap();
                let seq: usize = task.payload_as().unwrap();
                {
                    let mut s = seen.lock().unwrap();
                    let me = (task.biz_key.clone(), task.attempts);
                    if let Some(other) = s.running.insert(key.clone(), me.clone()) {
                        s.overlaps.push((other, me));
                    }
                    s.max_parallel_keys = s.max_parallel_keys.max(s.running.len());
                    *s.attempts.entry(task.biz_key.clone()).or_default() += 1;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                let mut s = seen.lock().unwrap();
                s.running.remove(&key);
                // every 7th task fails its first attempt: its successors must wait
                if seq % 7 == 3 && task.attempts == 1 {
                    return Err(HandlerError::retry("first attempt fails"));
                }
                s.done.entry(key).or_default().push(seq);
                Ok(())
            }
        })
    };
    let mut engines = Vec::new();
    for _ in 0..2 {
        let store = ctx.new_store().await;
        engines.push(
            Engine::builder(store)
                .config(fast_config())
                .handler("ORDERED", make(), opts().concurrency(8))
                .start()
                .unwrap(),
        );
    }
    all_succeed(&ctx.store, (KEYS * PER_KEY) as u64).await;
    for e in &engines {
        e.shutdown().await;
    }
    let s = seen.lock().unwrap();
    assert!(
        s.overlaps.is_empty(),
        "two tasks of one key ran at once: {:?}",
        s.overlaps
    );
    for k in 0..KEYS {
        let done = &s.done[&format!("k{k}")];
        assert_eq!(
            done,
            &(0..PER_KEY).collect::<Vec<_>>(),
            "key k{k} ran out of order"
        );
    }
    for (biz, n) in &s.attempts {
        let seq: usize = biz.rsplit('-').next().unwrap().parse().unwrap();
        let expected = if seq % 7 == 3 { 2 } else { 1 };
        assert_eq!(*n, expected, "{biz} ran {n} times");
    }
    assert!(
        s.max_parallel_keys > 1,
        "keys should run side by side, at most {} did",
        s.max_parallel_keys
    );
    let runs: usize = engines
        .iter()
        .map(|e| e.counters().succeeded as usize)
        .sum();
    assert_eq!(runs, KEYS * PER_KEY);
    let per_engine: Vec<u64> = engines.iter().map(|e| e.counters().succeeded).collect();
    assert!(
        per_engine.iter().all(|&n| n > 0),
        "both instances ran tasks: {per_engine:?}"
    );
}
