//! Property tests over the store's inputs: arbitrary event types, keys, payloads,
//! durations, limits, leases and filters, drawn from a seeded generator (the seed is in
//! every failure message; `BACKSTOP_FUZZ_SEED` replays one). Every call either succeeds
//! with what it was given, or is refused with `InvalidInput` and writes nothing; none
//! panics.

use std::panic::AssertUnwindSafe;

use backstop_core::{Audit, Dedup, Lease, Mark, Priority, WhenParked};
use futures_util::FutureExt;

use super::*;
use crate::gen::{seed, Gen};

/// How many inputs each case tries.
const ROUNDS: usize = 150;

/// The input generators of these cases.
trait Inputs {
    fn text(&mut self, max: usize) -> String;
    fn duration(&mut self) -> Duration;
    fn payload(&mut self) -> String;
    fn limit(&mut self) -> usize;
    fn new_task(&mut self, i: usize) -> NewTask;
}

impl Inputs for Gen {
    /// A string around the limits: valid and invalid characters, empty, at and past
    /// `max` bytes, multi-byte characters cut at the limit.
    fn text(&mut self, max: usize) -> String {
        let pieces: [&str; 21] = [
            "a", "Z", "0", "_", ".", ":", "-", " ", "é", "名", "\n", "\t", "\0", "'", "\"", "\\",
            "%", "😀", "/", ";", "--",
        ];
        match self.below(6) {
            0 => String::new(),
            1 => "x".repeat(max),
            2 => "x".repeat(max + 1),
            3 => "é".repeat(max / 2 + 1),
            _ => {
                let n = self.below(max as u64 + 8) as usize;
                let mut s = String::new();
                while s.len() < n {
                    let piece: &&str = self.pick(&pieces[..]);
                    s.push_str(piece);
                }
                s
            }
        }
    }

    fn duration(&mut self) -> Duration {
        match self.below(6) {
            0 => Duration::ZERO,
            1 => Duration::from_millis(self.below(100_000)),
            2 => Duration::from_secs(self.below(400 * 24 * 3600)),
            3 => Duration::MAX,
            4 => Duration::from_secs(u64::MAX / 2),
            _ => Duration::from_nanos(self.below(10_000)),
        }
    }

    fn payload(&mut self) -> String {
        match self.below(7) {
            0 => String::new(),
            1 => "not json".into(),
            2 => r#"{"a":1,"b":[true,null,"\u0000"]}"#.into(),
            3 => "[".repeat(200),
            4 => format!("\"{}\"", "x".repeat(self.below(70_000) as usize)),
            5 => "null".into(),
            _ => serde_json::json!({ "s": self.text(40) }).to_string(),
        }
    }

    fn limit(&mut self) -> usize {
        *self.pick(&[0, 1, 7, MAX_BATCH, MAX_BATCH + 1, usize::MAX])
    }

    fn new_task(&mut self, i: usize) -> NewTask {
        let event_type = if self.chance(50) {
            "E".to_string()
        } else {
            self.text(64)
        };
        let biz_key = if self.chance(50) {
            format!("k{i}")
        } else {
            self.text(128)
        };
        let mut t = NewTask::new(event_type, biz_key).payload_raw(self.payload());
        if self.chance(50) {
            let max = *self.pick(&[0, 1, 3, 10_000, 10_001, u32::MAX]);
            let policy = if self.chance(50) {
                RetryPolicy::fixed(max, self.duration())
            } else {
                RetryPolicy::exponential(max, self.duration())
                    .with_max_interval(self.duration())
                    .jitter(self.below(256) as u8)
            };
            t = t.retry(policy);
        }
        if self.chance(30) {
            t = t.delay(self.duration());
        }
        if self.chance(20) {
            let secs = *self.pick(&[-1_000_000_000_000i64, -1, 0, 3600, 1_000_000_000_000]);
            if let Some(at) = chrono::DateTime::from_timestamp(secs, 0) {
                t = t.run_at(at);
            }
        }
        if self.chance(30) {
            if let Ok(p) = Priority::new(self.below(256) as u8) {
                t = t.priority(p);
            }
        }
        if self.chance(30) {
            t = t.order_key(self.text(128));
        }
        if self.chance(20) {
            t = t.when_parked(*self.pick(&[WhenParked::Block, WhenParked::Skip]));
        }
        if self.chance(30) {
            let rule = match self.below(3) {
                0 => Dedup::WhileActive,
                1 => Dedup::Forever,
                _ => Dedup::Window(self.duration()),
            };
            t = t.dedup(rule);
        }
        if self.chance(20) {
            t = t.replace_pending(true);
        }
        t
    }
}

/// At most `n` bytes of `s`, cut at a character boundary.
fn clip(s: &str, n: usize) -> &str {
    let mut end = s.len().min(n);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Every row, in id order.
async fn rows<H: Harness>(ctx: &Ctx<H>) -> Vec<Task> {
    let mut f = TaskFilter::default();
    f.limit = MAX_BATCH;
    ctx.store.list(&f).await.unwrap()
}

/// Run `call`; a panic fails the case naming the seed and the input.
async fn no_panic<T>(
    seed: u64,
    input: &str,
    call: impl std::future::Future<Output = backstop_core::Result<T>>,
) -> backstop_core::Result<T> {
    match AssertUnwindSafe(call).catch_unwind().await {
        Ok(r) => r,
        Err(_) => panic!("seed {seed}: panicked on {input}"),
    }
}

/// An error that is not `InvalidInput` fails the case; so does one that wrote something.
fn refused(seed: u64, input: &str, e: &backstop_core::Error, before: &[Task], after: &[Task]) {
    assert_eq!(
        e.kind(),
        ErrorKind::InvalidInput,
        "seed {seed}: {input} failed with {e}"
    );
    assert!(!e.is_temporary(), "seed {seed}: {input}: {e}");
    assert_eq!(before, after, "seed {seed}: refused {input} but wrote");
}

/// enqueue of arbitrary tasks: each is stored as given (event type, key, payload, its
/// policy) or refused with `InvalidInput`, the table unchanged; never a panic.
pub async fn fuzz_enqueue_stores_as_given_or_refuses_cleanly<H: Harness>(ctx: &Ctx<H>) {
    let seed = seed();
    let mut g = Gen::new(seed);
    let (mut stored, mut refusals) = (0, 0);
    for i in 0..ROUNDS {
        let task = g.new_task(i);
        let input = format!("{task:?}");
        let input = clip(&input, 600);
        let before = rows(ctx).await;
        match no_panic(seed, input, ctx.store.enqueue(task.clone())).await {
            Ok(e) => {
                let t = ctx.task(e.id).await;
                assert_eq!(
                    (t.event_type.as_str(), t.biz_key.as_str()),
                    (task.event_type(), task.biz_key()),
                    "seed {seed}: {input}"
                );
                if e.created {
                    assert_eq!(t.payload, task.payload(), "seed {seed}: {input}");
                    // the row keeps waits in whole milliseconds
                    let ms = |d: Duration| d.as_millis();
                    let (got, want) = (t.retry, task.retry_policy());
                    assert_eq!(
                        (
                            got.max_attempts,
                            got.jitter_pct,
                            got.backoff.strategy(),
                            ms(got.backoff.interval()),
                            ms(got.backoff.max_interval())
                        ),
                        (
                            want.max_attempts,
                            want.jitter_pct,
                            want.backoff.strategy(),
                            ms(want.backoff.interval()),
                            ms(want.backoff.max_interval())
                        ),
                        "seed {seed}: {input}"
                    );
                    stored += 1;
                }
            }
            Err(e) => {
                refused(seed, input, &e, &before, &rows(ctx).await);
                refusals += 1;
            }
        }
    }
    // the generator reaches both sides
    assert!(
        stored > 0 && refusals > 0,
        "seed {seed}: {stored} stored, {refusals} refused"
    );
}

/// The other calls with arbitrary limits, durations, leases, error texts, filters and
/// ids: each succeeds or is refused with `InvalidInput` leaving the table as it was;
/// never a panic.
pub async fn fuzz_store_calls_succeed_or_refuse_cleanly<H: Harness>(ctx: &Ctx<H>) {
    let seed = seed();
    let mut g = Gen::new(seed);
    for i in 0..20 {
        ctx.enqueue("E", &format!("k{i}")).await;
    }
    let types =
        |g: &mut Gen| -> Vec<String> { (0..g.below(4)).map(|_| g.text(64)).collect::<Vec<_>>() };
    for _ in 0..ROUNDS {
        let before = rows(ctx).await;
        let (input, result): (String, backstop_core::Result<()>) = match g.below(8) {
            0 => {
                let (t, n) = (types(&mut g), g.limit());
                let input = format!("claim_batch({t:?}, {n})");
                let r = no_panic(seed, &input, ctx.store.claim_batch(&ctx.owner, &t, n)).await;
                (input, r.map(drop))
            }
            1 => {
                let (d, n) = (g.duration(), g.limit());
                let input = format!("recycle_dead({d:?}, {n})");
                let r = no_panic(seed, &input, ctx.store.recycle_dead(d, n)).await;
                (input, r.map(drop))
            }
            2 => {
                let leases: Vec<Lease> = (0..g.below(5))
                    .map(|_| Lease {
                        task_id: *g.pick(&[0, 1, -1, i64::MAX, 3]),
                        token: *g.pick(&[0, 1, -1, i64::MAX]),
                    })
                    .collect();
                let input = format!("heartbeat({leases:?})");
                let r = no_panic(seed, &input, ctx.store.heartbeat(&leases)).await;
                (input, r.map(drop))
            }
            3 => {
                let lease = Lease {
                    task_id: *g.pick(&[1, -1, i64::MAX]),
                    token: *g.pick(&[0, 1, i64::MAX]),
                };
                let mark = match g.below(3) {
                    0 => Mark::retry(lease, g.duration(), g.text(2100)),
                    1 => Mark::fail(lease, g.text(2100)),
                    _ => Mark::success(lease),
                };
                let input = format!("mark({mark:?})");
                let input = clip(&input, 300).to_string();
                let r = no_panic(seed, &input, ctx.store.mark(&[mark])).await;
                (input, r.map(drop))
            }
            4 => {
                let mut f = TaskFilter::default();
                f.limit = g.limit();
                if g.chance(50) {
                    f.event_type = Some(g.text(64));
                }
                if g.chance(50) {
                    f.biz_key = Some(g.text(128));
                }
                if g.chance(50) {
                    f.error_contains = Some(g.text(200));
                }
                if g.chance(50) {
                    f.older_than = Some(g.duration());
                }
                if g.chance(30) {
                    f.after_id = Some(*g.pick(&[-1, 0, i64::MAX]));
                }
                let input = format!("list({f:?})");
                let r = no_panic(seed, &input, ctx.store.list(&f)).await;
                (input, r.map(drop))
            }
            5 => {
                let (d, n) = (g.duration(), g.limit());
                let input = format!("purge_succeeded({d:?}, {n})");
                let r = no_panic(seed, &input, ctx.store.purge_succeeded(d, n)).await;
                (input, r.map(drop))
            }
            6 => {
                let keys: Vec<String> = (0..g.below(4)).map(|_| g.text(128)).collect();
                let input = format!("release_order_keys({keys:?})");
                let r = no_panic(seed, &input, ctx.store.release_order_keys(&keys)).await;
                (input, r.map(drop))
            }
            _ => {
                let id = *g.pick(&[-1, 0, 1, i64::MAX]);
                let audit = Audit::new(g.text(64), g.text(600));
                let input = format!("cancel({id}, {audit:?})");
                let r = no_panic(seed, &input, ctx.store.cancel(id, &audit)).await;
                // a missing or finished task is NotFound / Conflict: refused, nothing written
                match r {
                    Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::Conflict) => {
                        assert_eq!(before, rows(ctx).await, "seed {seed}: {input}");
                        (input, Ok(()))
                    }
                    other => (input, other.map(drop)),
                }
            }
        };
        if let Err(e) = result {
            refused(seed, &input, &e, &before, &rows(ctx).await);
        }
    }
}
