//! The task model: what a task row holds and what goes in and out of a [`TaskStore`].
//!
//! [`TaskStore`]: crate::TaskStore

mod audit;
mod barrier;
mod defaults;
mod edit;
mod labels;
mod mark;
mod new_task;
mod query;
mod queue;
mod retry;
mod saga;
mod saga_run;
mod task;
mod tcc;

pub use audit::{Audit, AuditEntry};
pub(crate) use barrier::check_gid;
pub use barrier::{Barrier, BarrierRecord, BranchCall, BranchOp};
pub(crate) use defaults::register as register_defaults;
pub use edit::{Due, TaskEdit};
pub use labels::is_tag_char;
pub(crate) use labels::{
    add_tags, check_metadata_key, check_output, check_tag, decode_tags, metadata_problem,
};
pub use mark::{Mark, MarkAction};
pub use new_task::{Dedup, Enqueued, NewTask, OnDuplicate, Priority, WhenParked};
pub use query::{EventTypeSeen, Recycled, Stats, StatusCount, TaskFilter, Throughput};
pub use queue::{
    Queue, QueueChange, QueueColumns, QueueLogEntry, RateLimit, MAX_CONCURRENCY, MAX_RATE_WINDOW,
};
pub use retry::{Backoff, RetryPolicy};
pub(crate) use saga::{check_name, check_saga_ids};
pub use saga::{
    Saga, SagaDef, SagaDefBuilder, SagaId, SagaStart, SagaStarted, SagaStatus, SagaStep, StepPhase,
    StepRole, StepTask,
};
pub use saga_run::{
    NudgeTask, ReconcileTask, SagaCommand, SagaCount, SagaFilter, SagaLogEntry, SagaStepRecord,
    StepApplied, StepOutcome, StepReport, StepState,
};
pub use task::{Lease, Owner, Status, Task, TaskId};
pub use tcc::TccDefBuilder;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits;
    use std::time::Duration;

    #[test]
    fn exponential_doubles_and_caps_without_overflow() {
        let b = Backoff::Exponential {
            initial: Duration::from_millis(1500),
            max: Duration::from_secs(3600),
        };
        assert_eq!(b.delay_after(0), Duration::from_millis(1500));
        assert_eq!(b.delay_after(1), Duration::from_millis(1500));
        assert_eq!(b.delay_after(2), Duration::from_millis(3000));
        assert_eq!(b.delay_after(5), Duration::from_millis(24000));
        assert_eq!(b.delay_after(40), Duration::from_secs(3600));
        assert_eq!(b.delay_after(u32::MAX), Duration::from_secs(3600));
    }

    #[test]
    fn fixed_is_constant() {
        let p = RetryPolicy::fixed(3, Duration::from_secs(7));
        for n in 1..10 {
            assert_eq!(p.delay_after(n), Duration::from_secs(7));
        }
        // with_max_interval leaves a fixed backoff alone
        assert_eq!(p.with_max_interval(Duration::from_secs(1)), p);
    }

    #[test]
    fn policy_validation() {
        assert!(RetryPolicy::default().validate("t").is_ok());
        assert!(RetryPolicy::fixed(0, Duration::ZERO).validate("t").is_err());
        assert!(RetryPolicy::fixed(limits::MAX_ATTEMPTS + 1, Duration::ZERO)
            .validate("t")
            .is_err());
        let p = RetryPolicy::exponential(3, Duration::from_secs(10))
            .with_max_interval(Duration::from_secs(5));
        let e = p.validate("enqueue").unwrap_err();
        assert!(e.to_string().contains("below the initial interval"), "{e}");
        assert!(
            RetryPolicy::fixed(3, limits::MAX_INTERVAL + Duration::from_secs(1))
                .validate("t")
                .is_err()
        );
    }

    #[test]
    fn new_task_validation_messages() {
        let lim = 100;
        let ok = NewTask::new("PAY_ORDER", "o-1");
        assert!(ok.validate(lim).is_ok());
        let msg = |t: NewTask| t.validate(lim).unwrap_err().to_string();
        assert!(msg(NewTask::new("", "k")).contains("event_type must be 1 to 64 bytes"));
        assert!(msg(NewTask::new("a".repeat(65), "k")).contains("event_type"));
        assert!(msg(NewTask::new("has space", "k")).contains("event_type"));
        assert!(msg(NewTask::new("E", "")).contains("biz_key must be 1 to 128 bytes"));
        assert!(msg(NewTask::new("E", "k".repeat(129))).contains("biz_key"));
        assert!(msg(NewTask::new("E", "a\0b")).contains("control"));
        assert!(msg(NewTask::new("E", "k").payload_raw("{nope")).contains("not valid JSON"));
        assert!(msg(NewTask::new("E", "k").json(&"x".repeat(200))).contains("over the limit"));
        assert!(
            msg(NewTask::new("E", "k").delay(limits::MAX_INTERVAL * 2)).contains("delay must be")
        );
        // exactly at the limits is fine
        assert!(NewTask::new("a".repeat(64), "k".repeat(128))
            .payload_raw("x".repeat(98).replace('x', " ") + "{}")
            .validate(lim)
            .is_ok());
    }

    #[test]
    fn owner_generate_is_unique_and_valid() {
        let a = Owner::generate();
        let b = Owner::generate();
        assert_ne!(a, b);
        assert!(Owner::new(a.as_str()).is_ok());
        assert!(Owner::new("").is_err());
        assert!(Owner::new("x".repeat(65)).is_err());
    }

    #[test]
    fn status_codes_round_trip() {
        for s in Status::ALL {
            assert_eq!(Status::from_code(s.code().into()).unwrap(), s);
        }
    }
}
