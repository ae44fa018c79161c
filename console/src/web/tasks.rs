//! The task pages: `/tasks`, the list with its filters (status, event type, key, error,
//! age, tags, a metadata key) and, for admins, bulk actions on them; `/tasks/{id}`, one
//! task — its fields, tags, metadata, payload, recorded output, actions and history.

use super::*;

/// The filters of the task list and the bulk actions, as query or form fields.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub(super) struct FilterForm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) event_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) older_than: Option<String>,
    /// Tags, separated by commas or spaces: all must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) tags: Option<String>,
    /// `key=value`: the metadata key holds that string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) meta: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) limit: Option<String>,
}

impl FilterForm {
    /// Empty fields are no filter.
    pub(super) fn normalized(mut self) -> Self {
        blank_is_none([
            &mut self.status,
            &mut self.event_type,
            &mut self.key,
            &mut self.error,
            &mut self.older_than,
            &mut self.tags,
            &mut self.meta,
            &mut self.after,
            &mut self.limit,
        ]);
        self
    }

    pub(super) fn to_filter(&self) -> backstop_core::Result<TaskFilter> {
        let mut f = TaskFilter::default().limit(50);
        if let Some(s) = &self.status {
            f = f.status(s.parse()?);
        }
        if let Some(t) = &self.event_type {
            f = f.event_type(t.trim());
        }
        if let Some(k) = &self.key {
            f = f.biz_key(k.clone());
        }
        if let Some(e) = &self.error {
            f = f.error_contains(e.clone());
        }
        if let Some(a) = &self.older_than {
            f = f.older_than(ops::parse_age(a)?);
        }
        if let Some(tags) = &self.tags {
            for tag in tags.split([',', ' ']).filter(|t| !t.is_empty()) {
                f = f.tag(tag);
            }
        }
        if let Some(pair) = &self.meta {
            let (key, value) = pair.split_once('=').ok_or_else(|| {
                Error::invalid_input("list", format!("metadata filter {pair:?}: write key=value"))
            })?;
            f = f.metadata(key.trim(), value);
        }
        if let Some(a) = &self.after {
            f.after_id = Some(
                a.trim()
                    .parse()
                    .map_err(|_| Error::invalid_input("list", format!("bad id {a:?}")))?,
            );
        }
        if let Some(l) = &self.limit {
            f = f.limit(
                l.trim()
                    .parse()
                    .map_err(|_| Error::invalid_input("list", format!("bad limit {l:?}")))?,
            );
        }
        Ok(f)
    }

    /// The same filters without paging (for a bulk action).
    pub(super) fn without_paging(&self) -> Self {
        FilterForm {
            after: None,
            ..self.clone()
        }
    }
}

pub(super) async fn list<S: TaskStore + Clone + 'static>(
    State(inner): Shared<S>,
    Extension(base): Extension<Base>,
    Extension(caller): Extension<Caller>,
    Query(form): Query<FilterForm>,
) -> Response {
    let form = form.normalized();
    let b = &base.0;
    let filter = match form.to_filter() {
        Ok(f) => f,
        Err(e) => return page_error(&base, StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let list = match inner.store.list(&filter).await {
        Ok(l) => l,
        Err(e) => return store_error(&base, &e),
    };
    let mut body = String::from("<h1>Tasks</h1>");
    let opt = |v: &Option<String>| esc(v.as_deref().unwrap_or(""));
    let _ = write!(
        body,
        "<form class=filters method=get action=\"{b}/tasks\">
         <label>status <select name=status><option value=\"\">any</option>{}</select></label>
         <label>event type <input name=event_type value=\"{}\"></label>
         <label>key <input name=key value=\"{}\"></label>
         <label>error contains <input name=error value=\"{}\"></label>
         <label>not updated for <input name=older_than placeholder=\"2h\" size=5 value=\"{}\"></label>
         <label>tags <input name=tags placeholder=\"daily, eu\" value=\"{}\"></label>
         <label>metadata <input name=meta placeholder=\"tenant=acme\" value=\"{}\"></label>
         <button type=submit>Filter</button></form>",
        status_options(&Status::ALL, form.status.as_deref()),
        opt(&form.event_type),
        opt(&form.key),
        opt(&form.error),
        opt(&form.older_than),
        opt(&form.tags),
        opt(&form.meta),
    );
    body.push_str(&task_table(b, &list));
    if list.len() == filter.limit {
        if let Some(last) = list.last() {
            let next = FilterForm {
                after: Some(last.id.to_string()),
                ..form.clone()
            };
            body.push_str(&next_page(b, "/tasks", &next));
        }
    }
    if caller.admin().is_some() {
        let bulk = form.without_paging();
        let _ = write!(
            body,
            "<div class=bulk><h2>Bulk actions on this filter</h2><p>"
        );
        for action in Action::ALL {
            let mut q = serde_urlencoded::to_string(&bulk).unwrap_or_default();
            if !q.is_empty() {
                q.push('&');
            }
            q.push_str(&format!("action={}", action.verb()));
            let _ = write!(
                body,
                "<a class=button href=\"{b}/bulk?{}\">{} matching…</a> ",
                esc(&q),
                capitalized(action.verb())
            );
        }
        body.push_str("</p><p class=note>Each asks for confirmation and shows what it will change first.</p></div>");
    }
    page(&base, &caller, "Tasks", &body).into_response()
}

pub(super) fn task_table(b: &str, list: &[Task]) -> String {
    if list.is_empty() {
        return "<p class=empty>No task matches.</p>".to_owned();
    }
    let mut s = String::from(
        "<table class=tasks><thead><tr><th>id</th><th>status</th><th>event type</th><th>key</th><th>attempts</th><th>tags</th><th>next run (UTC)</th><th>updated (UTC)</th><th>last error</th></tr></thead><tbody>",
    );
    for t in list {
        let _ = write!(
            s,
            "<tr><td><a href=\"{b}/tasks/{id}\">{id}</a></td><td class=\"status {st}\">{st}</td><td>{et}</td><td>{key}</td><td>{a}/{m}</td><td class=tags>{tags}</td><td>{next}</td><td>{upd}</td><td class=error>{err}</td></tr>",
            id = t.id,
            st = t.status,
            et = esc(&t.event_type),
            key = esc(&t.biz_key),
            a = t.attempts,
            m = t.retry.max_attempts,
            tags = esc(&t.tags.join(" ")),
            next = time(&t.next_run_at),
            upd = time(&t.updated_at),
            err = esc(&short(t.last_error.as_deref().unwrap_or(""))),
        );
    }
    s.push_str("</tbody></table>");
    s
}

pub(super) async fn detail<S: TaskStore + Clone + 'static>(
    State(inner): Shared<S>,
    Extension(base): Extension<Base>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<i64>,
    Query(done): Query<Done>,
) -> Response {
    let b = &base.0;
    let (task, history) = match tokio::try_join!(inner.store.get(id), inner.store.audit_log(id)) {
        Ok((Some(t), h)) => (t, h),
        Ok((None, _)) => {
            return page_error(
                &base,
                StatusCode::NOT_FOUND,
                &format!("There is no task {id}."),
            )
        }
        Err(e) => return store_error(&base, &e),
    };
    let mut body = String::new();
    match done.done.as_deref() {
        Some("edit") => {
            let _ = write!(body, "<p class=flash>Task {id} edited.</p>");
        }
        Some(d) => {
            if let Ok(d) = d.parse::<Action>() {
                let _ = write!(body, "<p class=flash>Task {id} {}.</p>", d.done());
            }
        }
        None => {}
    }
    let _ = write!(
        body,
        "<h1>Task {id} <span class=\"status {st}\">{st}</span></h1><table class=fields>",
        st = task.status
    );
    let r = &task.retry;
    for (k, v) in [
        ("event type", esc(&task.event_type)),
        ("key", esc(&task.biz_key)),
        (
            "attempts",
            format!(
                "{} of {} ({} backoff, {} up to {})",
                task.attempts,
                r.max_attempts,
                r.backoff.strategy().to_lowercase(),
                human(r.backoff.interval()),
                human(r.backoff.max_interval())
            ),
        ),
        ("next run at", time(&task.next_run_at)),
        ("owner", esc(task.owner.as_deref().unwrap_or("–"))),
        ("lease", task.lease.to_string()),
        ("created at", time(&task.created_at)),
        ("updated at", time(&task.updated_at)),
        ("tags", esc(&task.tags.join(", "))),
        ("trace", esc(task.traceparent.as_deref().unwrap_or("–"))),
        ("partition", esc(task.partition.as_deref().unwrap_or("–"))),
    ] {
        let _ = write!(body, "<tr><th>{k}</th><td>{v}</td></tr>");
    }
    body.push_str("</table>");
    if let Some(e) = &task.last_error {
        let _ = write!(body, "<h2>Last error</h2><pre class=error>{}</pre>", esc(e));
    }
    if let Some(m) = &task.metadata {
        let _ = write!(
            body,
            "<h2>Metadata</h2><pre class=metadata>{}</pre>",
            esc(&pretty_json(m.clone()))
        );
    }
    let _ = write!(
        body,
        "<h2>Payload</h2><pre class=payload>{}</pre>",
        esc(&pretty_json(inner.payload(&task)))
    );
    if let Some(o) = &task.output {
        let _ = write!(
            body,
            "<h2>Output</h2><pre class=output>{}</pre>",
            esc(&pretty_json(o.clone()))
        );
    }
    if caller.admin().is_some() {
        let actions: Vec<Action> = Action::ALL
            .into_iter()
            .filter(|a| a.applies_to(task.status))
            .collect();
        if !actions.is_empty() {
            body.push_str("<h2>Actions</h2><p>");
            for a in actions {
                let _ = write!(
                    body,
                    "<a class=button href=\"{b}/tasks/{id}/confirm/{v}\">{}</a> ",
                    capitalized(a.verb()),
                    v = a.verb()
                );
            }
            body.push_str("</p>");
        }
    }
    if caller.admin().is_some() && matches!(task.status, Status::Pending | Status::Waiting) {
        body.push_str(&edit::form(b, &caller, id));
    }
    body.push_str("<h2>History</h2>");
    body.push_str(&log_table(
        history.iter().map(|h| {
            (
                &h.at,
                h.action.as_str(),
                h.operator.as_str(),
                h.reason.as_str(),
            )
        }),
        "No operator has changed this task.",
    ));
    page(&base, &caller, &format!("Task {id}"), &body).into_response()
}

/// `json` indented, or as it is when it does not parse.
fn pretty_json(json: String) -> String {
    serde_json::from_str::<serde_json::Value>(&json)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or(json)
}
