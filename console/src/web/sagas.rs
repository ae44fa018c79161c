//! The saga pages: `/sagas`, a list with filters (definition, status, unchanged for),
//! and `/sagas/{id}`, a saga's timeline: each step's tasks (every phase, its attempts
//! and last error), its step rows, the participant barrier's records and the operators'
//! log, in time order. Read-only: the commands are the CLI's (`backstop sagas`).
//!
//! A saga's input and its steps' outputs are business data: with a redactor set
//! ([`Console::redact`](crate::Console::redact)) they are not shown.

use backstop_core::{Saga, SagaFilter, SagaStatus, Task, TaskFilter};

use super::*;

/// The list's filters, as the query string has them (empty fields are no filter).
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub(super) struct SagaForm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    older_than: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    after: Option<String>,
}

impl SagaForm {
    fn normalized(mut self) -> Self {
        blank_is_none([
            &mut self.name,
            &mut self.status,
            &mut self.older_than,
            &mut self.after,
        ]);
        self
    }

    fn to_filter(&self) -> backstop_core::Result<SagaFilter> {
        let mut f = SagaFilter::default().limit(50);
        if let Some(n) = &self.name {
            f = f.name(n.trim());
        }
        if let Some(s) = &self.status {
            f = f.status(s.trim().parse::<SagaStatus>()?);
        }
        if let Some(a) = &self.older_than {
            f = f.older_than(ops::parse_age(a)?);
        }
        if let Some(a) = &self.after {
            let id = a
                .trim()
                .parse()
                .map_err(|_| Error::invalid_input("sagas", format!("bad id {a:?}")))?;
            f = f.after_id(id);
        }
        Ok(f)
    }
}

pub(super) async fn list<S: TaskStore + Clone + 'static>(
    State(inner): Shared<S>,
    Extension(base): Extension<Base>,
    Extension(caller): Extension<Caller>,
    Query(form): Query<SagaForm>,
) -> Response {
    let form = form.normalized();
    let b = &base.0;
    let filter = match form.to_filter() {
        Ok(f) => f,
        Err(e) => return page_error(&base, StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let list = match inner.store.sagas(&filter).await {
        Ok(l) => l,
        Err(e) => return store_error(&base, &e),
    };
    let opt = |v: &Option<String>| esc(v.as_deref().unwrap_or(""));
    let mut body = String::from("<h1>Sagas</h1>");
    let _ = write!(
        body,
        "<form class=filters method=get action=\"{b}/sagas\">
         <label>definition <input name=name value=\"{}\"></label>
         <label>status <select name=status><option value=\"\">any</option>{}</select></label>
         <label>unchanged for <input name=older_than placeholder=\"15m\" size=5 value=\"{}\"></label>
         <button type=submit>Filter</button></form>",
        opt(&form.name),
        status_options(&SagaStatus::ALL, form.status.as_deref()),
        opt(&form.older_than),
    );
    body.push_str(&saga_table(b, &list));
    if list.len() == filter.limit {
        if let Some(last) = list.last() {
            let next = SagaForm {
                after: Some(last.id.to_string()),
                ..form.clone()
            };
            body.push_str(&next_page(b, "/sagas", &next));
        }
    }
    page(&base, &caller, "Sagas", &body).into_response()
}

fn saga_table(b: &str, list: &[Saga]) -> String {
    if list.is_empty() {
        return "<p class=empty>No saga matches.</p>".to_owned();
    }
    let mut s = String::from(
        "<table class=sagas><thead><tr><th>id</th><th>definition</th><th>key</th><th>status</th><th>group</th><th>started (UTC)</th><th>updated (UTC)</th><th>reason</th></tr></thead><tbody>",
    );
    for g in list {
        let _ = write!(
            s,
            "<tr><td><a href=\"{b}/sagas/{id}\">{id}</a></td><td>{name}</td><td>{key}</td><td class=\"status {st}\">{st}</td><td>{group}</td><td>{created}</td><td>{updated}</td><td class=error>{reason}</td></tr>",
            id = g.id,
            name = esc(&g.name),
            key = esc(&g.key),
            st = g.status,
            group = g.group,
            created = time(&g.created_at),
            updated = time(&g.updated_at),
            reason = esc(&short(g.reason.as_deref().unwrap_or(""))),
        );
    }
    s.push_str("</tbody></table>");
    s
}

/// The pages of a saga's step tasks the timeline reads at most.
const TASK_PAGES: usize = 5;

/// One line of a timeline: when, what kind, which step or branch, what happened.
struct Event {
    at: chrono::DateTime<chrono::Utc>,
    kind: &'static str,
    step: String,
    html: String,
}

pub(super) async fn detail<S: TaskStore + Clone + 'static>(
    State(inner): Shared<S>,
    Extension(base): Extension<Base>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<i64>,
) -> Response {
    let b = &base.0;
    let store = &inner.store;
    let saga = match store.saga_by_id(id).await {
        Ok(Some(s)) => s,
        Ok(None) => return page_error(&base, StatusCode::NOT_FOUND, &format!("no saga {id}")),
        Err(e) => return store_error(&base, &e),
    };
    let gid = saga.gid();
    let read = async {
        tokio::try_join!(
            store.saga_steps(id),
            store.saga_log(id),
            store.barrier_records(&gid),
        )
    };
    let (steps, log, barrier) = match read.await {
        Ok(r) => r,
        Err(e) => return store_error(&base, &e),
    };
    let tasks = match step_tasks(store, &saga).await {
        Ok(t) => t,
        Err(e) => return store_error(&base, &e),
    };
    let shown = inner.redact.is_none();
    let mut events = Vec::new();
    for t in &tasks {
        let rest = t
            .biz_key
            .strip_prefix(&format!("{}/", saga.key))
            .unwrap_or(&t.biz_key);
        // `<step>:a` runs the action, `<step>:c` the compensation, `~nudge` a nudge
        let (step, phase) = match rest.rsplit_once(':') {
            Some((step, "a")) => (step, "action"),
            Some((step, "c")) => (step, "compensation"),
            _ => ("", rest),
        };
        events.push(Event {
            at: t.created_at,
            kind: "task",
            step: step.to_owned(),
            html: format!(
                "{phase}: <a href=\"{b}/tasks/{id}\">task {id}</a> enqueued",
                phase = esc(phase),
                id = t.id
            ),
        });
        if t.attempts > 0 {
            events.push(Event {
                at: t.updated_at,
                kind: "attempts",
                step: step.to_owned(),
                html: format!(
                    "{phase}: <span class=\"status {st}\">{st}</span> after {a} of {m} attempt(s){err}",
                    phase = esc(phase),
                    st = t.status,
                    a = t.attempts,
                    m = t.retry.max_attempts,
                    err = t
                        .last_error
                        .as_deref()
                        .map(|e| format!(": <span class=error>{}</span>", esc(&short(e))))
                        .unwrap_or_default(),
                ),
            });
        }
    }
    for r in &steps {
        let output = match (&r.output, shown) {
            (Some(o), true) => format!(", output <code>{}</code>", esc(&short(o))),
            (Some(_), false) => ", output (redacted)".to_owned(),
            (None, _) => String::new(),
        };
        events.push(Event {
            at: r.updated_at,
            kind: "step",
            step: r.step.clone(),
            html: format!(
                "<span class=\"status {st}\">{st}</span> (group {g}){output}",
                st = r.state.as_str(),
                g = r.group
            ),
        });
    }
    for r in &barrier {
        let how = if r.reason == r.op {
            String::new()
        } else {
            format!(", written by its {}", r.reason)
        };
        events.push(Event {
            at: r.created_at,
            kind: "barrier",
            step: r.branch_id.clone(),
            html: format!("{} recorded{how}", r.op),
        });
    }
    for e in &log {
        events.push(Event {
            at: e.at,
            kind: "operator",
            step: String::new(),
            html: format!(
                "{} by {}{}",
                esc(&e.action),
                esc(&e.operator),
                if e.reason.is_empty() {
                    String::new()
                } else {
                    format!(": {}", esc(&e.reason))
                }
            ),
        });
    }
    // at one instant (times are kept to the millisecond), what a step's code did before
    // its report: a barrier record, then the task's outcome, then the step's row
    let rank = |kind: &str| match kind {
        "task" => 0,
        "barrier" => 1,
        "attempts" => 2,
        "step" => 3,
        _ => 4,
    };
    events.sort_by_key(|e| (e.at, rank(e.kind)));

    let mut body = format!(
        "<h1>Saga {id} <span class=\"status {st}\">{st}</span></h1><p><a href=\"{b}/sagas?name={name}\">all {name} sagas</a></p><table class=fields>",
        st = saga.status,
        name = esc(&saga.name)
    );
    let input = if shown {
        format!("<code>{}</code>", esc(&saga.input))
    } else {
        "(redacted)".to_owned()
    };
    for (k, v) in [
        ("definition", esc(&saga.name)),
        ("key", esc(&saga.key)),
        ("group", saga.group.to_string()),
        ("reason", esc(saga.reason.as_deref().unwrap_or(""))),
        ("version", saga.version.to_string()),
        ("started (UTC)", time(&saga.created_at)),
        ("updated (UTC)", time(&saga.updated_at)),
        ("input", input),
    ] {
        let _ = write!(body, "<tr><th>{k}</th><td>{v}</td></tr>");
    }
    body.push_str("</table><h2>Timeline</h2>");
    if events.is_empty() {
        body.push_str("<p class=empty>Nothing yet.</p>");
    } else {
        body.push_str(
            "<table class=timeline><thead><tr><th>when (UTC)</th><th>what</th><th>step</th><th></th></tr></thead><tbody>",
        );
        for e in &events {
            let _ = write!(
                body,
                "<tr class=\"{kind}\"><td>{at}</td><td>{kind}</td><td>{step}</td><td>{html}</td></tr>",
                at = e.at.format("%Y-%m-%d %H:%M:%S%.3f"),
                kind = e.kind,
                step = esc(&e.step),
                html = e.html,
            );
        }
        body.push_str("</tbody></table>");
    }
    body.push_str(
        "<p class=note>Retry, compensate or resolve it with <code>backstop sagas</code>.</p>",
    );
    page(&base, &caller, &format!("Saga {id}"), &body).into_response()
}

/// The tasks of a saga's steps (its type's tasks keyed `<saga key>/…`: every step's
/// action and compensation, and its nudges), in id order, at most [`TASK_PAGES`] pages.
async fn step_tasks<S: TaskStore>(store: &S, saga: &Saga) -> backstop_core::Result<Vec<Task>> {
    let mut filter = TaskFilter::default()
        .event_type(format!("saga:{}", saga.name))
        .biz_key_prefix(format!("{}/", saga.key))
        .limit(backstop_core::limits::MAX_BATCH);
    let mut found: Vec<Task> = Vec::new();
    for _ in 0..TASK_PAGES {
        let page = store.list(&filter).await?;
        let full = page.len() == filter.limit;
        if let Some(last) = page.last() {
            filter = filter.after_id(last.id);
        }
        found.extend(page);
        if !full {
            break;
        }
    }
    Ok(found)
}
