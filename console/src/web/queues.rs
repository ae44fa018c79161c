//! The queues page: `/queues`, every event type's queue — paused or running, its
//! pending, running and failed tasks, when an engine last handled it — with a pause or
//! resume button per queue for admins (CSRF-checked, audited with the operator's name
//! and the reason typed beside it); `/queues/{type}`, a queue's operators' log.

use backstop_core::QueueChange;

use super::*;
use crate::queues::{queue_views, QueueView};

pub(super) async fn list<S: TaskStore + Clone + 'static>(
    State(inner): Shared<S>,
    Extension(base): Extension<Base>,
    Extension(caller): Extension<Caller>,
    Query(done): Query<Done>,
) -> Response {
    let b = &base.0;
    let views = match queue_views(&inner.store).await {
        Ok(v) => v,
        Err(e) => return store_error(&base, &e),
    };
    let mut body = String::new();
    if let Some(d) = done.done.as_deref().and_then(QueueChange::parse) {
        let what = match d {
            QueueChange::Pause => Some("paused: no instance claims its tasks from its next poll"),
            QueueChange::Resume => Some("resumed: every instance claims its tasks again"),
            _ => None,
        };
        if let Some(what) = what {
            let _ = write!(body, "<p class=flash>Queue {what}.</p>");
        }
    }
    body.push_str("<h1>Queues</h1>");
    body.push_str(
        "<p class=note>A queue is an event type. Pausing one stops every instance \
         claiming its tasks (enqueues go on, running tasks finish); resuming lets them run. \
         A limit caps how many of its tasks run at once across every instance \
         (<code>backstop queues limit</code>), a rate how many start in any window \
         (<code>backstop queues rate</code>).</p>",
    );
    if views.is_empty() {
        body.push_str("<p class=empty>No queues yet: no tasks, handlers or settings.</p>");
        return page(&base, &caller, "Queues", &body).into_response();
    }
    body.push_str(
        "<table class=queues><thead><tr><th>event type</th><th>state</th><th>limit</th><th>pending</th>\
         <th>running</th><th>failed</th><th>handled (UTC)</th><th>changed (UTC)</th><th></th>\
         </tr></thead><tbody>",
    );
    for v in &views {
        let _ = write!(
            body,
            "<tr><td><a href=\"{b}/queues/{t}\">{t}</a></td><td><span class=\"status {st}\">{st}</span></td>\
             <td class=limit>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            limit(v),
            v.pending,
            v.running,
            v.failed,
            v.handled_at.as_ref().map_or("–".into(), time),
            v.changed_at.as_ref().map_or("–".into(), time),
            button(b, &caller, v),
            t = esc(&v.event_type),
            st = state(v.paused),
        );
    }
    body.push_str("</tbody></table>");
    page(&base, &caller, "Queues", &body).into_response()
}

/// A queue's limits as the page shows them.
fn limit(v: &QueueView) -> String {
    esc(&crate::queues::limits_text(v))
}

fn state(paused: bool) -> &'static str {
    if paused {
        "paused"
    } else {
        "active"
    }
}

/// The pause or resume form of a queue, for an admin; nothing for read-only access.
fn button(b: &str, caller: &Caller, v: &QueueView) -> String {
    if caller.admin().is_none() {
        return String::new();
    }
    let change = if v.paused {
        QueueChange::Resume
    } else {
        QueueChange::Pause
    };
    let class = if v.paused { "" } else { " class=danger" };
    format!(
        "<form method=post action=\"{b}/queues/{t}/{a}\" class=inline>\
         <input type=hidden name=csrf value=\"{csrf}\">\
         <input name=reason size=24 maxlength=1024 placeholder=\"reason\" aria-label=\"reason\">\
         <button type=submit{class}>{label}</button></form>",
        t = esc(&v.event_type),
        a = change.action(),
        csrf = caller.csrf,
        label = capitalized(&change.action()),
    )
}

pub(super) async fn detail<S: TaskStore + Clone + 'static>(
    State(inner): Shared<S>,
    Extension(base): Extension<Base>,
    Extension(caller): Extension<Caller>,
    Path(event_type): Path<String>,
) -> Response {
    let b = &base.0;
    let log = match inner.store.queue_log(&event_type).await {
        Ok(l) => l,
        Err(e) => return action_error(&base, &e),
    };
    let view = match queue_views(&inner.store).await {
        Ok(v) => v.into_iter().find(|v| v.event_type == event_type),
        Err(e) => return store_error(&base, &e),
    };
    let t = esc(&event_type);
    let paused = view.as_ref().is_some_and(|v| v.paused);
    let mut body = format!(
        "<h1>Queue {t} <span class=\"status {st}\">{st}</span></h1>",
        st = state(paused)
    );
    if let Some(v) = &view {
        let _ = write!(
            body,
            "<p>{} pending, {} running{}, {} failed · <a href=\"{b}/tasks?event_type={t}\">its tasks</a></p><p>{}</p>",
            v.pending,
            v.running,
            match limit(v).as_str() {
                "-" => String::new(),
                l => format!(" (limits: {l})"),
            },
            v.failed,
            button(b, &caller, v)
        );
    }
    body.push_str("<h2>Log</h2>");
    body.push_str(&log_table(
        log.iter().map(|e| {
            (
                &e.at,
                e.action.as_str(),
                e.operator.as_str(),
                e.reason.as_str(),
            )
        }),
        "No operator has changed this queue.",
    ));
    page(&base, &caller, &format!("Queue {event_type}"), &body).into_response()
}

pub(super) async fn change<S: TaskStore + Clone + 'static>(
    State(inner): Shared<S>,
    Extension(base): Extension<Base>,
    Extension(caller): Extension<Caller>,
    Path((event_type, action)): Path<(String, String)>,
    Form(form): Form<ActForm>,
) -> Response {
    let b = &base.0;
    // the buttons pause and resume; a limit is set with `backstop queues limit`
    let Some(change @ (QueueChange::Pause | QueueChange::Resume)) = QueueChange::parse(&action)
    else {
        return page_error(&base, StatusCode::NOT_FOUND, "No such action.");
    };
    let operator = match caller.may_change(Some(&form.csrf)) {
        Ok(operator) => operator,
        Err(why) => return page_error(&base, StatusCode::FORBIDDEN, why),
    };
    let audit = Audit::new(operator, form.reason);
    match inner.store.set_queue(&event_type, change, &audit).await {
        Ok(_) => Redirect::to(&format!("{b}/queues?done={}", change.action())).into_response(),
        Err(e) => action_error(&base, &e),
    }
}
