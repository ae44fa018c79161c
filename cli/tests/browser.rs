//! The standalone console (`backstop serve`) in a real browser: Debian's headless
//! `chromium`, driven through `chromedriver` (WebDriver), against a real SQLite database
//! with an engine running beside it. It signs in, lists the failed tasks, opens one,
//! resets it and sees it succeed, pauses and resumes a queue beside a limited one, and
//! reschedules a pending task with a new payload;
//! screenshots of the overview, the detail page and the queues are saved under the test's
//! output (`target/tmp/console-screenshots/`).
//!
//! Needs `chromedriver` and `chromium` (installed by `scripts/test`); skipped with a
//! printed reason without them, unless `BACKSTOP_TEST_REQUIRE` names `browser`.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test code

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use backstop::sqlite::SqliteStore;
use backstop::{handler_fn, Engine, EngineConfig, HandlerOptions, NewTask, Task, TaskStore};
use base64::Engine as _;
use serde_json::{json, Value};

const TOKEN: &str = "browser-test-token-0123456789";

/// A child process killed on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP/1.1 request to chromedriver, its JSON answer's `value`.
fn webdriver(port: u16, method: &str, path: &str, body: Option<Value>) -> Value {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // chromedriver keeps the connection open: read the head, then Content-Length bytes
    let mut r = BufReader::new(s);
    let mut length = 0;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap();
            }
        }
    }
    let mut raw = vec![0; length];
    r.read_exact(&mut raw).unwrap();
    let body = String::from_utf8_lossy(&raw).into_owned();
    let v: Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{method} {path}: {e}: {body}"));
    if let Some(err) = v["value"].get("error") {
        panic!("{method} {path}: {err}: {}", v["value"]["message"]);
    }
    v["value"].clone()
}

/// A browser session.
struct Browser {
    port: u16,
    session: String,
    _driver: Running,
}

impl Browser {
    fn start(driver: &Path) -> Browser {
        let port = free_port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let driver = Running(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium().expect("chromium").display().to_string(),
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"]
            }
        }}});
        let v = webdriver(port, "POST", "/session", Some(caps));
        Browser {
            port,
            session: v["sessionId"].as_str().unwrap().to_owned(),
            _driver: driver,
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        webdriver(
            self.port,
            method,
            &format!("/session/{}{path}", self.session),
            body,
        )
    }

    fn go(&self, url: &str) {
        self.call("POST", "/url", Some(json!({"url": url})));
    }

    fn find(&self, css: &str) -> String {
        let v = self.call(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        );
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap()
            .to_owned()
    }

    fn click(&self, css: &str) {
        let e = self.find(css);
        self.call("POST", &format!("/element/{e}/click"), Some(json!({})));
    }

    fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css);
        self.call(
            "POST",
            &format!("/element/{e}/value"),
            Some(json!({"text": text})),
        );
    }

    fn source(&self) -> String {
        self.call("GET", "/source", None)
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The page source once `ready` holds for it (a click's navigation may still be on
    /// its way when the click returns).
    fn wait_for(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let page = self.source();
            if ready(&page) {
                return page;
            }
            assert!(Instant::now() < deadline, "waited for {what}: {page}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn url(&self) -> String {
        self.call("GET", "/url", None).as_str().unwrap().to_owned()
    }

    fn screenshot(&self, path: &Path) {
        let png = self.call("GET", "/screenshot", None);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap())
            .unwrap();
        assert!(bytes.starts_with(b"\x89PNG"), "a PNG");
        std::fs::write(path, bytes).unwrap();
        println!("screenshot: {}", path.display());
    }
}

impl Drop for Browser {
    /// End the session (closes chromium), whatever happened; then the driver is killed.
    fn drop(&mut self) {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let _ = write!(
                s,
                "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                self.session
            );
            let _ = s.read(&mut [0; 1024]);
        }
    }
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

fn chromium() -> Option<PathBuf> {
    which("chromium")
        .or_else(|| which("chromium-browser"))
        .or_else(|| which("google-chrome"))
}

#[test]
fn the_standalone_console_lists_opens_and_resets_a_failed_task_in_a_browser() {
    let (Some(driver), Some(_)) = (which("chromedriver"), chromium()) else {
        assert!(
            !backstop_testkit::required("browser"),
            "the browser is required, but chromedriver or chromium is not installed"
        );
        eprintln!("SKIPPED the browser test: chromedriver and chromium are not on PATH (Debian: apt-get install chromium chromium-driver)");
        return;
    };
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("console.db");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    // a failed task, and an engine that would now succeed
    let store = rt.block_on(async {
        let store = SqliteStore::open(&db).await.unwrap();
        store.migrate().await.unwrap();
        for (key, error, tenant) in [
            (
                "order-42",
                "smtp: connection refused by mail.example.com",
                "acme",
            ),
            ("order-43", "smtp: mailbox full", "globex"),
        ] {
            let task = NewTask::new("SEND_EMAIL", key)
                .json(&json!({"to": "ada@example.com", "template": "order-confirmed"}))
                .tags(["email", &format!("tenant:{tenant}")])
                .metadata(&json!({"tenant": tenant, "requested_by": "checkout"}));
            backstop_testkit::park_failed(&store, task, error).await;
        }
        store
            .enqueue(NewTask::new("CHARGE", "order-44"))
            .await
            .unwrap();
        // a saga an operator parked
        let def = backstop::SagaDef::builder("checkout")
            .step(backstop::SagaStep::new("pay"))
            .build()
            .unwrap();
        let saga = store
            .start_saga(&def.start("order-45", &1).unwrap())
            .await
            .unwrap();
        store
            .command_saga(
                saga.id,
                backstop::SagaCommand::Park,
                &backstop::Audit::new("ops", "awaiting the fraud check"),
            )
            .await
            .unwrap();
        store
    });
    let id = rt
        .block_on(store.list(&backstop::TaskFilter::default().biz_key("order-42")))
        .unwrap()[0]
        .id;
    let engine = rt.block_on(async {
        Engine::builder(store.clone())
            .config(
                EngineConfig::default()
                    .poll_interval(Duration::from_millis(100))
                    .first_poll_delay(Duration::ZERO),
            )
            .handler(
                "SEND_EMAIL",
                handler_fn(|_t: Task| async {
                    if let Some(cx) = backstop::Context::current() {
                        cx.record_output(&json!({"delivered_to": "mail.example.com"}))
                            .await?;
                    }
                    Ok(())
                }),
                HandlerOptions::default(),
            )
            .start()
            .unwrap()
    });

    // the console, standalone, on a free port
    let mut serve = Command::new(env!("CARGO_BIN_EXE_backstop"))
        .args([
            "--url",
            &format!("sqlite:{}", db.display()),
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .env("BACKSTOP_CONSOLE_TOKEN", TOKEN)
        .env("BACKSTOP_CONSOLE_OPERATOR", "browser-operator")
        .env_remove("BACKSTOP_URL")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(serve.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let _serve = Running(serve);
    let base = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("the console's address")
        .trim_end_matches('/')
        .to_owned();

    let b = Browser::start(&driver);
    // no token: the sign-in page
    b.go(&format!("{base}/tasks"));
    b.wait_for("the sign-in page", |p| p.contains("Sign in"));
    b.go(&format!("{base}/login"));
    b.type_into("input[name=token]", TOKEN);
    b.click("form.login button");
    b.wait_for("the overview", |p| p.contains("Backlog"));
    b.screenshot(&shots.join("overview.png"));

    // the failed tasks, with their errors
    b.click("nav a[href='/tasks?status=failed']");
    let list = b.wait_for("the failed tasks", |p| p.contains("<h1>Tasks</h1>"));
    assert!(
        list.contains("smtp: connection refused by mail.example.com")
            && list.contains("smtp: mailbox full"),
        "{list}"
    );
    assert!(!list.contains("order-44"));
    // narrowed by a tag and a metadata key: only acme's
    b.type_into("form.filters input[name=tags]", "email tenant:acme");
    b.type_into("form.filters input[name=meta]", "tenant=acme");
    b.click("form.filters button[type=submit]");
    let list = b.wait_for("the filtered list", |p| {
        p.contains("<h1>Tasks</h1>") && !p.contains("smtp: mailbox full")
    });
    assert!(
        list.contains("order-42") && list.contains("tenant:acme"),
        "{list}"
    );
    assert!(b.url().contains("meta=tenant%3Dacme"), "{}", b.url());
    b.screenshot(&shots.join("filtered.png"));
    // open one
    b.click(&format!("table.tasks a[href='/tasks/{id}']"));
    let detail = b.wait_for("the task", |p| p.contains(&format!("Task {id} ")));
    assert!(
        detail.contains("ada@example.com") && detail.contains("order-42"),
        "{detail}"
    );
    assert!(
        detail.contains("<h2>Metadata</h2>") && detail.contains("requested_by"),
        "{detail}"
    );
    assert!(!detail.contains("<h2>Output</h2>"), "no output yet");
    b.screenshot(&shots.join("detail.png"));
    // reset it, with a reason
    b.click(&format!("a[href='/tasks/{id}/confirm/reset']"));
    b.wait_for("the confirmation", |p| {
        p.contains(&format!("Reset task {id}?"))
    });
    b.type_into("input[name=reason]", "the mail server is back");
    b.click("form.confirm button.danger");
    b.wait_for("the flash", |p| p.contains(&format!("Task {id} reset.")));
    assert!(
        b.url().ends_with(&format!("/tasks/{id}?done=reset")),
        "{}",
        b.url()
    );
    // the engine runs it; the page shows it succeeded, and who reset it
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        b.go(&format!("{base}/tasks/{id}"));
        let page = b.source();
        if page.contains("class=\"status succeeded\"") {
            assert!(
                page.contains("browser-operator") && page.contains("the mail server is back"),
                "{page}"
            );
            assert!(
                page.contains("<h2>Output</h2>") && page.contains("mail.example.com"),
                "the handler's output: {page}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the task did not succeed: {page}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    b.screenshot(&shots.join("detail-succeeded.png"));
    let task = rt.block_on(store.get(id)).unwrap().unwrap();
    assert_eq!(
        (task.status, task.attempts),
        (backstop::Status::Succeeded, 1)
    );
    let other = rt
        .block_on(store.list(&backstop::TaskFilter::default().biz_key("order-43")))
        .unwrap();
    assert_eq!(
        other[0].status,
        backstop::Status::Failed,
        "only the one task was reset"
    );
    // the sagas: the list, then the parked one's timeline with the operator's park
    b.click("nav a[href='/sagas']");
    let sagas = b.wait_for("the sagas", |p| p.contains("<h1>Sagas</h1>"));
    assert!(
        sagas.contains("order-45") && sagas.contains("parked"),
        "{sagas}"
    );
    b.click("table.sagas a");
    let timeline = b.wait_for("the saga's timeline", |p| p.contains("<h2>Timeline</h2>"));
    assert!(
        timeline.contains("park by ops: awaiting the fraud check") && timeline.contains("pay"),
        "{timeline}"
    );
    b.screenshot(&shots.join("saga.png"));
    // the queues: SEND_EMAIL limited to 5 at once (shown in its row); CHARGE waits with
    // no handler: pause it with a reason, then resume it
    let limit = backstop::QueueChange::Concurrency(Some(5));
    let ops = backstop::Audit::new("ops", "the mail relay takes five");
    rt.block_on(store.set_queue("SEND_EMAIL", limit, &ops))
        .unwrap();
    let rate =
        backstop::QueueChange::Rate(Some(backstop::RateLimit::new(100, Duration::from_secs(60))));
    rt.block_on(store.set_queue("SEND_EMAIL", rate, &ops))
        .unwrap();
    b.click("nav a[href='/queues']");
    let queues = b.wait_for("the queues", |p| p.contains("<h1>Queues</h1>"));
    assert!(
        queues.contains("CHARGE") && queues.contains("SEND_EMAIL"),
        "{queues}"
    );
    assert!(
        queues.contains("<td class=\"limit\">5 at once, 100 per 60s</td>"),
        "{queues}"
    );
    b.type_into(
        "form[action='/queues/CHARGE/pause'] input[name=reason]",
        "card processor maintenance",
    );
    b.click("form[action='/queues/CHARGE/pause'] button");
    let paused = b.wait_for("the pause", |p| p.contains("Queue paused"));
    assert!(
        paused.contains("form action=\"/queues/CHARGE/resume\"")
            || paused.contains("action=\"/queues/CHARGE/resume\""),
        "{paused}"
    );
    b.screenshot(&shots.join("queues.png"));
    let q = rt.block_on(store.queues()).unwrap();
    assert_eq!(
        q.iter()
            .map(|q| (q.event_type.as_str(), q.paused, q.concurrency))
            .collect::<Vec<_>>(),
        vec![("CHARGE", true, None), ("SEND_EMAIL", false, Some(5))]
    );
    let log = rt.block_on(store.queue_log("CHARGE")).unwrap();
    assert_eq!(
        (
            log[0].action.as_str(),
            log[0].operator.as_str(),
            log[0].reason.as_str()
        ),
        ("pause", "browser-operator", "card processor maintenance")
    );
    b.click("form[action='/queues/CHARGE/resume'] button");
    b.wait_for("the resume", |p| p.contains("Queue resumed"));
    assert!(!rt.block_on(store.queues()).unwrap()[0].paused);
    // edit CHARGE's pending task (no handler runs it): due in 2 h, a new payload
    let charge = rt
        .block_on(store.list(&backstop::TaskFilter::default().biz_key("order-44")))
        .unwrap()[0]
        .id;
    b.go(&format!("{base}/tasks/{charge}"));
    b.wait_for("the pending task", |p| p.contains("<h2>Edit</h2>"));
    b.click("select[name=run] option[value=in]");
    b.type_into("input[name=run_in]", "2h");
    b.type_into("textarea[name=payload]", r#"{"amount": 42}"#);
    b.type_into("form.confirm input[name=reason]", "customer asked to wait");
    let before = chrono::Utc::now();
    b.click("form.confirm button[type=submit]");
    b.wait_for("the edit", |p| {
        p.contains("Task") && b.url().ends_with("?done=edit")
    });
    b.screenshot(&shots.join("edited.png"));
    let task = rt.block_on(store.get(charge)).unwrap().unwrap();
    let due = task.next_run_at - before;
    assert!(
        due > chrono::Duration::minutes(119) && due <= chrono::Duration::minutes(121),
        "due in {due}"
    );
    assert_eq!(
        (task.status, task.payload.as_str()),
        (backstop::Status::Pending, r#"{"amount": 42}"#)
    );
    let audit = rt.block_on(store.audit_log(charge)).unwrap();
    assert_eq!(
        (audit[0].operator.as_str(), audit[0].reason.as_str()),
        ("browser-operator", "customer asked to wait")
    );
    drop(b);
    rt.block_on(engine.shutdown());
}
