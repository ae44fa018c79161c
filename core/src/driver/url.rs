//! **For backend authors**: what `backstop::connect(url)` needs of a backend
//! ([`UrlStore`]: its schemes, the options it reads from a URL, how it opens a store),
//! and the parsing of those options, the same on every backend ([`UrlOptions`]).
//!
//! The facade's `AnyStore` dispatches on the URL's scheme through the backends it
//! registers; each backend parses its own options. So a new backend is one
//! registration line in the facade, whatever options it has.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::Backend;
use crate::error::{Error, Result};
use crate::limits::StoreConfig;
use crate::notify::Notifier;

/// A backend's store as `backstop::connect(url)` opens it.
///
/// # Contract
///
/// - [`open_url`](Self::open_url) reads the backend's own options from the URL's query
///   (with [`UrlOptions`]), leaves every other parameter to its driver, and refuses a
///   bad value with a `Config` error naming it, before connecting.
/// - `table=…` is every backend's option: it overrides `config.table`
///   ([`UrlOptions::table`]).
/// - [`OPTIONS`](Self::OPTIONS) lists the other options it reads: the facade refuses, on
///   this backend's URL, an option that only another backend reads.
#[async_trait]
pub trait UrlStore: Backend + Clone + Sized {
    /// The backend's name, as users say it (`"PostgreSQL"`).
    const NAME: &'static str;

    /// The URL schemes it opens, lower case (`["postgres", "postgresql"]`).
    const SCHEMES: &'static [&'static str];

    /// The store options it reads from a URL's query, beside `table`.
    const OPTIONS: &'static [&'static str];

    /// A store for `url` (its scheme one of [`SCHEMES`](Self::SCHEMES)) with `config`;
    /// call `migrate` before first use.
    async fn open_url(url: &str, config: StoreConfig) -> Result<Self>;

    /// The DDL `migrate` runs for `url`'s options and `config`, for a DBA to review;
    /// nothing is connected.
    fn ddl_url(url: &str, config: &StoreConfig) -> Result<String>;

    /// The wake-up notifier that comes with the backend, if it has one (PostgreSQL's
    /// `LISTEN`); `None` by default.
    fn native_notifier(&self) -> Result<Option<Arc<dyn Notifier>>> {
        Ok(None)
    }
}

/// A URL's query split into the store's options, which a backend takes one by one, and
/// the rest, which its driver gets ([`url`](Self::url)).
///
/// ```
/// use backstop_core::driver::UrlOptions;
/// use backstop_core::StoreConfig;
/// use std::time::Duration;
///
/// let mut o = UrlOptions::parse("postgres://db/app?sslmode=require&table=jobs&acquire_timeout=5s");
/// let mut config = StoreConfig::default();
/// o.table(&mut config);
/// assert_eq!(config.table, "jobs");
/// assert_eq!(o.duration("acquire_timeout").unwrap(), Some(Duration::from_secs(5)));
/// assert_eq!(o.url(), "postgres://db/app?sslmode=require"); // the driver's parameter stays
/// assert!(UrlOptions::parse("x:?notify=maybe").flag("notify").is_err());
/// ```
#[derive(Debug, Clone)]
pub struct UrlOptions {
    base: String,
    pairs: Vec<(String, String)>,
}

impl UrlOptions {
    /// The query of `url`, not yet taken.
    pub fn parse(url: &str) -> Self {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let pairs = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (k.to_owned(), v.to_owned())
            })
            .collect();
        UrlOptions {
            base: base.to_owned(),
            pairs,
        }
    }

    /// The URL without the options taken so far: what the driver gets.
    pub fn url(&self) -> String {
        if self.pairs.is_empty() {
            return self.base.clone();
        }
        let query: Vec<String> = self.pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{}?{}", self.base, query.join("&"))
    }

    /// The URL without its query.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The parameters not taken yet, as `key=value`.
    pub fn rest(&self) -> Vec<String> {
        self.pairs.iter().map(|(k, v)| format!("{k}={v}")).collect()
    }

    /// The names of the parameters not taken yet.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.pairs.iter().map(|(k, _)| k.as_str())
    }

    /// Take option `key` (its last value when given twice).
    pub fn take(&mut self, key: &str) -> Option<String> {
        let mut value = None;
        self.pairs.retain(|(k, v)| {
            if k == key {
                value = Some(v.clone());
                false
            } else {
                true
            }
        });
        value
    }

    /// Take option `key` and read it with `read`; a `Config` error naming it and saying
    /// what was `wanted` when `read` cannot.
    pub fn read<T>(
        &mut self,
        key: &str,
        wanted: &str,
        read: impl Fn(&str) -> Option<T>,
    ) -> Result<Option<T>> {
        match self.take(key) {
            None => Ok(None),
            Some(value) => read(&value).map(Some).ok_or_else(|| {
                Error::config(
                    "connect",
                    format!("URL parameter {key}={value:?}: expected {wanted}"),
                )
            }),
        }
    }

    /// A time: `500ms`, `5s`.
    pub fn duration(&mut self, key: &str) -> Result<Option<Duration>> {
        self.read(key, "a time: 500ms, 5s", |text| {
            if let Some(ms) = text.strip_suffix("ms") {
                return ms.parse().ok().map(Duration::from_millis);
            }
            text.strip_suffix('s')?
                .parse()
                .ok()
                .map(Duration::from_secs)
        })
    }

    /// `true` or `false` (also `on`/`off`, `1`/`0`).
    pub fn flag(&mut self, key: &str) -> Result<Option<bool>> {
        self.read(key, "true or false", |text| match text {
            "true" | "on" | "1" => Some(true),
            "false" | "off" | "0" => Some(false),
            _ => None,
        })
    }

    /// A number above 0.
    pub fn count(&mut self, key: &str) -> Result<Option<u32>> {
        self.read(key, "a number above 0", |text| {
            text.parse().ok().filter(|n| *n > 0)
        })
    }

    /// `table=…` into `config` (every backend's option).
    pub fn table(&mut self, config: &mut StoreConfig) {
        if let Some(table) = self.take("table") {
            config.table = table;
        }
    }
}
