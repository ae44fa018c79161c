//! A 3-step no-op saga against 3 chained tasks (each task's handler enqueues the next and
//! runs it ahead, as a user chains tasks by hand): throughput with many at once, and
//! step-to-step latency one at a time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use backstop::{
    handler_fn, AnyStore, Engine, EngineConfig, HandlerError, HandlerOptions, NewTask, SagaDef,
    SagaFilter, SagaStatus, SagaStep, SagaSteps, Task, TaskStore,
};
use hdrhistogram::Histogram;

use crate::raw::{histogram, record};
use crate::sys::{self, Row};
use crate::{lat, wait_succeeded, Target};

/// When one step's code started and ended.
type Span = (Option<Instant>, Option<Instant>);

/// When each step of each saga (or chain) started and ended, by key.
#[derive(Clone, Default)]
struct Times(Arc<Mutex<HashMap<String, [Span; 3]>>>);

impl Times {
    fn start(&self, key: &str, step: usize) {
        let mut all = self.0.lock().unwrap();
        all.entry(key.to_owned()).or_default()[step].0 = Some(Instant::now());
    }

    fn end(&self, key: &str, step: usize) {
        let mut all = self.0.lock().unwrap();
        all.entry(key.to_owned()).or_default()[step].1 = Some(Instant::now());
    }

    /// Step-to-step gaps: the end of a step's code to the start of the next step's.
    fn gaps(&self) -> Histogram<u64> {
        let mut h = histogram();
        for steps in self.0.lock().unwrap().values() {
            for pair in steps.windows(2) {
                if let ((_, Some(end)), (Some(start), _)) = (pair[0], pair[1]) {
                    record(&mut h, start.saturating_duration_since(end));
                }
            }
        }
        h
    }
}

/// This process's mark on its saga keys: each round empties the saga tables, but a key
/// started by another process on the same server (a run beside this one) would answer
/// its old saga.
fn run_id() -> u128 {
    static RUN: OnceLock<u128> = OnceLock::new();
    *RUN.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    })
}

fn config() -> EngineConfig {
    EngineConfig::default()
        .poll_interval(Duration::from_millis(5))
        .first_poll_delay(Duration::ZERO)
        .retention(None)
}

fn options() -> HandlerOptions {
    HandlerOptions::default()
        .concurrency(64)
        .queue_capacity(256)
}

fn saga_def() -> SagaDef {
    SagaDef::builder("bench3")
        .step(SagaStep::new("s1"))
        .step(SagaStep::new("s2"))
        .step(SagaStep::new("s3"))
        .build()
        .expect("definition")
}

/// An engine running the saga's three no-op steps, timing them.
fn saga_engine(store: AnyStore, times: &Times, done: &Arc<AtomicUsize>) -> Engine<AnyStore> {
    let mut steps = SagaSteps::new();
    for (i, name) in ["s1", "s2", "s3"].into_iter().enumerate() {
        let (times, done) = (times.clone(), Arc::clone(done));
        steps = steps.action(name, move |cx| {
            let (times, done) = (times.clone(), Arc::clone(&done));
            async move {
                let key = cx.saga().key.clone();
                times.start(&key, i);
                times.end(&key, i);
                if i == 2 {
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            }
        });
    }
    Engine::builder(store)
        .config(config())
        .saga(saga_def(), steps, options())
        .start()
        .expect("engine")
}

/// An engine running three chained task types, each enqueueing the next and running it
/// ahead, timing them.
fn chain_engine(store: AnyStore, times: &Times, done: &Arc<AtomicUsize>) -> Engine<AnyStore> {
    let me: Arc<OnceLock<Engine<AnyStore>>> = Arc::default();
    let mut builder = Engine::builder(store).config(config());
    for (i, event) in ["CHAIN1", "CHAIN2", "CHAIN3"].into_iter().enumerate() {
        let (times, done, me) = (times.clone(), Arc::clone(done), Arc::clone(&me));
        let handler = handler_fn(move |task: Task| {
            let (times, done, me) = (times.clone(), Arc::clone(&done), Arc::clone(&me));
            async move {
                times.start(&task.biz_key, i);
                times.end(&task.biz_key, i);
                match i {
                    2 => {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        let engine = me.get().ok_or_else(|| HandlerError::retry("starting"))?;
                        let next = NewTask::new(format!("CHAIN{}", i + 2), task.biz_key.clone());
                        engine.enqueue(next).await?;
                    }
                }
                Ok::<_, HandlerError>(())
            }
        });
        builder = builder.handler(event, handler, options());
    }
    let engine = builder.start().expect("engine");
    let _ = me.set(engine.clone());
    engine
}

/// N sagas (or chains) started before the engine, then drained: the time until the last
/// is recorded done, with the step-to-step gaps.
async fn drained(t: &Target, n: usize, saga: bool, round: usize) -> (Duration, Times, f64, f64) {
    t.raw.reset().await;
    let store = t.store(16).await;
    t.raw.reset_sagas().await;
    let def = saga_def();
    let run = run_id();
    let keys: Vec<String> = (0..n).map(|i| format!("{run}-r{round}-{i}")).collect();
    if saga {
        for chunk in keys.chunks(64) {
            let mut all = tokio::task::JoinSet::new();
            for k in chunk {
                let (store, start) = (store.clone(), def.start(k, &()).expect("start"));
                all.spawn(async move { store.start_saga(&start).await.expect("start saga") });
            }
            all.join_all().await;
        }
    } else {
        let firsts: Vec<NewTask> = keys.iter().map(|k| NewTask::new("CHAIN1", k)).collect();
        for chunk in firsts.chunks(1000) {
            store.enqueue_many(chunk).await.expect("enqueue");
        }
    }
    let (times, done) = (Times::default(), Arc::new(AtomicUsize::new(0)));
    let m = sys::Meter::start();
    let started = Instant::now();
    let engine = match saga {
        true => saga_engine(store.clone(), &times, &done),
        false => chain_engine(store.clone(), &times, &done),
    };
    while done.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    if saga {
        let running = SagaFilter::default()
            .name("bench3")
            .status(SagaStatus::Running)
            .limit(1);
        while !store.sagas(&running).await.expect("sagas").is_empty() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    } else {
        wait_succeeded(&store, 3 * n as u64).await;
    }
    let elapsed = started.elapsed();
    let (rss, cpu) = m.stop();
    engine.shutdown().await;
    (elapsed, times, rss, cpu)
}

/// One saga (or chain) at a time: the step-to-step gaps on an otherwise idle engine.
async fn one_at_a_time(t: &Target, count: usize, saga: bool, round: usize) -> Histogram<u64> {
    t.raw.reset().await;
    let store = t.store(4).await;
    t.raw.reset_sagas().await;
    let def = saga_def();
    let (times, done) = (Times::default(), Arc::new(AtomicUsize::new(0)));
    let engine = match saga {
        true => saga_engine(store.clone(), &times, &done),
        false => chain_engine(store.clone(), &times, &done),
    };
    for i in 0..count {
        let key = format!("{}-l{round}-{i}", run_id());
        match saga {
            true => {
                let started = store
                    .start_saga(&def.start(&key, &()).expect("start"))
                    .await
                    .expect("start saga");
                // the first step by its poll: the latency measured is step to step
                let _ = started;
            }
            false => {
                engine
                    .enqueue(NewTask::new("CHAIN1", key.clone()))
                    .await
                    .expect("enqueue");
            }
        }
        while done.load(Ordering::Relaxed) <= i {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    }
    engine.shutdown().await;
    times.gaps()
}

/// The saga scenario's row: sagas/s against chains/s, and the step-to-step latency of
/// each, one at a time.
pub(crate) async fn saga_vs_chain(t: &Target, n: usize, one_by_one: usize, rounds: usize) -> Row {
    let mut ratios = Vec::new();
    let (mut best, mut rss, mut cpu) = (None::<(f64, f64)>, 0.0, 0.0);
    for round in 0..rounds.max(1) {
        let (saga, _, r, c) = drained(t, n, true, round).await;
        let (chain, _, _, _) = drained(t, n, false, round).await;
        let (s, ch) = (
            n as f64 / saga.as_secs_f64(),
            n as f64 / chain.as_secs_f64(),
        );
        ratios.push(s / ch);
        if round == 0 {
            (rss, cpu) = (r, c);
        }
        best = Some(best.map_or((s, ch), |(bs, bc)| (bs.max(s), bc.max(ch))));
    }
    let mut sorted = ratios.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let (saga_tps, chain_tps) = best.unwrap_or_default();
    let saga_lat = one_at_a_time(t, one_by_one, true, 0).await;
    let chain_lat = one_at_a_time(t, one_by_one, false, 0).await;
    Row {
        backend: t.backend.into(),
        scenario: format!("saga of 3 no-op steps vs 3 chained tasks, {n} at once"),
        tps: Some(saga_tps),
        base_tps: Some(chain_tps),
        lat: lat(&saga_lat),
        base_lat: lat(&chain_lat),
        rss_mb: rss,
        cpu_s: cpu,
        note: format!(
            "sagas/s vs chains/s (each task's handler enqueues the next and runs it ahead); \
             median ratio {median:.2} over {} round(s) ({}); latency: step to step, {one_by_one} \
             one at a time",
            ratios.len(),
            ratios
                .iter()
                .map(|r| format!("{r:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        ..Row::default()
    }
}
