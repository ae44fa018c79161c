//! The warnings and errors the engine logs, recorded so that a case can assert what was
//! (not) logged: a global `tracing` subscriber for the test binary, keyed by the `owner`
//! field the engine puts on its warnings.

use std::sync::{Arc, Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// The warnings and errors logged in this test binary since it started.
#[derive(Clone)]
pub struct Logs(Arc<Mutex<Vec<Logged>>>);

/// One warning or error.
#[derive(Debug, Clone)]
pub struct Logged {
    /// The event's `owner` field, when it has one.
    pub owner: Option<String>,
    /// Its message.
    pub message: String,
}

impl Logs {
    /// The messages logged with `owner` (an engine's [`Owner`](backstop_core::Owner)).
    pub fn of(&self, owner: &str) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|l| l.owner.as_deref() == Some(owner))
            .map(|l| l.message.clone())
            .collect()
    }
}

/// Start recording (once per test binary) and return the record. Panics when another
/// global subscriber is installed: the case could not see what it must check.
pub fn capture() -> Logs {
    static LOGS: OnceLock<Option<Logs>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Logs(Arc::default());
        tracing::subscriber::set_global_default(Recorder(logs.clone()))
            .ok()
            .map(|()| logs)
    })
    .clone()
    .expect("another global tracing subscriber is installed in this test binary; the case needs its own to see the engine's warnings")
}

struct Recorder(Logs);

impl Subscriber for Recorder {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::WARN
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::WARN)
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        (self.0)
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Logged {
                owner: fields.owner,
                message: fields.message,
            });
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

#[derive(Default)]
struct Fields {
    owner: Option<String>,
    message: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "owner" => self.owner = Some(format!("{value:?}")),
            "message" => self.message = format!("{value:?}"),
            _ => {}
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "owner" => self.owner = Some(value.to_owned()),
            "message" => self.message = value.to_owned(),
            _ => {}
        }
    }
}
