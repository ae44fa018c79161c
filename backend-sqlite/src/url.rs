//! The store's options in a URL (`sqlite:app.db?busy_timeout=5s`), for
//! `backstop::connect`.

use backstop_core::driver::{UrlOptions, UrlStore};
use backstop_core::{async_trait, Error, Result, StoreConfig};

use crate::{SqliteOptions, SqliteStore, Synchronous};

/// Where a SQLite URL points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqliteTarget {
    /// A file (`sqlite:path/to/file.db`, `sqlite://path`, `sqlite:///abs/path`).
    File(String),
    /// A private in-memory database (`sqlite::memory:`), with the default options.
    Memory,
}

impl SqliteOptions {
    /// The file a `sqlite:` URL names and the options its query sets (`max_connections`,
    /// `busy_timeout`, `synchronous`, `table`) over the defaults with `config`. SQLite has
    /// no driver parameters: any other parameter is a `Config` error (a file path must not
    /// swallow it: `app.db?x=1` is not a file name), as is a bad value.
    ///
    /// ```
    /// use backstop_sqlite::{SqliteOptions, SqliteTarget, Synchronous};
    /// let (to, o) = SqliteOptions::from_url("sqlite:app.db?synchronous=normal", Default::default()).unwrap();
    /// assert_eq!((to, o.synchronous), (SqliteTarget::File("app.db".into()), Synchronous::Normal));
    /// assert!(SqliteOptions::from_url("sqlite:app.db?mode=rwc", Default::default()).is_err());
    /// ```
    pub fn from_url(url: &str, mut config: StoreConfig) -> Result<(SqliteTarget, SqliteOptions)> {
        let mut q = UrlOptions::parse(url);
        q.table(&mut config);
        let mut o = SqliteOptions::default().config(config);
        if let Some(n) = q.count("max_connections")? {
            o = o.max_connections(n as usize);
        }
        if let Some(d) = q.duration("busy_timeout")? {
            o = o.busy_timeout(d);
        }
        let sync = q.read("synchronous", "full or normal", |v| match v {
            "full" => Some(Synchronous::Full),
            "normal" => Some(Synchronous::Normal),
            _ => None,
        })?;
        if let Some(sync) = sync {
            o = o.synchronous(sync);
        }
        let rest = q.rest();
        if !rest.is_empty() {
            return Err(Error::config(
                "connect",
                format!(
                    "URL parameter(s) {:?} are not SQLite options (table, max_connections, \
                     busy_timeout, synchronous)",
                    rest.join("&")
                ),
            ));
        }
        let path = q.base().split_once(':').map_or("", |(_, p)| p);
        if path == ":memory:" || path == "//:memory:" {
            return Ok((SqliteTarget::Memory, o));
        }
        let path = path.strip_prefix("//").unwrap_or(path);
        if path.is_empty() {
            return Err(Error::config("connect", format!("no file path in {url:?}")));
        }
        Ok((SqliteTarget::File(path.to_owned()), o))
    }
}

#[async_trait]
impl UrlStore for SqliteStore {
    const NAME: &'static str = "SQLite";
    const SCHEMES: &'static [&'static str] = &["sqlite"];
    const OPTIONS: &'static [&'static str] = &["max_connections", "busy_timeout", "synchronous"];

    async fn open_url(url: &str, config: StoreConfig) -> Result<Self> {
        match SqliteOptions::from_url(url, config)? {
            // an in-memory store always uses the defaults
            (SqliteTarget::Memory, _) => SqliteStore::open_in_memory().await,
            (SqliteTarget::File(path), options) => SqliteStore::open_with(path, options).await,
        }
    }

    fn ddl_url(url: &str, config: &StoreConfig) -> Result<String> {
        SqliteOptions::from_url(url, config.clone())?.1.ddl()
    }
}
