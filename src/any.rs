//! One store type for every enabled backend, chosen by URL: swap databases by changing a
//! feature flag and a URL, not code.

use backstop_core::driver::{Backend, Driver};
#[cfg(doc)]
use backstop_core::TaskStore;
use backstop_core::{Error, Result, StoreConfig};

/// A store on whichever backend [`connect`] picked. A [`TaskStore`] like each backend's
/// own store (the same contract, run by that backend's driver); match on it to reach the
/// backend's native API (its transactional enqueue, say).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum AnyStore {
    /// The embedded SQLite backend (`sqlite:` URLs).
    #[cfg(feature = "sqlite")]
    Sqlite(crate::sqlite::SqliteStore),
    /// The PostgreSQL backend (`postgres:` / `postgresql:` URLs).
    #[cfg(feature = "postgres")]
    Postgres(crate::postgres::PgStore),
    /// The MySQL / MariaDB backend (`mysql:` / `mariadb:` URLs).
    #[cfg(feature = "mysql")]
    MySql(crate::mysql::MySqlStore),
}

/// Open a store for `url` with the default [`StoreConfig`]; see [`connect_with`].
pub async fn connect(url: &str) -> Result<AnyStore> {
    connect_with(url, StoreConfig::default()).await
}

/// Open a store for `url`, picking the backend from the scheme among the enabled
/// features:
///
/// | URL | backend | feature |
/// |---|---|---|
/// | `sqlite:path/to/file.db`, `sqlite://path/to/file.db`, `sqlite:///abs/file.db` | SQLite file | `sqlite` (default) |
/// | `sqlite::memory:` | private in-memory SQLite | `sqlite` |
/// | `postgres://user:pass@host:port/db`, `postgresql://…` | PostgreSQL | `postgres` |
/// | `mysql://user:pass@host:port/db`, `mariadb://…` | MySQL 8 / MariaDB 10.6+ | `mysql` |
///
/// A scheme whose feature is not enabled, or an unknown one, is a `Config` error.
/// Call [`TaskStore::migrate`] before first use.
///
/// # Options in the URL
///
/// The store's options ride in the URL's query, beside the driver's own parameters
/// (`sslmode=…`, `ssl-mode=…`), so a URL alone configures a deployment:
///
/// | parameter | backends | meaning |
/// |---|---|---|
/// | `table=jobs` | all | the task table (overrides `config`'s) |
/// | `max_connections=8` | all | most pooled connections |
/// | `acquire_timeout=5s` | PostgreSQL, MySQL | wait for a pooled connection (`ms` or `s`) |
/// | `schema=jobs` | PostgreSQL | the table's schema |
/// | `notify=false` | PostgreSQL | no `NOTIFY` at enqueue |
/// | `transaction_pooling=true` | PostgreSQL | behind PgBouncer (transaction mode): unnamed statements, no `LISTEN` |
/// | `claim=skip_locked` | MySQL | `auto`, `ordered_update`, `skip_locked`, `queue_then_skip` |
/// | `busy_timeout=30s` | SQLite | wait for the file's write lock |
/// | `synchronous=normal` | SQLite | `full` (default) or `normal` |
///
/// A bad value, or a parameter of another backend, is a `Config` error naming it; nothing
/// is connected.
///
/// ```no_run
/// # async fn demo() -> backstop::Result<()> {
/// let store = backstop::connect("postgres://app@db/app?schema=jobs&max_connections=8").await?;
/// # Ok(()) }
/// ```
///
/// ```no_run
/// # async fn demo() -> backstop::Result<()> {
/// use backstop::TaskStore;
/// let url = std::env::var("BACKSTOP_URL").unwrap_or_else(|_| "sqlite:app.db".into());
/// let store = backstop::connect(&url).await?;
/// store.migrate().await?;
/// # Ok(()) }
/// ```
pub async fn connect_with(url: &str, config: StoreConfig) -> Result<AnyStore> {
    const OP: &str = "connect";
    let (url, options) = UrlOptions::split(url)?;
    let url = url.as_str();
    let mut config = config;
    if let Some(table) = &options.table {
        config.table = table.clone();
    }
    let _ = &config; // unused when no backend feature is enabled
    let scheme = scheme(url);
    options.check(&scheme)?;
    match scheme.as_str() {
        "sqlite" => {
            #[cfg(feature = "sqlite")]
            {
                // what is left of the query is nobody's: SQLite has no driver parameters,
                // and a file path must not swallow it (`app.db?x=1` is not a file name)
                if let Some((_, rest)) = url.split_once('?') {
                    return Err(Error::config(
                        OP,
                        format!(
                            "URL parameter(s) {rest:?} are not SQLite options (table, \
                             max_connections, busy_timeout, synchronous)"
                        ),
                    ));
                }
                let rest = &url["sqlite:".len()..];
                if rest == ":memory:" || rest == "//:memory:" {
                    let _ = (config, options); // an in-memory store always uses the defaults
                    return Ok(AnyStore::Sqlite(
                        crate::sqlite::SqliteStore::open_in_memory().await?,
                    ));
                }
                let path = rest.strip_prefix("//").unwrap_or(rest);
                if path.is_empty() {
                    return Err(Error::config(OP, format!("no file path in {url:?}")));
                }
                let mut o = crate::sqlite::SqliteOptions::default().config(config);
                if let Some(n) = options.max_connections {
                    o = o.max_connections(n as usize);
                }
                if let Some(d) = options.busy_timeout {
                    o = o.busy_timeout(d);
                }
                if let Some(sync) = options.synchronous {
                    o = o.synchronous(sync);
                }
                let options = o;
                Ok(AnyStore::Sqlite(
                    crate::sqlite::SqliteStore::open_with(path, options).await?,
                ))
            }
            #[cfg(not(feature = "sqlite"))]
            Err(missing_feature(url, "sqlite"))
        }
        "postgres" | "postgresql" => {
            #[cfg(feature = "postgres")]
            {
                let mut o = crate::postgres::PgOptions::default().config(config);
                if let Some(n) = options.max_connections {
                    o = o.max_connections(n as usize);
                }
                if let Some(d) = options.acquire_timeout {
                    o = o.acquire_timeout(d);
                }
                if let Some(schema) = options.schema {
                    o = o.schema(schema);
                }
                if let Some(notify) = options.notify {
                    o = o.notify(notify);
                }
                if let Some(pooling) = options.transaction_pooling {
                    o = o.transaction_pooling(pooling);
                }
                let options = o;
                Ok(AnyStore::Postgres(
                    crate::postgres::PgStore::connect_with(url, options).await?,
                ))
            }
            #[cfg(not(feature = "postgres"))]
            Err(missing_feature(url, "postgres"))
        }
        "mysql" | "mariadb" => {
            #[cfg(feature = "mysql")]
            {
                let mut o = crate::mysql::MySqlOptions::default().config(config);
                if let Some(n) = options.max_connections {
                    o = o.max_connections(n);
                }
                if let Some(d) = options.acquire_timeout {
                    o = o.acquire_timeout(d);
                }
                if let Some(claim) = options.claim {
                    o = o.claim_strategy(claim);
                }
                let options = o;
                // sqlx knows the scheme as mysql:
                let url = format!("mysql:{}", &url[scheme.len() + 1..]);
                Ok(AnyStore::MySql(
                    crate::mysql::MySqlStore::connect_with(&url, options).await?,
                ))
            }
            #[cfg(not(feature = "mysql"))]
            Err(missing_feature(url, "mysql"))
        }
        _ => Err(Error::config(
            OP,
            format!("unknown database URL scheme in {url:?}: use sqlite:, postgres: or mysql:"),
        )),
    }
}

/// The DDL [`TaskStore::migrate`] runs for the backend `url` names, with `config`'s table
/// (on PostgreSQL in schema `public`), for a DBA to review or apply with their own tool.
/// Nothing is connected: only the URL's scheme is read.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// let ddl = backstop::ddl("sqlite:app.db", &backstop::StoreConfig::default()).unwrap();
/// assert!(ddl.starts_with("CREATE TABLE IF NOT EXISTS"));
/// # }
/// ```
pub fn ddl(url: &str, config: &StoreConfig) -> Result<String> {
    let _ = config; // unused when no backend feature is enabled
    let scheme = scheme(url);
    match scheme.as_str() {
        "sqlite" => {
            #[cfg(feature = "sqlite")]
            return crate::sqlite::SqliteOptions::default()
                .config(config.clone())
                .ddl();
            #[cfg(not(feature = "sqlite"))]
            Err(missing_feature(url, "sqlite"))
        }
        "postgres" | "postgresql" => {
            #[cfg(feature = "postgres")]
            return crate::postgres::PgOptions::default()
                .config(config.clone())
                .ddl();
            #[cfg(not(feature = "postgres"))]
            Err(missing_feature(url, "postgres"))
        }
        "mysql" | "mariadb" => {
            #[cfg(feature = "mysql")]
            return crate::mysql::MySqlOptions::default()
                .config(config.clone())
                .ddl();
            #[cfg(not(feature = "mysql"))]
            Err(missing_feature(url, "mysql"))
        }
        _ => Err(Error::config(
            "ddl",
            format!("unknown database URL scheme in {url:?}: use sqlite:, postgres: or mysql:"),
        )),
    }
}

/// The store's options in a URL's query (see [`connect_with`]).
#[derive(Debug, Default)]
struct UrlOptions {
    table: Option<String>,
    max_connections: Option<u32>,
    acquire_timeout: Option<std::time::Duration>,
    schema: Option<String>,
    notify: Option<bool>,
    transaction_pooling: Option<bool>,
    #[cfg(feature = "mysql")]
    claim: Option<crate::mysql::ClaimStrategy>,
    busy_timeout: Option<std::time::Duration>,
    #[cfg(feature = "sqlite")]
    synchronous: Option<crate::sqlite::Synchronous>,
    /// The parameters given, for [`check`](Self::check).
    given: Vec<&'static str>,
}

impl UrlOptions {
    /// The URL without the store's parameters (the driver's stay), and the options.
    fn split(url: &str) -> Result<(String, UrlOptions)> {
        let mut options = UrlOptions::default();
        let Some((base, query)) = url.split_once('?') else {
            return Ok((url.to_owned(), options));
        };
        let bad = |key: &str, value: &str, want: &str| {
            Error::config(
                "connect",
                format!("URL parameter {key}={value:?}: expected {want}"),
            )
        };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let time = || duration(value).ok_or_else(|| bad(key, value, "a time: 500ms, 5s"));
            let yes_no = || flag(value).ok_or_else(|| bad(key, value, "true or false"));
            let known: &'static str = match key {
                "table" => {
                    options.table = Some(value.to_owned());
                    "table"
                }
                "schema" => {
                    options.schema = Some(value.to_owned());
                    "schema"
                }
                "max_connections" => {
                    let n = value.parse().ok().filter(|n| *n > 0);
                    options.max_connections =
                        Some(n.ok_or_else(|| bad(key, value, "a number above 0"))?);
                    "max_connections"
                }
                "acquire_timeout" => {
                    options.acquire_timeout = Some(time()?);
                    "acquire_timeout"
                }
                "busy_timeout" => {
                    options.busy_timeout = Some(time()?);
                    "busy_timeout"
                }
                "notify" => {
                    options.notify = Some(yes_no()?);
                    "notify"
                }
                "transaction_pooling" => {
                    options.transaction_pooling = Some(yes_no()?);
                    "transaction_pooling"
                }
                "claim" => {
                    #[cfg(feature = "mysql")]
                    {
                        use crate::mysql::ClaimStrategy;
                        options.claim = Some(match value {
                            "auto" => ClaimStrategy::Auto,
                            "ordered_update" => ClaimStrategy::OrderedUpdate,
                            "skip_locked" => ClaimStrategy::SkipLocked,
                            "queue_then_skip" => ClaimStrategy::QueueThenSkip,
                            _ => {
                                return Err(bad(
                                    key,
                                    value,
                                    "auto, ordered_update, skip_locked or queue_then_skip",
                                ))
                            }
                        });
                    }
                    "claim"
                }
                "synchronous" => {
                    #[cfg(feature = "sqlite")]
                    {
                        use crate::sqlite::Synchronous;
                        options.synchronous = Some(match value {
                            "full" => Synchronous::Full,
                            "normal" => Synchronous::Normal,
                            _ => return Err(bad(key, value, "full or normal")),
                        });
                    }
                    "synchronous"
                }
                _ => {
                    kept.push(pair);
                    continue;
                }
            };
            options.given.push(known);
        }
        let url = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        Ok((url, options))
    }

    /// Refuse a parameter the backend of `scheme` has no use for.
    fn check(&self, scheme: &str) -> Result<()> {
        let (backend, allowed): (&str, &[&str]) = match scheme {
            "sqlite" => (
                "SQLite",
                &["table", "max_connections", "busy_timeout", "synchronous"],
            ),
            "postgres" | "postgresql" => (
                "PostgreSQL",
                &[
                    "table",
                    "max_connections",
                    "acquire_timeout",
                    "schema",
                    "notify",
                    "transaction_pooling",
                ],
            ),
            "mysql" | "mariadb" => (
                "MySQL",
                &["table", "max_connections", "acquire_timeout", "claim"],
            ),
            _ => return Ok(()), // the scheme itself is refused next
        };
        match self.given.iter().find(|k| !allowed.contains(k)) {
            Some(key) => Err(Error::config(
                "connect",
                format!("URL parameter {key} does not apply to {backend}"),
            )),
            None => Ok(()),
        }
    }
}

/// `true` or `false` (also `on`/`off`, `1`/`0`).
fn flag(text: &str) -> Option<bool> {
    match text {
        "true" | "on" | "1" => Some(true),
        "false" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// `500ms` or `5s`.
fn duration(text: &str) -> Option<std::time::Duration> {
    if let Some(ms) = text.strip_suffix("ms") {
        return ms.parse().ok().map(std::time::Duration::from_millis);
    }
    text.strip_suffix('s')?
        .parse()
        .ok()
        .map(std::time::Duration::from_secs)
}

/// The URL's scheme, lower case (`""` when it has none).
fn scheme(url: &str) -> String {
    url.split(':')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase()
}

#[allow(dead_code)]
fn missing_feature(url: &str, feature: &str) -> Error {
    Error::config(
        "connect",
        format!("{url:?} needs the `{feature}` feature of backstop, which is not enabled"),
    )
}

/// The store's driver: every [`TaskStore`] operation of an `AnyStore` is core's, on the
/// driver of the backend it holds.
impl AnyStore {
    /// The notifier that comes with the backend, if it has one: PostgreSQL's
    /// `LISTEN`/`NOTIFY` ([`PgStore::listener`](crate::postgres::PgStore::listener)).
    /// `None` for SQLite and MySQL, whose deployments announce over Redis pub/sub
    /// (`backstop::redis::RedisNotifier`, feature `redis`); `None` too behind a
    /// transaction pooler (`transaction_pooling`), where `LISTEN` does not survive:
    /// engines then find new tasks by polling, and a log line says so.
    ///
    /// ```no_run
    /// # async fn demo(h: impl backstop::Handler) -> backstop::Result<()> {
    /// let store = backstop::connect("postgres://app@db/app").await?;
    /// let mut builder = backstop::Engine::builder(store.clone())
    ///     .handler("SEND_EMAIL", h, backstop::HandlerOptions::default());
    /// if let Some(n) = store.native_notifier()? {
    ///     builder = builder.notifier(n);
    /// }
    /// let engine = builder.start()?;
    /// # Ok(()) }
    /// ```
    pub fn native_notifier(&self) -> Result<Option<std::sync::Arc<dyn backstop_core::Notifier>>> {
        match self {
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(s) if s.options().transaction_pooling => {
                tracing::warn!(
                    "PostgreSQL through a transaction pooler: no LISTEN, so engines find new \
                     tasks by polling (give a listener a direct URL with \
                     PgListener::with_config for wake-ups)"
                );
                Ok(None)
            }
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(s) if s.options().notify => {
                Ok(Some(std::sync::Arc::new(s.listener()?)))
            }
            #[allow(unreachable_patterns)]
            _ => Ok(None),
        }
    }
}

impl Backend for AnyStore {
    fn driver(&self) -> &dyn Driver {
        match *self {
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite(ref s) => s.driver(),
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(ref s) => s.driver(),
            #[cfg(feature = "mysql")]
            AnyStore::MySql(ref s) => s.driver(),
        }
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;
    use backstop_core::{ErrorKind, NewTask, TaskStore};

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
            eprintln!(
                "SKIPPED works_through_pgbouncer_from_the_url: no BACKSTOP_TEST_PGBOUNCER_URL"
            );
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
        use crate::Transactional;
        sqlx::any::install_default_drivers();
        let dir = std::env::temp_dir().join(format!("backstop-any-sqlx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let table = format!("any_sqlx_{}", std::process::id());
        let mut urls = vec![("sqlite", format!("sqlite:{}", dir.join("a.db").display()))];
        for (var, backend) in [
            ("BACKSTOP_TEST_POSTGRES_URL", "postgres"),
            ("BACKSTOP_EXAMPLE_MYSQL_URL", "mysql"),
        ] {
            match std::env::var(var).ok().filter(|u| !u.is_empty()) {
                Some(url) => urls.push((backend, url)),
                None => {
                    assert!(
                        !std::env::var("BACKSTOP_TEST_REQUIRE")
                            .unwrap_or_default()
                            .split(',')
                            .any(|b| b == backend),
                        "{backend} is required but {var} is not set"
                    );
                    eprintln!(
                        "SKIPPED enqueues_on_sqlx_any_everywhere on {backend}: {var} is not set"
                    );
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
                format!("{table}_audit"),
                format!("{table}_inbox"),
                format!("{table}_versions"),
            ] {
                let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS {t}")))
                    .execute(&pool)
                    .await;
            }
            pool.close().await;
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(not(feature = "postgres"))]
    #[tokio::test]
    async fn says_which_feature_is_missing() {
        let e = connect("postgres://localhost/x").await.unwrap_err();
        assert!(e.to_string().contains("`postgres` feature"), "{e}");
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
                eprintln!(
                    "SKIPPED picks_server_backends_from_the_url for {backend}: {var} is not set"
                );
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
                        crate::mysql::ClaimStrategy::OrderedUpdate
                    );
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
}
