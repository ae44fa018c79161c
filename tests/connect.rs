//! `backstop::connect(url)`: the backend picked from the URL's scheme, the store's
//! options read from its query (each backend's own), bad URLs refused before anything is
//! opened, and the one transactional enqueue on sqlx's `Any` on every database.
#![cfg(feature = "sqlite")]
use backstop::{connect, connect_with, AnyStore, StoreConfig};
use backstop::{ErrorKind, NewTask, TaskStore};

#[tokio::test]
async fn picks_sqlite_from_the_url() {
    let dir = std::env::temp_dir().join(format!("backstop-any-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for url in [
        format!("sqlite:{}", dir.join("a.db").display()),
        format!("sqlite://{}", dir.join("b.db").display()),
        "sqlite::memory:".to_owned(),
    ] {
        let store = connect(&url).await.unwrap();
        assert!(matches!(store, AnyStore::Sqlite(_)), "{url}");
        store.migrate().await.unwrap();
        let e = store.enqueue(NewTask::new("E", "k")).await.unwrap();
        assert!(e.created);
    }
    assert!(dir.join("a.db").exists() && dir.join("b.db").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn refuses_unknown_schemes_and_bad_config() {
    for url in ["mongodb://x", "nope", "sqlite:"] {
        let e = connect(url).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config, "{url}: {e}");
    }
    let e = connect_with("sqlite::memory:", StoreConfig::default()).await;
    assert!(e.is_ok());
    let dir = std::env::temp_dir().join(format!("backstop-any-bad-{}", std::process::id()));
    let url = format!("sqlite:{}", dir.join("x.db").display());
    let e = connect_with(&url, StoreConfig::default().table("bad name"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
    // a parameter that is not a SQLite option is refused, not taken into the path
    for q in [
        "sqlite:{}?mode=rwc",
        "sqlite:{}?TABLE=x",
        "sqlite::memory:?cache=shared",
    ] {
        let url = q.replace("{}", &dir.join("y.db").display().to_string());
        let e = connect(&url).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config, "{url}: {e}");
        assert!(e.to_string().contains("not SQLite options"), "{e}");
    }
    assert!(!dir.exists(), "nothing was created");
}

/// The store's options ride in the URL; bad values and other backends' options are
/// refused before anything is opened.
#[tokio::test]
async fn reads_options_from_the_url() {
    let dir = std::env::temp_dir().join(format!("backstop-any-opts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("o.db");
    let url = format!(
        "sqlite:{}?table=jobs&max_connections=2&busy_timeout=1500ms&synchronous=normal",
        file.display()
    );
    let AnyStore::Sqlite(s) = connect(&url).await.unwrap() else {
        panic!("sqlite")
    };
    assert_eq!(s.config().table, "jobs");
    s.migrate().await.unwrap();
    let e = s.enqueue(NewTask::new("E", "k")).await.unwrap();
    assert!(e.created);
    for bad in [
        "max_connections=0",
        "busy_timeout=5",
        "synchronous=sometimes",
        "claim=auto",
        "every_node=true",
        "schema=x",
        "acquire_timeout=1s",
        "table=bad%20name",
    ] {
        let url = format!("sqlite:{}?{bad}", dir.join("bad.db").display());
        let e = connect(&url).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config, "{bad}: {e}");
    }
    assert!(!dir.join("bad.db").exists(), "a refused URL opens nothing");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Behind PgBouncer in transaction pooling mode, asked for in the URL: the store
/// works (unnamed statements), and has no native notifier (engines poll).
#[cfg(feature = "postgres")]
#[tokio::test]
async fn works_through_pgbouncer_from_the_url() {
    let Some(url) = std::env::var("BACKSTOP_TEST_PGBOUNCER_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        assert!(
            !std::env::var("BACKSTOP_TEST_REQUIRE")
                .unwrap_or_default()
                .split(',')
                .any(|b| b == "pgbouncer"),
            "pgbouncer is required but BACKSTOP_TEST_PGBOUNCER_URL is not set"
        );
        eprintln!("SKIPPED works_through_pgbouncer_from_the_url: no BACKSTOP_TEST_PGBOUNCER_URL");
        return;
    };
    let schema = format!("any_bouncer_{}", std::process::id());
    let store = connect(&format!(
        "{url}?transaction_pooling=true&schema={schema}&max_connections=2"
    ))
    .await
    .unwrap();
    let AnyStore::Postgres(p) = &store else {
        panic!("postgres")
    };
    assert!(p.options().transaction_pooling);
    assert!(store.native_notifier().unwrap().is_none());
    store.migrate().await.unwrap();
    for _ in 0..3 {
        // more statements than one server connection's life: none may be named
        let e = store.enqueue(NewTask::new("E", "k")).await.unwrap();
        assert_eq!(store.get(e.id).await.unwrap().map(|t| t.id), Some(e.id));
    }
    p.client()
        .await
        .unwrap()
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

/// The one transactional enqueue on sqlx's `Any`, on every database: a task due at a
/// given time (a timestamp goes as text on `Any`) and a plain one commit with the
/// transaction; a rolled-back one leaves nothing.
#[cfg(all(
    feature = "any-sqlx",
    feature = "sqlite-sqlx",
    feature = "postgres-sqlx",
    feature = "mysql"
))]
#[tokio::test]
async fn enqueues_on_sqlx_any_everywhere() {
    use backstop::Transactional;
    sqlx::any::install_default_drivers();
    let dir = std::env::temp_dir().join(format!("backstop-any-sqlx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let table = format!("any_sqlx_{}", std::process::id());
    let mut urls = vec![("sqlite", format!("sqlite:{}", dir.join("a.db").display()))];
    // MySQL's test URL names no database: the case makes one of its own
    let database = format!("any_sqlx_{}", std::process::id());
    for (var, backend) in [
        ("BACKSTOP_TEST_POSTGRES_URL", "postgres"),
        ("BACKSTOP_TEST_MYSQL_URL", "mysql"),
    ] {
        match std::env::var(var).ok().filter(|u| !u.is_empty()) {
            Some(url) if backend == "mysql" => {
                use sqlx::Connection;
                let mut conn = sqlx::MySqlConnection::connect(&url).await.unwrap();
                let create = format!("CREATE DATABASE IF NOT EXISTS {database}");
                sqlx::query(sqlx::AssertSqlSafe(create))
                    .execute(&mut conn)
                    .await
                    .unwrap();
                let (base, query) = url.split_once('?').unwrap_or((&url, ""));
                let sep = if query.is_empty() { "" } else { "?" };
                let base = base.trim_end_matches('/');
                urls.push((backend, format!("{base}/{database}{sep}{query}")));
            }
            Some(url) => urls.push((backend, url)),
            None => {
                assert!(
                    !std::env::var("BACKSTOP_TEST_REQUIRE")
                        .unwrap_or_default()
                        .split(',')
                        .any(|b| b == backend),
                    "{backend} is required but {var} is not set"
                );
                eprintln!("SKIPPED enqueues_on_sqlx_any_everywhere on {backend}: {var} is not set");
            }
        }
    }
    for (backend, url) in urls {
        let sep = if url.contains('?') { '&' } else { '?' };
        let store = connect(&format!("{url}{sep}table={table}")).await.unwrap();
        store.migrate().await.unwrap();
        let pool = sqlx::AnyPool::connect(&url).await.unwrap();
        let at = chrono::Utc::now() + chrono::Duration::hours(1);
        let mut tx = pool.begin().await.unwrap();
        let later = store
            .enqueue_in(&mut *tx, &NewTask::new("ANY", "later").run_at(at))
            .await
            .unwrap_or_else(|e| panic!("{backend}: {e}"));
        let now = store
            .enqueue_in(&mut *tx, &NewTask::new("ANY", "now"))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let t = store.get(later.id).await.unwrap().expect("committed");
        let off = (t.next_run_at - at).num_milliseconds().abs();
        assert!(off <= 1, "{backend}: due {} for {at}", t.next_run_at);
        assert!(store.get(now.id).await.unwrap().is_some(), "{backend}");
        // a batch: two new tasks in one multi-row insert, one held already
        let batch = [
            NewTask::new("ANY", "b1").run_at(at),
            NewTask::new("ANY", "b2"),
            NewTask::new("ANY", "now"),
        ];
        let mut tx = pool.begin().await.unwrap();
        let many = store
            .enqueue_many_in(&mut *tx, &batch)
            .await
            .unwrap_or_else(|e| panic!("{backend}: {e}"));
        tx.commit().await.unwrap();
        let created: Vec<bool> = many.iter().map(|e| e.created).collect();
        assert_eq!(created, [true, true, false], "{backend}");
        assert_eq!(many[2].id, now.id, "{backend}");
        let b1 = store.get(many[0].id).await.unwrap().expect("committed");
        assert_eq!(b1.biz_key, "b1", "{backend}");
        let off = (b1.next_run_at - at).num_milliseconds().abs();
        assert!(off <= 1, "{backend}: due {} for {at}", b1.next_run_at);
        let b2 = store.get(many[1].id).await.unwrap().expect("committed");
        assert_eq!(b2.biz_key, "b2", "{backend}");
        let mut tx = pool.begin().await.unwrap();
        let gone = store
            .enqueue_in(&mut *tx, &NewTask::new("ANY", "gone"))
            .await
            .unwrap();
        tx.rollback().await.unwrap();
        assert!(store.get(gone.id).await.unwrap().is_none(), "{backend}");
        for t in [
            table.clone(),
            format!("{table}_keys"),
            format!("{table}_handlers"),
            format!("{table}_barrier"),
            format!("{table}_saga"),
            format!("{table}_saga_step"),
            format!("{table}_audit"),
            format!("{table}_inbox"),
            format!("{table}_migrations"),
        ] {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS {t}")))
                .execute(&pool)
                .await;
        }
        if backend == "mysql" {
            let drop = format!("DROP DATABASE IF EXISTS {database}");
            sqlx::query(sqlx::AssertSqlSafe(drop))
                .execute(&pool)
                .await
                .unwrap();
        }
        pool.close().await;
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(not(feature = "postgres"))]
#[tokio::test]
async fn says_which_feature_is_missing() {
    let e = connect("postgres://localhost/x").await.unwrap_err();
    assert!(e.to_string().contains("`postgres`"), "{e}");
    assert!(e.to_string().contains("not enabled"), "{e}");
}

/// With every backend enabled, each server URL from the test environment opens its
/// backend.
#[cfg(all(feature = "postgres", feature = "mysql"))]
#[tokio::test]
async fn picks_server_backends_from_the_url() {
    for (var, backend) in [
        ("BACKSTOP_TEST_POSTGRES_URL", "postgres"),
        ("BACKSTOP_TEST_MYSQL_URL", "mysql"),
    ] {
        let Some(url) = std::env::var(var).ok().filter(|u| !u.is_empty()) else {
            assert!(
                !std::env::var("BACKSTOP_TEST_REQUIRE")
                    .unwrap_or_default()
                    .split(',')
                    .any(|b| b == backend),
                "{backend} is required but {var} is not set"
            );
            eprintln!("SKIPPED picks_server_backends_from_the_url for {backend}: {var} is not set");
            continue;
        };
        let store = connect(&url).await.unwrap();
        match (&store, backend) {
            (AnyStore::Postgres(_), "postgres") | (AnyStore::MySql(_), "mysql") => {}
            other => panic!("{url} opened {other:?}"),
        }
        // the store's options in the URL, beside the driver's own
        let sep = if url.contains('?') { '&' } else { '?' };
        match connect(&format!("{url}{sep}max_connections=3&acquire_timeout=2s"))
            .await
            .unwrap()
        {
            AnyStore::Postgres(p) => {
                assert_eq!(p.options().max_connections, 3);
                assert_eq!(
                    p.options().acquire_timeout,
                    std::time::Duration::from_secs(2)
                );
                let q = connect(&format!("{url}{sep}schema=url_opts&notify=false"))
                    .await
                    .unwrap();
                let AnyStore::Postgres(q) = q else {
                    panic!("postgres")
                };
                assert_eq!(
                    (q.options().schema.as_str(), q.options().notify),
                    ("url_opts", false)
                );
            }
            AnyStore::MySql(m) => {
                let q = connect(&format!("{url}{sep}claim=ordered_update"))
                    .await
                    .unwrap();
                let AnyStore::MySql(q) = q else {
                    panic!("mysql")
                };
                assert_eq!(
                    q.claim_strategy(),
                    backstop::mysql::ClaimStrategy::OrderedUpdate
                );
                let e = connect(&format!("{url}{sep}every_node=sometimes"))
                    .await
                    .unwrap_err();
                assert_eq!(e.kind(), ErrorKind::Config, "{e}");
                assert!(e.to_string().contains("every_node"), "{e}");
                drop(m);
            }
            other => panic!("{other:?}"),
        }
        let other = if backend == "mysql" {
            "schema=x"
        } else {
            "claim=auto"
        };
        let e = connect(&format!("{url}{sep}{other}")).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config, "{e}");
        if backend == "mysql" {
            let mariadb = url.replacen("mysql:", "mariadb:", 1);
            assert!(matches!(
                connect(&mariadb).await.unwrap(),
                AnyStore::MySql(_)
            ));
        }
    }
}
