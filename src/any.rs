//! One store type for every enabled backend, chosen by URL: swap databases by changing a
//! feature flag and a URL, not code.
//!
//! The backends are registered in one place ([`registry!`] below): each opens its own
//! URLs and reads its own options ([`UrlStore`](backstop_core::driver::UrlStore)), so a new backend is its feature and
//! one line here.

use std::sync::Arc;

use backstop_core::driver::{Backend, Driver};
#[cfg(doc)]
use backstop_core::TaskStore;
use backstop_core::{Error, Notifier, Result, StoreConfig};

/// Every backend of the facade: its feature, the `AnyStore` variant and the store type.
macro_rules! registry {
    ($($(#[$doc:meta])* $feature:literal => $variant:ident($store:ty)),+ $(,)?) => {
        /// A store on whichever backend [`connect`] picked. A [`TaskStore`] like each
        /// backend's own store (the same contract, run by that backend's driver); match on
        /// it to reach the backend's native API (its transactional enqueue, say).
        #[derive(Clone, Debug)]
        #[non_exhaustive]
        pub enum AnyStore {
            $($(#[$doc])* #[cfg(feature = $feature)] $variant($store),)+
        }

        /// The store's driver: every [`TaskStore`] operation of an `AnyStore` is core's,
        /// on the driver of the backend it holds.
        impl Backend for AnyStore {
            fn driver(&self) -> &dyn Driver {
                match *self {
                    $(#[cfg(feature = $feature)] AnyStore::$variant(ref s) => s.driver(),)+
                }
            }
        }

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
            pub fn native_notifier(&self) -> Result<Option<Arc<dyn Notifier>>> {
                match *self {
                    $(#[cfg(feature = $feature)] AnyStore::$variant(ref s) => backstop_core::driver::UrlStore::native_notifier(s),)+
                }
            }
        }

        $(
            #[cfg(feature = $feature)]
            #[allow(non_upper_case_globals)]
            const $variant: Registered = Registered {
                feature: $feature,
                name: <$store as backstop_core::driver::UrlStore>::NAME,
                schemes: <$store as backstop_core::driver::UrlStore>::SCHEMES,
                options: <$store as backstop_core::driver::UrlStore>::OPTIONS,
            };
            #[cfg(not(feature = $feature))]
            #[allow(non_upper_case_globals)]
            const $variant: Registered = Registered {
                feature: $feature,
                name: "",
                schemes: &[],
                options: &[],
            };
        )+

        /// The registered backends: each's feature, and when it is enabled its name,
        /// schemes and URL options.
        const BACKENDS: &[Registered] = &[$($variant),+];

        /// Open the store of the enabled backend `b` for `url`.
        async fn open(b: &Registered, url: &str, config: StoreConfig) -> Result<AnyStore> {
            let _ = (url, &config); // unused when no backend feature is enabled
            $(#[cfg(feature = $feature)]
            if b.feature == $feature {
                return Ok(AnyStore::$variant(<$store as backstop_core::driver::UrlStore>::open_url(url, config).await?));
            })+
            Err(missing_feature(url, b.feature))
        }

        /// The DDL of the enabled backend `b`.
        fn ddl_of(b: &Registered, url: &str, config: &StoreConfig) -> Result<String> {
            let _ = (url, config);
            $(#[cfg(feature = $feature)]
            if b.feature == $feature {
                return <$store as backstop_core::driver::UrlStore>::ddl_url(url, config);
            })+
            Err(missing_feature(url, b.feature))
        }
    };
}

registry! {
    /// The embedded SQLite backend (`sqlite:` URLs).
    "sqlite" => Sqlite(crate::sqlite::SqliteStore),
    /// The PostgreSQL backend (`postgres:` / `postgresql:` URLs).
    "postgres" => Postgres(crate::postgres::PgStore),
    /// The MySQL / MariaDB backend (`mysql:` / `mariadb:` URLs).
    "mysql" => MySql(crate::mysql::MySqlStore),
}

/// A backend as [`connect`] knows it.
struct Registered {
    /// The facade's feature that enables it.
    feature: &'static str,
    /// Its name, schemes and URL options (empty when its feature is not enabled).
    name: &'static str,
    schemes: &'static [&'static str],
    options: &'static [&'static str],
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
/// A scheme no enabled backend opens is a `Config` error naming the features not
/// enabled. Call [`TaskStore::migrate`] before first use.
///
/// # Options in the URL
///
/// The store's options ride in the URL's query, beside the driver's own parameters
/// (`sslmode=…`, `ssl-mode=…`), so a URL alone configures a deployment. Each backend
/// reads its own (see its `from_url`: `SqliteOptions`, `PgOptions`, `MySqlOptions`);
/// `table=jobs` (the task table, over `config`'s) is every backend's. A bad value, or an
/// option only another backend reads, is a `Config` error naming it; nothing is
/// connected.
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
    let backend = backend_of(url)?;
    open(backend, url, config).await
}

/// The DDL [`TaskStore::migrate`] runs for the backend `url` names, with `config`'s table
/// and the URL's options (on PostgreSQL its `schema`, else `public`), for a DBA to review
/// or apply with their own tool. Nothing is connected: only the URL is read.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// let ddl = backstop::ddl("sqlite:app.db", &backstop::StoreConfig::default()).unwrap();
/// assert!(ddl.starts_with("CREATE TABLE IF NOT EXISTS"));
/// # }
/// ```
pub fn ddl(url: &str, config: &StoreConfig) -> Result<String> {
    let backend = backend_of(url)?;
    ddl_of(backend, url, config)
}

/// The registered backend that opens `url`'s scheme, after refusing an option of
/// another backend on its URL.
fn backend_of(url: &str) -> Result<&'static Registered> {
    let scheme = url
        .split(':')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let Some(backend) = BACKENDS
        .iter()
        .find(|b| b.schemes.contains(&scheme.as_str()))
    else {
        let enabled: Vec<String> = BACKENDS
            .iter()
            .flat_map(|b| b.schemes.iter().map(|s| format!("{s}:")))
            .collect();
        let missing: Vec<String> = BACKENDS
            .iter()
            .filter(|b| b.schemes.is_empty())
            .map(|b| format!("`{}`", b.feature))
            .collect();
        let mut why = format!(
            "no enabled backend opens {url:?} (scheme {scheme:?}); enabled: {}",
            if enabled.is_empty() {
                "none".to_owned()
            } else {
                enabled.join(", ")
            }
        );
        if !missing.is_empty() {
            why.push_str(&format!(
                "; backstop's {} feature(s) are not enabled",
                missing.join(", ")
            ));
        }
        return Err(Error::config("connect", why));
    };
    let query = url.split_once('?').map_or("", |(_, q)| q);
    for key in query.split('&').map(|p| p.split('=').next().unwrap_or(p)) {
        let foreign = BACKENDS
            .iter()
            .any(|b| b.options.contains(&key) && !backend.options.contains(&key));
        if foreign {
            return Err(Error::config(
                "connect",
                format!("URL parameter {key} does not apply to {}", backend.name),
            ));
        }
    }
    Ok(backend)
}

#[allow(dead_code)]
fn missing_feature(url: &str, feature: &str) -> Error {
    Error::config(
        "connect",
        format!("{url:?} needs the `{feature}` feature of backstop, which is not enabled"),
    )
}
