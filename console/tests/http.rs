//! The console over HTTP (the real router, requests through tower): access (deny by
//! default, 401 without a token, read-only refused every change), CSRF and same-origin
//! checks, every action by id and in bulk with its audit entry, mounting under a prefix,
//! sign-in cookies and the redaction hook. Against a real SQLite store.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test code

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use backstop_console::{Access, Console, TokenAuth};
use backstop_core::{Audit, NewTask, Status, TaskStore};
use backstop_sqlite::SqliteStore;
use tower::ServiceExt;

const ADMIN: &str = "admin-token-0123456789";
const READ: &str = "read-token-0123456789";

struct Fixture {
    store: SqliteStore,
    _dir: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("console.db"))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    Fixture { store, _dir: dir }
}

impl Fixture {
    fn console(&self) -> Console<SqliteStore> {
        Console::new(self.store.clone()).authorizer(
            TokenAuth::default()
                .admin(ADMIN, "alice")
                .unwrap()
                .read_only(READ)
                .unwrap(),
        )
    }

    async fn failed(&self, event_type: &str, key: &str, error: &str) -> i64 {
        let task =
            NewTask::new(event_type, key).json(&serde_json::json!({"email": "ada@example.com"}));
        backstop_testkit::park_failed(&self.store, task, error).await
    }

    async fn status(&self, id: i64) -> Option<Status> {
        self.store.get(id).await.unwrap().map(|t| t.status)
    }
}

/// A response: status, headers we look at, body text.
struct Got {
    status: StatusCode,
    location: Option<String>,
    cookie: Option<String>,
    body: String,
}

async fn send(app: &Router, req: Request<Body>) -> Got {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let header_text = |h| {
        resp.headers()
            .get(h)
            .map(|v: &axum::http::HeaderValue| v.to_str().unwrap().to_owned())
    };
    let (location, cookie) = (
        header_text(header::LOCATION),
        header_text(header::SET_COOKIE),
    );
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 22)
        .await
        .unwrap();
    Got {
        status,
        location,
        cookie,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

fn get(path: &str, token: Option<&str>) -> Request<Body> {
    let mut r = Request::builder()
        .method(Method::GET)
        .uri(path)
        .header(header::HOST, "ops.test");
    if let Some(t) = token {
        r = r.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    r.body(Body::empty()).unwrap()
}

fn post(path: &str, token: Option<&str>, form: &[(&str, &str)]) -> Request<Body> {
    let body = serde_urlencoded::to_string(form).unwrap();
    let mut r = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::HOST, "ops.test")
        .header(header::ORIGIN, "http://ops.test")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(t) = token {
        r = r.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    r.body(Body::from(body)).unwrap()
}

/// The CSRF token a page's form carries.
fn csrf(page: &str) -> String {
    let at = page
        .find("name=csrf value=\"")
        .expect("a form with a CSRF token")
        + "name=csrf value=\"".len();
    page[at..].split('"').next().unwrap().to_owned()
}

#[tokio::test]
async fn denies_by_default_and_without_a_token() {
    let f = fixture().await;
    let id = f.failed("SEND_EMAIL", "order-1", "smtp down").await;
    // no authorizer: nobody
    let closed = Console::new(f.store.clone()).router();
    assert_eq!(
        send(&closed, get("/", Some(ADMIN))).await.status,
        StatusCode::UNAUTHORIZED
    );
    let app = f.console().router();
    for path in [
        "/",
        "/tasks",
        &format!("/tasks/{id}"),
        &format!("/tasks/{id}/confirm/reset"),
        "/bulk?action=reset&status=failed",
        "/metrics",
    ] {
        for token in [None, Some("wrong-token-0123456789")] {
            let got = send(&app, get(path, token)).await;
            assert_eq!(got.status, StatusCode::UNAUTHORIZED, "{path} {token:?}");
            assert!(
                got.body.contains("Sign in") && !got.body.contains("smtp down"),
                "{path}"
            );
        }
    }
    let got = send(
        &app,
        post(
            &format!("/tasks/{id}/reset"),
            None,
            &[("csrf", "x"), ("reason", "")],
        ),
    )
    .await;
    assert_eq!(got.status, StatusCode::UNAUTHORIZED);
    let got = send(
        &app,
        post("/bulk", None, &[("action", "reset"), ("status", "failed")]),
    )
    .await;
    assert_eq!(got.status, StatusCode::UNAUTHORIZED);
    assert_eq!(f.status(id).await, Some(Status::Failed));
    // the sign-in page and the stylesheet are public
    assert_eq!(send(&app, get("/login", None)).await.status, StatusCode::OK);
    let css = send(&app, get("/assets/style.css", None)).await;
    assert!(css.status == StatusCode::OK && css.body.contains(".status.failed"));
}

#[tokio::test]
async fn read_only_sees_everything_and_changes_nothing() {
    let f = fixture().await;
    let id = f
        .failed("SEND_EMAIL", "order-1", "smtp: connection refused")
        .await;
    let app = f.console().router();
    let overview = send(&app, get("/", Some(READ))).await;
    assert_eq!(overview.status, StatusCode::OK);
    assert!(overview.body.contains("SEND_EMAIL") && overview.body.contains("read-only"));
    let list = send(&app, get("/tasks?status=failed", Some(READ))).await;
    assert!(list.body.contains("smtp: connection refused") && !list.body.contains("Bulk actions"));
    // the reconciliation inbox: the failed tasks left "to reconcile", linked from the nav
    f.failed(
        "NOTIFY_PROVIDER",
        "order-2",
        "to reconcile: the notification schedule is used up (6 attempts): 503",
    )
    .await;
    let link = "/tasks?status=failed&amp;error=to+reconcile%3A";
    assert!(list.body.contains(link), "{}", list.body);
    let inbox = send(&app, get(&link.replace("&amp;", "&"), Some(READ))).await;
    assert!(
        inbox.body.contains("NOTIFY_PROVIDER") && !inbox.body.contains("smtp: connection refused"),
        "{}",
        inbox.body
    );
    let detail = send(&app, get(&format!("/tasks/{id}"), Some(READ))).await;
    assert_eq!(detail.status, StatusCode::OK);
    assert!(detail.body.contains("ada@example.com") && !detail.body.contains("/confirm/"));
    assert_eq!(
        send(&app, get(&format!("/tasks/{id}/confirm/reset"), Some(READ)))
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        send(&app, get("/bulk?action=reset&status=failed", Some(READ)))
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    // whatever token a read-only caller sends, no change is made
    let token = "0".repeat(32);
    let got = send(
        &app,
        post(
            &format!("/tasks/{id}/reset"),
            Some(READ),
            &[("csrf", &token), ("reason", "")],
        ),
    )
    .await;
    assert_eq!(got.status, StatusCode::FORBIDDEN);
    let got = send(
        &app,
        post(
            "/bulk",
            Some(READ),
            &[("action", "reset"), ("status", "failed"), ("csrf", &token)],
        ),
    )
    .await;
    assert_eq!(got.status, StatusCode::FORBIDDEN);
    assert_eq!(f.status(id).await, Some(Status::Failed));
    assert!(f.store.audit_log(id).await.unwrap().is_empty());
}

#[tokio::test]
async fn every_change_needs_the_csrf_token_and_the_same_origin() {
    let f = fixture().await;
    let id = f.failed("SEND_EMAIL", "order-1", "smtp down").await;
    let app = f.console().router();
    let page = send(
        &app,
        get(&format!("/tasks/{id}/confirm/reset"), Some(ADMIN)),
    )
    .await;
    assert_eq!(page.status, StatusCode::OK);
    let token = csrf(&page.body);
    let path = format!("/tasks/{id}/reset");
    for form in [
        vec![("reason", "x")],
        vec![("csrf", "0000"), ("reason", "x")],
    ] {
        assert_eq!(
            send(&app, post(&path, Some(ADMIN), &form)).await.status,
            StatusCode::FORBIDDEN
        );
    }
    let mut evil = post(&path, Some(ADMIN), &[("csrf", &token)]);
    evil.headers_mut()
        .insert(header::ORIGIN, "https://evil.example".parse().unwrap());
    assert_eq!(send(&app, evil).await.status, StatusCode::FORBIDDEN);
    let mut cross = post(&path, Some(ADMIN), &[("csrf", &token)]);
    cross
        .headers_mut()
        .insert("sec-fetch-site", "cross-site".parse().unwrap());
    assert_eq!(send(&app, cross).await.status, StatusCode::FORBIDDEN);
    let bulk = send(
        &app,
        post(
            "/bulk",
            Some(ADMIN),
            &[("action", "reset"), ("status", "failed"), ("csrf", "0000")],
        ),
    )
    .await;
    assert_eq!(bulk.status, StatusCode::FORBIDDEN);
    assert_eq!(f.status(id).await, Some(Status::Failed));
    // the token of one operator is not another's
    let other = Console::new(f.store.clone())
        .authorizer(|_: &axum::http::request::Parts| Access::Admin {
            operator: "mallory".into(),
        })
        .router();
    let theirs = csrf(
        &send(&other, get(&format!("/tasks/{id}/confirm/reset"), None))
            .await
            .body,
    );
    assert_ne!(theirs, token);
    // and with all of it, the change is made
    let ok = send(
        &app,
        post(
            &path,
            Some(ADMIN),
            &[("csrf", &token), ("reason", "smtp fixed")],
        ),
    )
    .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER);
    assert_eq!(
        ok.location.as_deref(),
        Some(format!("/tasks/{id}?done=reset").as_str())
    );
    assert_eq!(f.status(id).await, Some(Status::Pending));
}

#[tokio::test]
async fn every_action_by_id_and_in_bulk_is_applied_and_audited() {
    let f = fixture().await;
    let app = f.console().router();
    let a = f.failed("SEND_EMAIL", "a", "smtp down").await;
    let b = f.failed("SEND_EMAIL", "b", "smtp down").await;
    let c = f.failed("CHARGE", "c", "card declined").await;
    let p = f
        .store
        .enqueue(NewTask::new("SEND_EMAIL", "p"))
        .await
        .unwrap()
        .id;
    let token = csrf(
        &send(&app, get(&format!("/tasks/{a}/confirm/reset"), Some(ADMIN)))
            .await
            .body,
    );

    // by id: cancel, reset, delete (with their confirmation pages)
    for (id, action, after) in [
        (p, "cancel", Some(Status::Cancelled)),
        (p, "reset", Some(Status::Pending)),
        (p, "cancel", Some(Status::Cancelled)),
        (p, "delete", None),
    ] {
        let confirm = send(
            &app,
            get(&format!("/tasks/{id}/confirm/{action}"), Some(ADMIN)),
        )
        .await;
        assert_eq!(confirm.status, StatusCode::OK, "{action}: {}", confirm.body);
        let got = send(
            &app,
            post(
                &format!("/tasks/{id}/{action}"),
                Some(ADMIN),
                &[("csrf", &token), ("reason", action)],
            ),
        )
        .await;
        assert_eq!(got.status, StatusCode::SEE_OTHER, "{action}: {}", got.body);
        assert_eq!(f.status(id).await, after, "{action}");
    }
    let log: Vec<(String, String, String)> = f
        .store
        .audit_log(p)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.action, e.operator, e.reason))
        .collect();
    let want: Vec<(String, String, String)> = ["cancel", "reset", "cancel", "delete"]
        .iter()
        .map(|a| (a.to_string(), "alice".into(), a.to_string()))
        .collect();
    assert_eq!(log, want);
    // an action the state does not allow: 409, nothing written
    let got = send(
        &app,
        post(
            &format!("/tasks/{a}/cancel"),
            Some(ADMIN),
            &[("csrf", &token)],
        ),
    )
    .await;
    assert_eq!(got.status, StatusCode::CONFLICT);
    assert_eq!(
        send(
            &app,
            get(&format!("/tasks/{a}/confirm/cancel"), Some(ADMIN))
        )
        .await
        .status,
        StatusCode::CONFLICT
    );
    assert_eq!(
        send(&app, get("/tasks/999999", Some(ADMIN))).await.status,
        StatusCode::NOT_FOUND
    );

    // bulk: the confirmation lists the plan and changes nothing
    let plan = send(
        &app,
        get(
            "/bulk?action=reset&status=failed&event_type=SEND_EMAIL",
            Some(ADMIN),
        ),
    )
    .await;
    assert_eq!(plan.status, StatusCode::OK);
    assert!(
        plan.body.contains("Reset 2 matching task(s)?"),
        "{}",
        plan.body
    );
    assert!(!plan.body.contains("tasks match"), "{}", plan.body);
    // a limit below what matches: the page says how many match in all
    let capped = send(
        &app,
        get(
            "/bulk?action=reset&status=failed&event_type=SEND_EMAIL&limit=1",
            Some(ADMIN),
        ),
    )
    .await;
    assert_eq!(capped.status, StatusCode::OK);
    assert!(
        capped.body.contains("Reset 1 matching task(s)?")
            && capped
                .body
                .contains("2 tasks match: this confirmation resets the first 1"),
        "{}",
        capped.body
    );
    assert_eq!(
        (f.status(a).await, f.status(b).await),
        (Some(Status::Failed), Some(Status::Failed))
    );
    let done = send(
        &app,
        post(
            "/bulk",
            Some(ADMIN),
            &[
                ("action", "reset"),
                ("status", "failed"),
                ("event_type", "SEND_EMAIL"),
                ("csrf", &token),
                ("reason", "smtp back"),
            ],
        ),
    )
    .await;
    assert_eq!(done.status, StatusCode::OK);
    assert!(done.body.contains("Reset 2 task(s)"), "{}", done.body);
    assert_eq!(
        (f.status(a).await, f.status(b).await, f.status(c).await),
        (
            Some(Status::Pending),
            Some(Status::Pending),
            Some(Status::Failed)
        )
    );
    assert_eq!(f.store.audit_log(a).await.unwrap()[0].reason, "smtp back");
    // bulk cancel, then bulk delete of the cancelled
    let done = send(
        &app,
        post(
            "/bulk",
            Some(ADMIN),
            &[
                ("action", "cancel"),
                ("event_type", "SEND_EMAIL"),
                ("csrf", &token),
            ],
        ),
    )
    .await;
    assert!(done.body.contains("Cancelled 2 task(s)"), "{}", done.body);
    let done = send(
        &app,
        post(
            "/bulk",
            Some(ADMIN),
            &[
                ("action", "delete"),
                ("status", "cancelled"),
                ("csrf", &token),
            ],
        ),
    )
    .await;
    assert!(done.body.contains("Deleted 2 task(s)"), "{}", done.body);
    assert_eq!((f.status(a).await, f.status(b).await), (None, None));
    // a bulk action needs a filter
    let got = send(
        &app,
        post(
            "/bulk",
            Some(ADMIN),
            &[("action", "delete"), ("csrf", &token)],
        ),
    )
    .await;
    assert_eq!(got.status, StatusCode::BAD_REQUEST);
    assert_eq!(f.status(c).await, Some(Status::Failed));
}

#[tokio::test]
async fn mounts_under_a_prefix_and_signs_in_with_a_cookie() {
    let f = fixture().await;
    let id = f.failed("SEND_EMAIL", "order-1", "smtp down").await;
    let app = Router::new().nest("/ops/backstop", f.console().router());
    let page = send(&app, get("/ops/backstop", Some(ADMIN))).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains("href=\"/ops/backstop/tasks?")
            && page.body.contains("/ops/backstop/assets/style.css"),
        "{}",
        page.body
    );
    let detail = send(&app, get(&format!("/ops/backstop/tasks/{id}"), Some(ADMIN))).await;
    assert!(detail
        .body
        .contains(&format!("/ops/backstop/tasks/{id}/confirm/reset")));
    // sign in: a wrong token is refused, the right one sets a cookie for the prefix
    let bad = send(
        &app,
        post(
            "/ops/backstop/login",
            None,
            &[("token", "nope-nope-nope-nope")],
        ),
    )
    .await;
    assert_eq!(bad.status, StatusCode::UNAUTHORIZED);
    let ok = send(&app, post("/ops/backstop/login", None, &[("token", ADMIN)])).await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER);
    let cookie = ok.cookie.expect("a cookie");
    assert!(
        cookie.contains("Path=/ops/backstop;")
            && cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    let mut behind_tls = post("/ops/backstop/login", None, &[("token", ADMIN)]);
    behind_tls
        .headers_mut()
        .insert("x-forwarded-proto", "https".parse().unwrap());
    let tls_cookie = send(&app, behind_tls).await.cookie.expect("a cookie");
    assert!(tls_cookie.contains("; Secure"), "{tls_cookie}");
    let pair = cookie.split(';').next().unwrap().to_owned();
    let mut req = get("/ops/backstop/tasks?status=failed", None);
    req.headers_mut()
        .insert(header::COOKIE, pair.parse().unwrap());
    let list = send(&app, req).await;
    assert_eq!(list.status, StatusCode::OK);
    assert!(list.body.contains("smtp down"));
    // the action redirects inside the prefix
    let confirm = send(
        &app,
        get(
            &format!("/ops/backstop/tasks/{id}/confirm/reset"),
            Some(ADMIN),
        ),
    )
    .await;
    let got = send(
        &app,
        post(
            &format!("/ops/backstop/tasks/{id}/reset"),
            Some(ADMIN),
            &[("csrf", &csrf(&confirm.body))],
        ),
    )
    .await;
    assert_eq!(
        got.location.as_deref(),
        Some(format!("/ops/backstop/tasks/{id}?done=reset").as_str())
    );
}

#[tokio::test]
async fn the_redaction_hook_decides_what_of_a_payload_is_shown() {
    let f = fixture().await;
    let id = f.failed("SEND_EMAIL", "order-1", "smtp down").await;
    let app = f
        .console()
        .redact(|t| {
            if t.event_type == "SEND_EMAIL" {
                "{\"email\":\"[redacted]\"}".into()
            } else {
                t.payload.clone()
            }
        })
        .router();
    let detail = send(&app, get(&format!("/tasks/{id}"), Some(ADMIN))).await;
    assert!(
        detail.body.contains("[redacted]") && !detail.body.contains("ada@example.com"),
        "{}",
        detail.body
    );
}

/// The saga pages: the list filters by definition and status and links each saga; a
/// saga's timeline shows its steps' tasks (attempts, last error), its step rows, the
/// barrier's records and the operators' log, in time order; the input and outputs are
/// not shown when a redactor is set; a missing saga is a 404 and a bad filter a 400.
/// Read-only access sees them.
#[tokio::test]
async fn saga_pages_list_and_show_a_timeline() {
    use backstop_core::{
        Audit, Engine, HandlerOptions, RetryPolicy, SagaCommand, SagaDef, SagaStatus, SagaStep,
        SagaSteps, StepError,
    };
    use std::time::Duration;
    let f = fixture().await;
    let fast = RetryPolicy::fixed(2, Duration::from_millis(10));
    let order = SagaDef::builder("order")
        .step(SagaStep::new("stock").compensated().retry(fast))
        .step(SagaStep::new("pay").retry(fast))
        .build()
        .unwrap();
    let store = f.store.clone();
    let guarded = move |cx: backstop_core::StepContext| {
        let store = store.clone();
        async move {
            let call = cx.branch()?;
            store.transaction(move |tx| tx.barrier(&call)).await?;
            Ok::<_, StepError>(())
        }
    };
    let steps = SagaSteps::new()
        .action("stock", {
            let guarded = guarded.clone();
            move |cx: backstop_core::StepContext| {
                let g = guarded(cx);
                async move {
                    g.await?;
                    Ok(serde_json::json!({ "held": "secret-sku-9" }))
                }
            }
        })
        .compensation("stock", move |cx| {
            let g = guarded(cx);
            async move {
                // a moment after pay's refusal, so the timeline's order is plain
                tokio::time::sleep(Duration::from_millis(5)).await;
                g.await
            }
        })
        .action("pay", |_cx| async {
            Err::<(), _>(StepError::refuse("card declined"))
        });
    let engine = Engine::builder(f.store.clone())
        .saga(order.clone(), steps, HandlerOptions::default())
        .start()
        .unwrap();
    let first = engine
        .start_saga(
            &order
                .start("o-1", &serde_json::json!({"card": "4111-secret"}))
                .unwrap(),
        )
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while f.store.saga_by_id(first.id).await.unwrap().unwrap().status != SagaStatus::Compensated {
        assert!(
            std::time::Instant::now() < deadline,
            "the saga did not compensate"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    engine.shutdown().await;
    // another, parked by an operator (no engine runs it)
    let other = f
        .store
        .start_saga(&order.start("o-2", &1).unwrap())
        .await
        .unwrap();
    f.store
        .command_saga(
            other.id,
            SagaCommand::Park,
            &Audit::new("alice", "waiting for the warehouse"),
        )
        .await
        .unwrap();
    let app = f.console().router();

    let all = send(&app, get("/sagas", Some(READ))).await;
    assert_eq!(all.status, StatusCode::OK);
    assert!(
        all.body.contains(&format!("href=\"/sagas/{}\"", first.id))
            && all.body.contains("o-2")
            && all.body.contains("card declined"),
        "{}",
        all.body
    );
    let parked = send(&app, get("/sagas?status=parked&name=order", Some(READ))).await;
    assert!(
        parked.body.contains("o-2") && !parked.body.contains(">o-1<"),
        "{}",
        parked.body
    );
    let none = send(&app, get("/sagas?name=refund", Some(READ))).await;
    assert!(none.body.contains("No saga matches."));
    assert_eq!(
        send(&app, get("/sagas?status=lost", Some(READ)))
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        send(&app, get("/sagas/999", Some(READ))).await.status,
        StatusCode::NOT_FOUND
    );

    let page = send(&app, get(&format!("/sagas/{}", first.id), Some(READ))).await;
    assert_eq!(page.status, StatusCode::OK);
    let body = &page.body;
    let at = |needle: &str| {
        body.find(needle)
            .unwrap_or_else(|| panic!("the timeline lacks {needle:?}: {body}"))
    };
    // the tasks of each phase with their outcome, the step rows, the barrier's records
    for needle in [
        "<td>stock</td><td>action: <a href=\"/tasks/",
        "<td>pay</td><td>action: <span class=\"status succeeded\">succeeded</span> after 1 of 2 attempt(s)",
        "<td>stock</td><td>compensation: <a href=\"/tasks/",
        "<td>barrier</td><td>stock</td><td>action recorded",
        "<td>barrier</td><td>stock</td><td>compensate recorded",
        "secret-sku-9",
        "4111-secret",
    ] {
        at(needle);
    }
    // in time order: the action's barrier record, pay refused, the compensation's
    // record, stock's row compensated
    let order = [
        at("action recorded"),
        at("<td>step</td><td>pay</td><td><span class=\"status refused\""),
        at("compensate recorded"),
        at("<td>step</td><td>stock</td><td><span class=\"status compensated\""),
    ];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}: {body}");
    let parked = send(&app, get(&format!("/sagas/{}", other.id), Some(READ))).await;
    assert!(
        parked.body.contains("<td>operator</td>")
            && parked
                .body
                .contains("park by alice: waiting for the warehouse"),
        "{}",
        parked.body
    );

    // with a redactor, no input or output
    let redacted = f.console().redact(|_| "(hidden)".into()).router();
    let page = send(&redacted, get(&format!("/sagas/{}", first.id), Some(READ))).await;
    assert!(
        !page.body.contains("secret-sku-9") && !page.body.contains("4111-secret"),
        "{}",
        page.body
    );
    assert!(page.body.contains("(redacted)"));
}

/// The queues page: read-only sees each queue and no button, and its POST is refused
/// (nothing changes); an admin's pause needs the CSRF token, is applied with the
/// operator's name and reason, shows the queue paused and its log; a bad event type is
/// a 400 that writes nothing.
#[tokio::test]
async fn queues_pause_and_resume_audited_for_admins_only() {
    use backstop_core::QueueChange;
    let f = fixture().await;
    f.store
        .enqueue(NewTask::new("SEND_EMAIL", "m1"))
        .await
        .unwrap();
    let app = f.console().router();
    let page = send(&app, get("/queues", Some(READ))).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains("SEND_EMAIL") && page.body.contains("active"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("/queues/SEND_EMAIL/pause"), "no button");
    let token = "0".repeat(32);
    let got = send(
        &app,
        post(
            "/queues/SEND_EMAIL/pause",
            Some(READ),
            &[("csrf", &token), ("reason", "x")],
        ),
    )
    .await;
    assert_eq!(got.status, StatusCode::FORBIDDEN);
    assert!(f.store.queues().await.unwrap().is_empty());

    let page = send(&app, get("/queues", Some(ADMIN))).await;
    assert!(
        page.body.contains("/queues/SEND_EMAIL/pause"),
        "{}",
        page.body
    );
    let got = send(
        &app,
        post(
            "/queues/SEND_EMAIL/pause",
            Some(ADMIN),
            &[("csrf", &token), ("reason", "x")],
        ),
    )
    .await;
    assert_eq!(got.status, StatusCode::FORBIDDEN, "a wrong CSRF token");
    assert!(f.store.queues().await.unwrap().is_empty());
    let csrf = csrf(&page.body);
    let got = send(
        &app,
        post(
            "/queues/SEND_EMAIL/pause",
            Some(ADMIN),
            &[("csrf", &csrf), ("reason", "provider down")],
        ),
    )
    .await;
    assert_eq!(got.status, StatusCode::SEE_OTHER);
    assert_eq!(got.location.as_deref(), Some("/queues?done=pause"));
    let q = f.store.queues().await.unwrap();
    assert_eq!(
        (q[0].event_type.as_str(), q[0].paused),
        ("SEND_EMAIL", true)
    );
    let log = f.store.queue_log("SEND_EMAIL").await.unwrap();
    assert_eq!(
        (
            log[0].action.as_str(),
            log[0].operator.as_str(),
            log[0].reason.as_str()
        ),
        ("pause", "alice", "provider down")
    );
    let detail = send(&app, get("/queues/SEND_EMAIL", Some(READ))).await;
    assert_eq!(detail.status, StatusCode::OK);
    assert!(
        detail.body.contains("paused") && detail.body.contains("provider down"),
        "{}",
        detail.body
    );
    let got = send(
        &app,
        post(
            "/queues/bad%20type/resume",
            Some(ADMIN),
            &[("csrf", &csrf), ("reason", "")],
        ),
    )
    .await;
    assert_eq!(got.status, StatusCode::BAD_REQUEST, "{}", got.body);
    assert_eq!(f.store.queues().await.unwrap().len(), 1);
    f.store
        .set_queue("SEND_EMAIL", QueueChange::Resume, &Audit::new("bob", ""))
        .await
        .unwrap();
    let page = send(&app, get("/queues?done=resume", Some(ADMIN))).await;
    assert!(page.body.contains("Queue resumed"), "{}", page.body);

    // a limit shows in the list and on the queue's page; the buttons do not set one
    f.store
        .set_queue(
            "SEND_EMAIL",
            QueueChange::Concurrency(Some(7)),
            &Audit::new("bob", "api"),
        )
        .await
        .unwrap();
    let page = send(&app, get("/queues", Some(READ))).await;
    assert!(
        page.body.contains("<td class=limit>7 at once</td>"),
        "{}",
        page.body
    );
    let detail = send(&app, get("/queues/SEND_EMAIL", Some(READ))).await;
    assert!(
        detail.body.contains("(limits: 7 at once)"),
        "{}",
        detail.body
    );
    assert!(
        detail.body.contains("concurrency 7"),
        "logged: {}",
        detail.body
    );
    let got = send(
        &app,
        post(
            "/queues/SEND_EMAIL/concurrency%201",
            Some(ADMIN),
            &[("csrf", &csrf), ("reason", "")],
        ),
    )
    .await;
    assert_eq!(got.status, StatusCode::NOT_FOUND, "{}", got.body);
    assert_eq!(f.store.queues().await.unwrap()[0].concurrency, Some(7));
}

/// A pending task's detail page has an edit form for admins (not for read-only access,
/// nor for a running task); a run-now edit is applied with the operator's name and
/// reason; a payload that is not JSON is a 400 that writes nothing; read-only is 403.
#[tokio::test]
async fn an_admin_edits_a_pending_task_from_its_page() {
    use std::time::Duration;
    let f = fixture().await;
    let id = f
        .store
        .enqueue(NewTask::new("SEND_EMAIL", "later").delay(Duration::from_secs(3600)))
        .await
        .unwrap()
        .id;
    let due = f.store.get(id).await.unwrap().unwrap().next_run_at;
    let app = f.console().router();
    let page = send(&app, get(&format!("/tasks/{id}"), Some(READ))).await;
    assert!(!page.body.contains("/edit\""), "read-only: no form");
    let page = send(&app, get(&format!("/tasks/{id}"), Some(ADMIN))).await;
    assert!(
        page.body.contains(&format!("action=\"/tasks/{id}/edit\"")),
        "{}",
        page.body
    );
    let token = csrf(&page.body);
    let got = send(
        &app,
        post(
            &format!("/tasks/{id}/edit"),
            Some(READ),
            &[("csrf", &token), ("run", "now")],
        ),
    )
    .await;
    assert_eq!(got.status, StatusCode::FORBIDDEN);
    let got = send(
        &app,
        post(
            &format!("/tasks/{id}/edit"),
            Some(ADMIN),
            &[("csrf", &token), ("run", ""), ("payload", "{nope")],
        ),
    )
    .await;
    assert_eq!(got.status, StatusCode::BAD_REQUEST, "{}", got.body);
    assert!(f.store.audit_log(id).await.unwrap().is_empty());
    let got = send(
        &app,
        post(
            &format!("/tasks/{id}/edit"),
            Some(ADMIN),
            &[
                ("csrf", &token),
                ("run", "now"),
                ("payload", ""),
                ("reason", "customer waits"),
            ],
        ),
    )
    .await;
    assert_eq!(got.status, StatusCode::SEE_OTHER, "{}", got.body);
    assert_eq!(
        got.location.as_deref(),
        Some(format!("/tasks/{id}?done=edit").as_str())
    );
    let t = f.store.get(id).await.unwrap().unwrap();
    assert!(t.next_run_at < due, "due now");
    let log = f.store.audit_log(id).await.unwrap();
    assert_eq!(
        (
            log[0].action.as_str(),
            log[0].operator.as_str(),
            log[0].reason.as_str()
        ),
        ("run_now", "alice", "customer waits")
    );
    let page = send(&app, get(&format!("/tasks/{id}?done=edit"), Some(ADMIN))).await;
    assert!(page.body.contains("edited."), "{}", page.body);
    let owner = backstop_core::Owner::new("w").unwrap();
    f.store.claim_by_id(id, &owner).await.unwrap().unwrap();
    let page = send(&app, get(&format!("/tasks/{id}"), Some(ADMIN))).await;
    assert!(!page.body.contains("/edit\""), "running: no form");
}
