//! A task's edit from its detail page (admins, a pending or waiting task): run it now,
//! reschedule it (in a delay, or at a time), or replace its payload
//! ([`TaskStore::edit`]), CSRF-checked and audited with the reason typed beside it.
//!
//! The payload field starts empty (its content may be redacted on this page): an empty
//! field keeps the payload.

use backstop_core::{Due, TaskEdit};

use super::*;

/// The edit form of task `id`, for the detail page.
pub(super) fn form(b: &str, caller: &Caller, id: i64) -> String {
    format!(
        "<h2>Edit</h2><form method=post action=\"{b}/tasks/{id}/edit\" class=confirm>
         <input type=hidden name=csrf value=\"{csrf}\">
         <label>run <select name=run><option value=\"\">as scheduled</option>
           <option value=now>now</option><option value=in>in…</option><option value=at>at…</option></select></label>
         <label>in (90s, 15m, 2h, 7d) <input name=run_in size=8></label>
         <label>at (UTC, RFC 3339) <input name=run_at size=22 placeholder=\"2026-12-24T09:00:00Z\"></label>
         <label>payload (JSON; empty keeps it) <textarea name=payload rows=3 cols=40></textarea></label>
         <label>reason (for the audit log) <input name=reason size=40 maxlength=1024></label>
         <button type=submit>Edit</button></form>",
        csrf = caller.csrf,
    )
}

#[derive(Debug, Deserialize)]
pub(super) struct EditForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    run: String,
    #[serde(default)]
    run_in: String,
    #[serde(default)]
    run_at: String,
    #[serde(default)]
    payload: String,
    #[serde(default)]
    reason: String,
}

impl EditForm {
    fn to_edit(&self) -> backstop_core::Result<TaskEdit> {
        let bad = |m: String| Error::invalid_input("edit", m);
        let mut edit = TaskEdit::default();
        match self.run.as_str() {
            "" => {}
            "now" => edit = edit.due(Due::Now),
            "in" => edit = edit.due(Due::In(ops::parse_age(self.run_in.trim())?)),
            "at" => {
                let at = chrono::DateTime::parse_from_rfc3339(self.run_at.trim())
                    .map_err(|e| bad(format!("run at {:?} is not RFC 3339: {e}", self.run_at)))?;
                edit = edit.due(Due::At(at.with_timezone(&chrono::Utc)));
            }
            other => return Err(bad(format!("no run option {other:?}"))),
        }
        if !self.payload.trim().is_empty() {
            edit = edit.payload(self.payload.clone());
        }
        Ok(edit)
    }
}

pub(super) async fn apply<S: TaskStore + Clone + 'static>(
    State(inner): Shared<S>,
    Extension(base): Extension<Base>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<i64>,
    Form(form): Form<EditForm>,
) -> Response {
    let b = &base.0;
    let operator = match caller.may_change(Some(&form.csrf)) {
        Ok(operator) => operator,
        Err(why) => return page_error(&base, StatusCode::FORBIDDEN, why),
    };
    let edit = match form.to_edit() {
        Ok(e) => e,
        Err(e) => return action_error(&base, &e),
    };
    let audit = Audit::new(operator, form.reason);
    match inner.store.edit(id, &edit, &audit).await {
        Ok(_) => Redirect::to(&format!("{b}/tasks/{id}?done=edit")).into_response(),
        Err(e) => action_error(&base, &e),
    }
}
