//! The store's options in a URL (`mysql://…?claim=skip_locked`), for `backstop::connect`.

use backstop_core::driver::{UrlOptions, UrlStore};
use backstop_core::{async_trait, Result, StoreConfig};

use crate::{ClaimStrategy, MySqlOptions, MySqlStore};

impl MySqlOptions {
    /// The options a URL's query sets (`max_connections`, `acquire_timeout`, `claim`,
    /// `every_node`, `table`) over the defaults with `config`, and the URL left for sqlx (its own
    /// parameters, `ssl-mode=…`, kept; a `mariadb:` scheme read as `mysql:`). A bad value
    /// is a `Config` error naming it.
    ///
    /// ```
    /// use backstop_mysql::{ClaimStrategy, MySqlOptions};
    /// let (url, o) = MySqlOptions::from_url("mariadb://db/app?claim=skip_locked", Default::default()).unwrap();
    /// assert_eq!((url.as_str(), o.claim_strategy), ("mysql://db/app", ClaimStrategy::SkipLocked));
    /// // a Galera cluster's nodes, the store's connections going round all of them
    /// let (url, o) = MySqlOptions::from_url("mysql://n1,n2,n3/app?every_node=true", Default::default()).unwrap();
    /// assert_eq!((url.as_str(), o.every_node), ("mysql://n1,n2,n3/app", true));
    /// ```
    pub fn from_url(url: &str, mut config: StoreConfig) -> Result<(String, MySqlOptions)> {
        let mut q = UrlOptions::parse(url);
        q.table(&mut config);
        let mut o = MySqlOptions::default().config(config);
        if let Some(n) = q.count("max_connections")? {
            o = o.max_connections(n);
        }
        if let Some(d) = q.duration("acquire_timeout")? {
            o = o.acquire_timeout(d);
        }
        let claim = q.read(
            "claim",
            "auto, ordered_update, skip_locked or queue_then_skip",
            |v| match v {
                "auto" => Some(ClaimStrategy::Auto),
                "ordered_update" => Some(ClaimStrategy::OrderedUpdate),
                "skip_locked" => Some(ClaimStrategy::SkipLocked),
                "queue_then_skip" => Some(ClaimStrategy::QueueThenSkip),
                _ => None,
            },
        )?;
        if let Some(claim) = claim {
            o = o.claim_strategy(claim);
        }
        if let Some(every_node) = q.flag("every_node")? {
            o = o.every_node(every_node);
        }
        // sqlx knows the scheme as mysql:
        let url = q.url();
        let url = match url.split_once(':') {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("mariadb") => {
                format!("mysql:{rest}")
            }
            _ => url,
        };
        Ok((url, o))
    }
}

#[async_trait]
impl UrlStore for MySqlStore {
    const NAME: &'static str = "MySQL";
    const SCHEMES: &'static [&'static str] = &["mysql", "mariadb"];
    const OPTIONS: &'static [&'static str] =
        &["max_connections", "acquire_timeout", "claim", "every_node"];

    async fn open_url(url: &str, config: StoreConfig) -> Result<Self> {
        let (url, options) = MySqlOptions::from_url(url, config)?;
        MySqlStore::connect_with(&url, options).await
    }

    fn ddl_url(url: &str, config: &StoreConfig) -> Result<String> {
        MySqlOptions::from_url(url, config.clone())?.1.ddl()
    }
}
