//! The spans (and the events inside them) made on one thread while a recorder is set, for
//! the cases of the tracing layer: a `tracing` subscriber of the thread's own
//! (`tracing::subscriber::set_default`), so other cases running at the same time are not
//! seen.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// One span: its target, name and fields, and the fields of each event inside it.
#[derive(Debug, Clone, Default)]
pub struct RecordedSpan {
    /// The span's target.
    pub target: String,
    /// The span's name.
    pub name: String,
    /// Its fields, as text.
    pub fields: BTreeMap<String, String>,
    /// The events recorded inside it, each as its target and fields.
    pub events: Vec<(String, BTreeMap<String, String>)>,
}

impl RecordedSpan {
    /// The fields of the events of `target` inside it (a driver's own events, sqlx's
    /// statement logs say, are left out).
    pub fn events_of(&self, target: &str) -> Vec<&BTreeMap<String, String>> {
        self.events
            .iter()
            .filter(|(t, _)| t == target)
            .map(|(_, f)| f)
            .collect()
    }
}

#[derive(Default)]
struct State {
    spans: Vec<RecordedSpan>,
    /// The spans entered and not yet exited, innermost last.
    entered: Vec<u64>,
}

/// Records the spans of the current thread while it lives.
pub struct SpanRecorder {
    state: Arc<Mutex<State>>,
    _guard: tracing::subscriber::DefaultGuard,
}

impl SpanRecorder {
    /// Record the spans made on this thread from now on.
    pub fn on_this_thread() -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let guard = tracing::subscriber::set_default(Recorder(state.clone()));
        SpanRecorder {
            state,
            _guard: guard,
        }
    }

    /// The spans of `target` recorded so far, in the order they were made.
    pub fn spans(&self, target: &str) -> Vec<RecordedSpan> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state
            .spans
            .iter()
            .filter(|s| s.target == target)
            .cloned()
            .collect()
    }
}

struct Recorder(Arc<Mutex<State>>);

impl Recorder {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let mut span = RecordedSpan {
            target: attrs.metadata().target().to_owned(),
            name: attrs.metadata().name().to_owned(),
            ..RecordedSpan::default()
        };
        attrs.record(&mut Fields(&mut span.fields));
        let mut state = self.state();
        state.spans.push(span);
        Id::from_u64(state.spans.len() as u64)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut state = self.state();
        if let Some(s) = state.spans.get_mut(span.into_u64() as usize - 1) {
            values.record(&mut Fields(&mut s.fields));
        }
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let mut state = self.state();
        let parent = match event.parent() {
            Some(id) => Some(id.into_u64()),
            None if event.is_contextual() => state.entered.last().copied(),
            None => None,
        };
        if let Some(s) = parent.and_then(|p| state.spans.get_mut(p as usize - 1)) {
            s.events
                .push((event.metadata().target().to_owned(), fields));
        }
    }

    fn enter(&self, span: &Id) {
        self.state().entered.push(span.into_u64());
    }

    fn exit(&self, span: &Id) {
        let mut state = self.state();
        if let Some(i) = state.entered.iter().rposition(|s| *s == span.into_u64()) {
            state.entered.remove(i);
        }
    }
}
