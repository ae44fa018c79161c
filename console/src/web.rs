//! The web console: an axum [`Router`] to mount under a prefix of the host application's
//! choice, or to run standalone (`backstop serve`).
//!
//! Server-rendered HTML with plain forms (no JavaScript, no build step); the stylesheet
//! is compiled into the binary. **Deny by default**: every request goes through the
//! [`Authorizer`], which answers [`Access::Denied`] unless told otherwise; read-only
//! access sees everything but changes nothing; every change needs admin access, a CSRF
//! token bound to the caller's access, a same-origin request, and is written to the
//! task's audit log with the operator's name. A [`Redactor`] decides what of a payload
//! is shown.

use std::collections::hash_map::RandomState;
use std::fmt::Write as _;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Form, OriginalUri, Path, Query, Request, State};
use axum::http::{header, request::Parts, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use backstop_core::{
    Audit, BacklogGauges, BacklogReading, Error, ErrorKind, Status, Task, TaskFilter, TaskStore,
};
use serde::{Deserialize, Serialize};

use crate::metrics::Metrics;

mod edit;
mod queues;
mod sagas;
mod tasks;
use crate::ops::{self, Action, Target};
use tasks::{task_table, FilterForm};

/// What a request may do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Access {
    /// Nothing: the console answers 401.
    Denied,
    /// See every page; change nothing.
    ReadOnly,
    /// See and change; changes are audited under `operator` (1 to 64 bytes).
    Admin {
        /// The name written to the audit log.
        operator: String,
    },
}

/// Decides per request what its sender may do. Implemented for closures
/// `Fn(&Parts) -> Access`; [`TokenAuth`] is the ready-made one.
///
/// ```
/// use backstop_console::web::Access;
/// // behind the company's SSO proxy, which sets the user's name and groups
/// let authorizer = |req: &axum::http::request::Parts| {
///     let header = |name| req.headers.get(name).and_then(|v| v.to_str().ok());
///     match (header("x-user"), header("x-groups")) {
///         (Some(user), Some(groups)) if groups.split(',').any(|g| g == "oncall") => {
///             Access::Admin { operator: user.to_owned() }
///         }
///         (Some(_), _) => Access::ReadOnly,
///         _ => Access::Denied,
///     }
/// };
/// # let _ = backstop_console::web::Authorizer::authorize(&authorizer, &axum::http::Request::new(()).into_parts().0);
/// ```
pub trait Authorizer: Send + Sync + 'static {
    /// The access of the request with these parts (method, URI, headers).
    fn authorize(&self, request: &Parts) -> Access;
}

impl<F: Fn(&Parts) -> Access + Send + Sync + 'static> Authorizer for F {
    fn authorize(&self, request: &Parts) -> Access {
        self(request)
    }
}

/// Tokens: an admin token and a read-only token, sent as `Authorization: Bearer <token>`
/// or as the cookie the console's login page sets. No token configured: nobody gets in.
#[derive(Clone, Default)]
pub struct TokenAuth {
    admin: Option<(String, String)>,
    read: Option<String>,
}

impl std::fmt::Debug for TokenAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenAuth")
            .field("admin", &self.admin.as_ref().map(|(_, op)| op))
            .field("read", &self.read.as_ref().map(|_| "…"))
            .finish()
    }
}

/// The shortest token accepted.
pub const MIN_TOKEN_BYTES: usize = 16;

impl TokenAuth {
    /// Admin access for `token`, audited as `operator`. `Config` error for a token under
    /// [`MIN_TOKEN_BYTES`] or a bad operator name.
    pub fn admin(
        mut self,
        token: impl Into<String>,
        operator: impl Into<String>,
    ) -> backstop_core::Result<Self> {
        let (token, operator) = (token.into(), operator.into());
        check_token(&token)?;
        Audit::new(operator.clone(), "")
            .validate()
            .map_err(|e| Error::config("token_auth", e.message()))?;
        self.admin = Some((token, operator));
        Ok(self)
    }

    /// Read-only access for `token`.
    pub fn read_only(mut self, token: impl Into<String>) -> backstop_core::Result<Self> {
        let token = token.into();
        check_token(&token)?;
        self.read = Some(token);
        Ok(self)
    }

    /// From the environment: `BACKSTOP_CONSOLE_TOKEN` (admin, audited as
    /// `BACKSTOP_CONSOLE_OPERATOR`, default `console`) and `BACKSTOP_CONSOLE_READ_TOKEN`
    /// (read-only). Unset or empty variables grant nothing.
    pub fn from_env() -> backstop_core::Result<Self> {
        let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        let mut auth = TokenAuth::default();
        if let Some(t) = var("BACKSTOP_CONSOLE_TOKEN") {
            let operator = var("BACKSTOP_CONSOLE_OPERATOR").unwrap_or_else(|| "console".into());
            auth = auth.admin(t, operator)?;
        }
        if let Some(t) = var("BACKSTOP_CONSOLE_READ_TOKEN") {
            auth = auth.read_only(t)?;
        }
        Ok(auth)
    }

    /// Whether any token is configured.
    pub fn is_empty(&self) -> bool {
        self.admin.is_none() && self.read.is_none()
    }
}

fn check_token(token: &str) -> backstop_core::Result<()> {
    if token.len() < MIN_TOKEN_BYTES
        || token
            .chars()
            .any(|c| c.is_control() || c == ';' || c == ' ')
    {
        return Err(Error::config(
            "token_auth",
            format!("a console token must be at least {MIN_TOKEN_BYTES} bytes, without spaces, ';' or control characters"),
        ));
    }
    Ok(())
}

impl Authorizer for TokenAuth {
    fn authorize(&self, request: &Parts) -> Access {
        let Some(presented) = presented_token(&request.headers) else {
            return Access::Denied;
        };
        if let Some((token, operator)) = &self.admin {
            if same(token.as_bytes(), presented.as_bytes()) {
                return Access::Admin {
                    operator: operator.clone(),
                };
            }
        }
        if let Some(token) = &self.read {
            if same(token.as_bytes(), presented.as_bytes()) {
                return Access::ReadOnly;
            }
        }
        Access::Denied
    }
}

const COOKIE: &str = "backstop_token";

/// The token of a request: its bearer token, or the login cookie.
fn presented_token(headers: &HeaderMap) -> Option<String> {
    if let Some(v) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        if let Some(t) = v.strip_prefix("Bearer ") {
            return Some(t.trim().to_owned());
        }
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_owned())
}

/// Constant-time comparison (for tokens).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What of a task's payload the console shows (it never shows more). Runs for every page
/// that shows a payload.
pub type Redactor = Arc<dyn Fn(&Task) -> String + Send + Sync>;

/// The web console. Build it, then mount its [`router`](Self::router):
///
/// ```no_run
/// # async fn demo(store: backstop_sqlite::SqliteStore) -> Result<(), Box<dyn std::error::Error>> {
/// use backstop_console::web::{Console, TokenAuth};
/// let console = Console::new(store)
///     .authorizer(TokenAuth::from_env()?)
///     .redact(|task| if task.event_type == "SEND_EMAIL" { "(personal data)".into() } else { task.payload.clone() });
/// let app = axum::Router::new().nest("/admin/backstop", console.router());
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// axum::serve(listener, app).await?;
/// # Ok(()) }
/// ```
pub struct Console<S> {
    store: S,
    authorizer: Arc<dyn Authorizer>,
    redact: Option<Redactor>,
    metrics: Option<Metrics>,
    backlog_gauges: bool,
}

impl<S: TaskStore + Clone + 'static> Console<S> {
    /// A console on `store` that lets nobody in until an [`authorizer`](Self::authorizer)
    /// is set.
    pub fn new(store: S) -> Self {
        Console {
            store,
            authorizer: Arc::new(|_: &Parts| Access::Denied),
            redact: None,
            metrics: None,
            backlog_gauges: true,
        }
    }

    /// Who may do what.
    pub fn authorizer(mut self, authorizer: impl Authorizer) -> Self {
        self.authorizer = Arc::new(authorizer);
        self
    }

    /// What of a payload to show (default: all of it). Tags, metadata and a handler's
    /// recorded output are shown as stored: they are for people and tools, so keep
    /// personal data in the payload.
    pub fn redact(mut self, redact: impl Fn(&Task) -> String + Send + Sync + 'static) -> Self {
        self.redact = Some(Arc::new(redact));
        self
    }

    /// Serve `GET /metrics` (read access needed) from this recorder. With
    /// `backlog_gauges` (default true) each scrape also refreshes the backlog gauges from
    /// the store, at most every 15 s: the database's one refresher, so the engines can
    /// run with [`EngineConfig::backlog_gauges`](backstop_core::EngineConfig::backlog_gauges)
    /// off.
    pub fn metrics(mut self, metrics: Metrics, backlog_gauges: bool) -> Self {
        self.metrics = Some(metrics);
        self.backlog_gauges = backlog_gauges;
        self
    }

    /// The router: `/` overview, `/tasks` list, `/tasks/{id}` detail, confirmations and
    /// actions, `/bulk`, `/sagas` list and `/sagas/{id}` timeline, `/login`, `/logout`,
    /// `/metrics` (when set), `/assets/style.css`.
    pub fn router(self) -> Router {
        let (k1, k2) = (RandomState::new(), RandomState::new());
        let inner = Arc::new(Inner {
            store: self.store,
            authorizer: self.authorizer,
            redact: self.redact,
            metrics: self.metrics,
            backlog_gauges: self.backlog_gauges,
            csrf_keys: (k1, k2),
            gauges: Mutex::new((None, BacklogGauges::default())),
        });
        let guarded = Router::new()
            .route("/", get(overview::<S>))
            .route("/tasks", get(tasks::list::<S>))
            .route("/tasks/{id}", get(tasks::detail::<S>))
            .route("/tasks/{id}/confirm/{action}", get(confirm::<S>))
            .route("/tasks/{id}/edit", post(edit::apply::<S>))
            .route("/tasks/{id}/{action}", post(act::<S>))
            .route("/bulk", get(bulk_confirm::<S>).post(bulk::<S>))
            .route("/queues", get(queues::list::<S>))
            .route("/queues/{event_type}", get(queues::detail::<S>))
            .route("/queues/{event_type}/{action}", post(queues::change::<S>))
            .route("/sagas", get(sagas::list::<S>))
            .route("/sagas/{id}", get(sagas::detail::<S>))
            .route("/logout", post(logout))
            .route("/metrics", get(metrics::<S>))
            .route_layer(middleware::from_fn_with_state(
                Arc::clone(&inner),
                guard::<S>,
            ));
        Router::new()
            .merge(guarded)
            .route("/login", get(login_page).post(login))
            .route("/assets/style.css", get(stylesheet))
            .layer(middleware::from_fn(base_path))
            .with_state(inner)
    }
}

struct Inner<S> {
    store: S,
    authorizer: Arc<dyn Authorizer>,
    redact: Option<Redactor>,
    metrics: Option<Metrics>,
    backlog_gauges: bool,
    csrf_keys: (RandomState, RandomState),
    gauges: Mutex<(Option<Instant>, BacklogGauges)>,
}

type Shared<S> = State<Arc<Inner<S>>>;

impl<S> Inner<S> {
    /// The CSRF token of an access: a keyed hash of it, so it is rendered only to those
    /// who have that access, and differs between operators.
    fn csrf(&self, access: &Access) -> String {
        let what = match access {
            Access::Admin { operator } => format!("admin\0{operator}"),
            Access::ReadOnly => "read".to_owned(),
            Access::Denied => "denied".to_owned(),
        };
        format!(
            "{:016x}{:016x}",
            self.csrf_keys.0.hash_one(&what),
            self.csrf_keys.1.hash_one(&what)
        )
    }

    fn payload(&self, task: &Task) -> String {
        match &self.redact {
            Some(r) => r(task),
            None => task.payload.clone(),
        }
    }
}

/// Where the console is mounted (`""` at the root), for its links.
#[derive(Clone, Debug)]
struct Base(String);

impl Base {
    /// The overview's path: the mount point itself (a router nested at `/ops` answers
    /// `/ops`, not `/ops/`).
    fn home(&self) -> String {
        if self.0.is_empty() {
            "/".to_owned()
        } else {
            self.0.clone()
        }
    }
}

async fn base_path(mut req: Request, next: Next) -> Response {
    let inner = req.uri().path().to_owned();
    let original = req
        .extensions()
        .get::<OriginalUri>()
        .map(|o| o.0.path().to_owned())
        .unwrap_or_else(|| inner.clone());
    let base = match original.strip_suffix(inner.as_str()) {
        Some(b) => b.to_owned(),
        None if inner == "/" => original.trim_end_matches('/').to_owned(),
        None => String::new(),
    };
    req.extensions_mut().insert(Base(base));
    next.run(req).await
}

/// The caller's access, once the guard let it through.
#[derive(Clone, Debug)]
struct Caller {
    access: Access,
    csrf: String,
}

impl Caller {
    fn admin(&self) -> Option<&str> {
        match &self.access {
            Access::Admin { operator } => Some(operator),
            _ => None,
        }
    }

    /// The operator, when this caller may change tasks (admin access, and the form's CSRF
    /// token when one is sent); otherwise why not (for a 403 page).
    fn may_change(&self, csrf: Option<&str>) -> Result<&str, &'static str> {
        let operator = self
            .admin()
            .ok_or("Read-only access: changes need admin access.")?;
        if let Some(sent) = csrf {
            check_csrf(self, sent)?;
        }
        Ok(operator)
    }
}

async fn guard<S: TaskStore + Clone + 'static>(
    State(inner): Shared<S>,
    req: Request,
    next: Next,
) -> Response {
    let (parts, body) = req.into_parts();
    let base = parts
        .extensions
        .get::<Base>()
        .cloned()
        .unwrap_or(Base(String::new()));
    let access = inner.authorizer.authorize(&parts);
    if access == Access::Denied {
        return login_response(
            &base,
            StatusCode::UNAUTHORIZED,
            "Sign in to see the console.",
        );
    }
    let csrf = inner.csrf(&access);
    let mut req = Request::from_parts(parts, body);
    if req.method() == axum::http::Method::POST {
        if let Err(why) = same_origin(req.headers()) {
            return page_error(&base, StatusCode::FORBIDDEN, why);
        }
    }
    req.extensions_mut().insert(Caller { access, csrf });
    next.run(req).await
}

/// A change must come from the console's own pages: the browser's `Sec-Fetch-Site` (when
/// sent) says same-origin, and the `Origin` (when sent) is the host the request went to.
fn same_origin(headers: &HeaderMap) -> Result<(), &'static str> {
    let get = |h: header::HeaderName| headers.get(h).and_then(|v| v.to_str().ok());
    if let Some(site) = get(header::HeaderName::from_static("sec-fetch-site")) {
        if site != "same-origin" && site != "none" {
            return Err("refused: the request came from another site");
        }
    }
    if let (Some(origin), Some(host)) = (get(header::ORIGIN), get(header::HOST)) {
        let origin_host = origin.split_once("://").map(|(_, h)| h).unwrap_or(origin);
        if origin == "null" || origin_host != host {
            return Err("refused: the request came from another origin");
        }
    }
    Ok(())
}

fn check_csrf(caller: &Caller, sent: &str) -> Result<(), &'static str> {
    if same(caller.csrf.as_bytes(), sent.as_bytes()) {
        Ok(())
    } else {
        Err("refused: the form's CSRF token is missing or stale (reload the page and try again)")
    }
}

// ---------------------------------------------------------------------------------------
// pages

async fn overview<S: TaskStore + Clone + 'static>(
    State(inner): Shared<S>,
    Extension(base): Extension<Base>,
    Extension(caller): Extension<Caller>,
) -> Response {
    let (backlog, throughput) = match tokio::try_join!(
        inner.store.backlog(),
        inner
            .store
            .throughput(Duration::from_secs(3600), Duration::from_secs(300))
    ) {
        Ok(x) => x,
        Err(e) => return store_error(&base, &e),
    };
    let b = &base.0;
    let shown = [
        Status::Pending,
        Status::Running,
        Status::Failed,
        Status::Cancelled,
    ];
    let mut types: Vec<String> = backlog
        .counts
        .iter()
        .map(|c| c.event_type.clone())
        .collect();
    types.extend(throughput.iter().map(|t| t.event_type.clone()));
    types.sort();
    types.dedup();
    let mut body = String::new();
    let oldest = match backlog.oldest_due_pending {
        Some(d) => format!(
            "the oldest due pending task has waited <strong>{}</strong>",
            human(d)
        ),
        None => "no pending task is due".to_owned(),
    };
    let _ = write!(body, "<h1>Overview</h1><p class=summary>{oldest}</p>");
    let _ = write!(
        body,
        "<h2>Backlog</h2><table class=counts><thead><tr><th>event type</th>{}<th>finished, last hour</th><th>per 5 minutes, last hour</th></tr></thead><tbody>",
        shown.iter().map(|s| format!("<th>{s}</th>")).collect::<String>()
    );
    if types.is_empty() {
        body.push_str("<tr><td colspan=7>no tasks</td></tr>");
    }
    for t in &types {
        let _ = write!(
            body,
            "<tr><th><a href=\"{b}/tasks?{}\">{}</a></th>",
            query(&FilterForm {
                event_type: Some(t.clone()),
                ..Default::default()
            }),
            esc(t)
        );
        for s in shown {
            let n = backlog.count_for(t, s);
            let class = if s == Status::Failed && n > 0 {
                " class=alert"
            } else {
                ""
            };
            let _ = write!(
                body,
                "<td{class}><a href=\"{b}/tasks?{}\">{n}</a></td>",
                query(&FilterForm {
                    event_type: Some(t.clone()),
                    status: Some(s.to_string()),
                    ..Default::default()
                })
            );
        }
        let mut per = [0u64; 12];
        let (mut ok, mut failed) = (0, 0);
        for x in throughput.iter().filter(|x| &x.event_type == t) {
            if let Some(slot) = per.get_mut(x.bucket as usize) {
                *slot += x.count;
            }
            if x.status == Status::Failed {
                failed += x.count
            } else {
                ok += x.count
            }
        }
        let _ = write!(
            body,
            "<td>{ok} succeeded, {failed} failed</td><td>{}</td></tr>",
            bars(&per)
        );
    }
    let _ = write!(
        body,
        "<tr class=total><th>all</th>{}<td></td><td></td></tr></tbody></table>",
        shown
            .iter()
            .map(|s| format!("<td>{}</td>", backlog.count(*s)))
            .collect::<String>()
    );
    body.push_str("<p class=note>Succeeded tasks are not counted here (their count would scan the retained rows); finished tasks are counted over the last hour.</p>");
    let cap = backstop_core::limits::MAX_THROUGHPUT_ROWS as u64;
    for s in [Status::Succeeded, Status::Failed] {
        let n: u64 = throughput
            .iter()
            .filter(|t| t.status == s)
            .map(|t| t.count)
            .sum();
        if n >= cap {
            let _ = write!(
                body,
                "<p class=note>Busy: only the most recent {cap} {s} tasks of the hour were counted; the older bars read low.</p>"
            );
        }
    }
    page(&base, &caller, "Overview", &body).into_response()
}

/// Twelve bars, oldest left.
fn bars(per: &[u64; 12]) -> String {
    let max = per.iter().copied().max().unwrap_or(0).max(1);
    let mut s = String::from("<span class=bars>");
    for n in per.iter().rev() {
        let h = (n * 100 / max).max(if *n > 0 { 4 } else { 0 });
        let _ = write!(
            s,
            "<span class=bar title=\"{n}\" style=\"height:{h}%\"></span>"
        );
    }
    s.push_str("</span>");
    s
}

fn query<T: Serialize>(form: &T) -> String {
    esc(&serde_urlencoded::to_string(form).unwrap_or_default())
}

/// A form's fields left empty are no filter.
fn blank_is_none<const N: usize>(fields: [&mut Option<String>; N]) {
    for f in fields {
        if f.as_deref().is_some_and(|v| v.trim().is_empty()) {
            *f = None;
        }
    }
}

/// The `<option>`s of a status filter, `selected` marked.
fn status_options<T: std::fmt::Display>(all: &[T], selected: Option<&str>) -> String {
    all.iter()
        .map(|s| {
            let s = s.to_string();
            let sel = if selected == Some(s.as_str()) {
                " selected"
            } else {
                ""
            };
            format!("<option{sel}>{s}</option>")
        })
        .collect()
}

/// The "next page" link of a full page: `next` is the form with `after` set.
fn next_page<T: Serialize>(b: &str, path: &str, next: &T) -> String {
    format!(
        "<p><a class=next href=\"{b}{path}?{}\">next page →</a></p>",
        query(next)
    )
}

#[derive(Debug, Default, Deserialize)]
struct Done {
    #[serde(default)]
    done: Option<String>,
}

/// An operators' log as a table (at, action, operator, reason), or `empty` as a note.
fn log_table<'a>(
    entries: impl ExactSizeIterator<
        Item = (&'a chrono::DateTime<chrono::Utc>, &'a str, &'a str, &'a str),
    >,
    empty: &str,
) -> String {
    if entries.len() == 0 {
        return format!("<p class=empty>{empty}</p>");
    }
    let mut out = String::from("<table class=history><thead><tr><th>at (UTC)</th><th>action</th><th>operator</th><th>reason</th></tr></thead><tbody>");
    for (at, action, operator, reason) in entries {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            time(at),
            esc(action),
            esc(operator),
            esc(reason)
        );
    }
    out.push_str("</tbody></table>");
    out
}

async fn confirm<S: TaskStore + Clone + 'static>(
    State(inner): Shared<S>,
    Extension(base): Extension<Base>,
    Extension(caller): Extension<Caller>,
    Path((id, action)): Path<(i64, String)>,
) -> Response {
    let b = &base.0;
    let Ok(action) = action.parse::<Action>() else {
        return page_error(&base, StatusCode::NOT_FOUND, "No such action.");
    };
    if let Err(why) = caller.may_change(None) {
        return page_error(&base, StatusCode::FORBIDDEN, why);
    }
    let plan = match ops::plan(&inner.store, action, &Target::Id(id)).await {
        Ok(p) => p,
        Err(e) => return action_error(&base, &e),
    };
    let mut body = format!("<h1>{} task {id}?</h1>", capitalized(action.verb()));
    body.push_str(&task_table(b, &plan));
    body.push_str(&action_note(action));
    let _ = write!(
        body,
        "<form method=post action=\"{b}/tasks/{id}/{v}\" class=confirm>
         <input type=hidden name=csrf value=\"{csrf}\">
         <label>reason (for the audit log) <input name=reason size=60 maxlength=1024></label>
         <button type=submit class=danger>{label}</button> <a href=\"{b}/tasks/{id}\">cancel</a></form>",
        v = action.verb(),
        csrf = caller.csrf,
        label = capitalized(action.verb()),
    );
    page(
        &base,
        &caller,
        &format!("{} task {id}", capitalized(action.verb())),
        &body,
    )
    .into_response()
}

fn action_note(action: Action) -> String {
    match action {
        Action::Reset => "<p class=note>Back to pending with attempts 0, due now; an engine runs it at its next poll.</p>",
        Action::Cancel => "<p class=note>Never run again. A running handler is not interrupted, but its outcome is refused.</p>",
        Action::Delete => "<p class=note>The row is removed; its audit log stays.</p>",
    }
    .to_owned()
}

#[derive(Debug, Deserialize)]
struct ActForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
}

async fn act<S: TaskStore + Clone + 'static>(
    State(inner): Shared<S>,
    Extension(base): Extension<Base>,
    Extension(caller): Extension<Caller>,
    Path((id, action)): Path<(i64, String)>,
    Form(form): Form<ActForm>,
) -> Response {
    let b = &base.0;
    let Ok(action) = action.parse::<Action>() else {
        return page_error(&base, StatusCode::NOT_FOUND, "No such action.");
    };
    let operator = match caller.may_change(Some(&form.csrf)) {
        Ok(operator) => operator,
        Err(why) => return page_error(&base, StatusCode::FORBIDDEN, why),
    };
    let audit = Audit::new(operator, form.reason);
    match ops::apply(&inner.store, action, &Target::Id(id), &audit).await {
        Ok(_) if action == Action::Delete => {
            Redirect::to(&format!("{b}/tasks?done=deleted")).into_response()
        }
        Ok(_) => Redirect::to(&format!("{b}/tasks/{id}?done={}", action.verb())).into_response(),
        Err(e) => action_error(&base, &e),
    }
}

#[derive(Debug, Deserialize)]
struct BulkForm {
    action: String,
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
    #[serde(flatten)]
    filter: FilterForm,
}

fn bulk_target(form: &BulkForm) -> Result<(Action, Target), (StatusCode, String)> {
    let bad = |e: Error| (StatusCode::BAD_REQUEST, e.to_string());
    let action = form.action.parse::<Action>().map_err(bad)?;
    let filter = form.filter.clone().normalized().without_paging();
    let mut f = filter.to_filter().map_err(bad)?;
    if filter.limit.is_none() {
        f = f.limit(100);
    }
    Ok((action, Target::filter(f).map_err(bad)?))
}

async fn bulk_confirm<S: TaskStore + Clone + 'static>(
    State(inner): Shared<S>,
    Extension(base): Extension<Base>,
    Extension(caller): Extension<Caller>,
    Query(form): Query<BulkForm>,
) -> Response {
    let b = &base.0;
    if let Err(why) = caller.may_change(None) {
        return page_error(&base, StatusCode::FORBIDDEN, why);
    }
    let (action, target) = match bulk_target(&form) {
        Ok(x) => x,
        Err((code, why)) => return page_error(&base, code, &why),
    };
    let plan = match ops::plan(&inner.store, action, &target).await {
        Ok(p) => p,
        Err(e) => return action_error(&base, &e),
    };
    let matching = match ops::matching(&inner.store, action, &target).await {
        Ok(n) => n,
        Err(e) => return action_error(&base, &e),
    };
    let verb = action.verb();
    let mut body = format!(
        "<h1>{} {} matching task(s)?</h1>",
        capitalized(verb),
        plan.len()
    );
    if matching > plan.len() as u64 {
        let _ = write!(
            body,
            "<p class=note>{matching} tasks match{}: this confirmation {verb}s the first {}; confirm again for the rest.</p>",
            if matching >= backstop_core::limits::MAX_COUNT as u64 { " (or more)" } else { "" },
            plan.len()
        );
    }
    body.push_str(&task_table(b, &plan));
    if plan.is_empty() {
        let _ = write!(
            body,
            "<p><a href=\"{b}/tasks?{}\">back to the list</a></p>",
            query(&form.filter.clone().normalized().without_paging())
        );
        return page(&base, &caller, "Bulk action", &body).into_response();
    }
    body.push_str(&action_note(action));
    body.push_str("<p class=note>At most 100 per confirmation. Each task is changed on its own with its state checked again: one changed meanwhile is skipped.</p>");
    let _ = write!(body, "<form method=post action=\"{b}/bulk\" class=confirm><input type=hidden name=action value=\"{verb}\"><input type=hidden name=csrf value=\"{}\">", caller.csrf);
    let filter = form.filter.clone().normalized().without_paging();
    for (name, value) in [
        ("status", &filter.status),
        ("event_type", &filter.event_type),
        ("key", &filter.key),
        ("error", &filter.error),
        ("older_than", &filter.older_than),
        ("tags", &filter.tags),
        ("meta", &filter.meta),
        ("limit", &filter.limit),
    ] {
        if let Some(v) = value {
            let _ = write!(body, "<input type=hidden name={name} value=\"{}\">", esc(v));
        }
    }
    let _ = write!(
        body,
        "<label>reason (for the audit log) <input name=reason size=60 maxlength=1024></label>
         <button type=submit class=danger>{} {} task(s)</button> <a href=\"{b}/tasks?{}\">cancel</a></form>",
        capitalized(verb),
        plan.len(),
        query(&filter)
    );
    page(&base, &caller, "Bulk action", &body).into_response()
}

async fn bulk<S: TaskStore + Clone + 'static>(
    State(inner): Shared<S>,
    Extension(base): Extension<Base>,
    Extension(caller): Extension<Caller>,
    Form(form): Form<BulkForm>,
) -> Response {
    let b = &base.0;
    let operator = match caller.may_change(Some(&form.csrf)) {
        Ok(operator) => operator,
        Err(why) => return page_error(&base, StatusCode::FORBIDDEN, why),
    };
    let (action, target) = match bulk_target(&form) {
        Ok(x) => x,
        Err((code, why)) => return page_error(&base, code, &why),
    };
    let audit = Audit::new(operator, form.reason.clone());
    let applied = match ops::apply(&inner.store, action, &target, &audit).await {
        Ok(a) => a,
        Err(e) => return action_error(&base, &e),
    };
    let mut body = format!(
        "<h1>{} {} task(s)</h1>",
        capitalized(action.done()),
        applied.done.len()
    );
    body.push_str(&task_table(b, &applied.done));
    for (id, e) in &applied.skipped {
        let _ = write!(
            body,
            "<p class=note>Skipped task {id}: {}</p>",
            esc(&e.to_string())
        );
    }
    let _ = write!(
        body,
        "<p><a href=\"{b}/tasks?{}\">back to the list</a></p>",
        query(&form.filter.clone().normalized().without_paging())
    );
    page(&base, &caller, "Bulk action", &body).into_response()
}

async fn metrics<S: TaskStore + Clone + 'static>(
    State(inner): Shared<S>,
    Extension(base): Extension<Base>,
) -> Response {
    let Some(m) = &inner.metrics else {
        return page_error(
            &base,
            StatusCode::NOT_FOUND,
            "This console serves no metrics.",
        );
    };
    if inner.backlog_gauges {
        let due = {
            let g = inner.gauges.lock().unwrap_or_else(|p| p.into_inner());
            g.0.is_none_or(|at| at.elapsed() >= Duration::from_secs(15))
        };
        if due {
            match BacklogReading::read(&inner.store).await {
                Ok(reading) => {
                    let mut g = inner.gauges.lock().unwrap_or_else(|p| p.into_inner());
                    g.0 = Some(Instant::now());
                    for (event_type, waiting) in g.1.apply(&reading) {
                        tracing::warn!(%event_type, waiting,
                            "tasks wait for an event type no engine has a handler for");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "backlog counts for /metrics failed"),
            }
        }
    }
    m.response().into_response()
}

// ---------------------------------------------------------------------------------------
// sign in and out

#[derive(Debug, Deserialize)]
struct LoginForm {
    #[serde(default)]
    token: String,
}

async fn login_page(Extension(base): Extension<Base>) -> Response {
    login_response(&base, StatusCode::OK, "")
}

async fn login<S: TaskStore + Clone + 'static>(
    State(inner): Shared<S>,
    Extension(base): Extension<Base>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    if let Err(why) = same_origin(&headers) {
        return page_error(&base, StatusCode::FORBIDDEN, why);
    }
    // the token is checked by the authorizer, as a later request would present it
    let mut probe = axum::http::Request::new(());
    let token = form.token.trim().to_owned();
    match HeaderValue::from_str(&format!("{COOKIE}={token}")) {
        Ok(v) => {
            probe.headers_mut().insert(header::COOKIE, v);
        }
        Err(_) => {
            return login_response(&base, StatusCode::UNAUTHORIZED, "That token is not valid.")
        }
    }
    let (parts, ()) = probe.into_parts();
    if inner.authorizer.authorize(&parts) == Access::Denied {
        return login_response(&base, StatusCode::UNAUTHORIZED, "That token is not valid.");
    }
    let path = base.home();
    // Secure when the browser came over HTTPS (directly, or through a proxy that says so)
    let https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|p| p.eq_ignore_ascii_case("https"))
        || headers
            .get(header::ORIGIN)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|o| o.starts_with("https://"));
    let secure = if https { "; Secure" } else { "" };
    let cookie = format!("{COOKIE}={token}; Path={path}; HttpOnly; SameSite=Strict{secure}");
    let mut resp = Redirect::to(&path).into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

async fn logout(Extension(base): Extension<Base>) -> Response {
    let path = base.home();
    let mut resp = Redirect::to(&format!("{}/login", base.0)).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{COOKIE}=; Path={path}; HttpOnly; SameSite=Strict; Max-Age=0"
    )) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

fn login_response(base: &Base, code: StatusCode, message: &str) -> Response {
    let b = &base.0;
    let msg = if message.is_empty() {
        String::new()
    } else {
        format!("<p class=flash>{}</p>", esc(message))
    };
    let body = format!(
        "<h1>Sign in</h1>{msg}<form method=post action=\"{b}/login\" class=login>
         <label>token <input type=password name=token autofocus autocomplete=current-password></label>
         <button type=submit>Sign in</button></form>
         <p class=note>Scripts send <code>Authorization: Bearer &lt;token&gt;</code> instead.</p>"
    );
    (code, Html(layout(b, "Sign in", "", &body))).into_response()
}

// ---------------------------------------------------------------------------------------
// layout

async fn stylesheet() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        include_str!("../assets/style.css"),
    )
}

fn page(base: &Base, caller: &Caller, title: &str, body: &str) -> Html<String> {
    let b = &base.0;
    let who = match &caller.access {
        Access::Admin { operator } => format!("admin: {}", esc(operator)),
        _ => "read-only".to_owned(),
    };
    let nav = format!(
        "<nav><a href=\"{home}\">Overview</a> <a href=\"{b}/tasks\">Tasks</a> <a href=\"{b}/tasks?status=failed\">Failed</a> <a href=\"{b}/tasks?status=failed&amp;error=to+reconcile%3A\">To reconcile</a> <a href=\"{b}/sagas\">Sagas</a> <a href=\"{b}/queues\">Queues</a>
         <span class=who>{who}</span>
         <form method=post action=\"{b}/logout\" class=logout><button type=submit>Sign out</button></form></nav>",
        home = base.home()
    );
    Html(layout(b, title, &nav, body))
}

fn layout(b: &str, title: &str, nav: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><meta name=viewport content=\"width=device-width\">
         <title>{} · backstop</title><link rel=stylesheet href=\"{b}/assets/style.css\"></head>
         <body><header><span class=brand>backstop</span>{nav}</header><main>{body}</main></body></html>",
        esc(title)
    )
}

fn page_error(base: &Base, code: StatusCode, message: &str) -> Response {
    let body = format!(
        "<h1>{}</h1><p class=flash>{}</p><p><a href=\"{}\">overview</a></p>",
        code,
        esc(message),
        base.home()
    );
    (code, Html(layout(&base.0, "Error", "", &body))).into_response()
}

fn store_error(base: &Base, e: &Error) -> Response {
    let code = match e.kind() {
        ErrorKind::InvalidInput => StatusCode::BAD_REQUEST,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        k if k.is_temporary() => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    page_error(base, code, &e.to_string())
}

fn action_error(base: &Base, e: &Error) -> Response {
    store_error(base, e)
}

/// HTML-escape text.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn short(s: &str) -> String {
    let flat = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > 100 {
        format!("{}…", flat.chars().take(99).collect::<String>())
    } else {
        flat
    }
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

fn time(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

fn human(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 {
        format!("{} ms", d.as_millis())
    } else if s < 120.0 {
        format!("{s:.1} s")
    } else if s < 7200.0 {
        format!("{:.1} min", s / 60.0)
    } else if s < 172_800.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.1} days", s / 86_400.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn refuses_cross_site_posts() {
        let mut h = HeaderMap::new();
        assert!(same_origin(&h).is_ok());
        h.insert(header::HOST, HeaderValue::from_static("ops.example.com"));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://ops.example.com"),
        );
        assert!(same_origin(&h).is_ok());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert!(same_origin(&h).is_err());
        h.remove(header::ORIGIN);
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(same_origin(&h).is_err());
    }

    #[test]
    fn tokens_are_long_enough_and_compared_whole() {
        assert!(TokenAuth::default().admin("short", "ops").is_err());
        let auth = TokenAuth::default().admin("a".repeat(20), "ops").unwrap();
        let parts = |v: &str| {
            let mut r = axum::http::Request::new(());
            r.headers_mut()
                .insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            r.into_parts().0
        };
        assert_eq!(
            auth.authorize(&parts(&format!("Bearer {}", "a".repeat(20)))),
            Access::Admin {
                operator: "ops".into()
            }
        );
        assert_eq!(
            auth.authorize(&parts(&format!("Bearer {}", "a".repeat(19)))),
            Access::Denied
        );
        assert_eq!(
            TokenAuth::default().authorize(&parts("Bearer ")),
            Access::Denied
        );
    }
}
