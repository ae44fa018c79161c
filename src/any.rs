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
    let _ = &config; // unused when no backend feature is enabled
    let scheme = scheme(url);
    match scheme.as_str() {
        "sqlite" => {
            #[cfg(feature = "sqlite")]
            {
                let rest = &url["sqlite:".len()..];
                if rest == ":memory:" || rest == "//:memory:" {
                    let _ = config; // an in-memory store always uses the default table
                    return Ok(AnyStore::Sqlite(
                        crate::sqlite::SqliteStore::open_in_memory().await?,
                    ));
                }
                let path = rest.strip_prefix("//").unwrap_or(rest);
                if path.is_empty() {
                    return Err(Error::config(OP, format!("no file path in {url:?}")));
                }
                let options = crate::sqlite::SqliteOptions::default().config(config);
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
                let options = crate::postgres::PgOptions::default().config(config);
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
                let options = crate::mysql::MySqlOptions::default().config(config);
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
    /// (`backstop::redis::RedisNotifier`, feature `redis`).
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
