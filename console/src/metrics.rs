//! Prometheus: the recorder for backstop's metrics, and a `/metrics` endpoint.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // An application that only wants metrics: one line, on a port of its own.
//! backstop_console::metrics::serve("0.0.0.0:9464").await?;
//! # Ok(()) }
//! ```
//!
//! or, beside the application's own routes:
//!
//! ```no_run
//! # fn demo() -> backstop_core::Result<axum::Router> {
//! let metrics = backstop_console::metrics::Metrics::install()?;
//! let app = axum::Router::new().merge(metrics.router());
//! # Ok(app) }
//! ```
//!
//! Histograms have explicit buckets ([`SECONDS_BUCKETS`]), never summaries, so they
//! aggregate across instances; labels carry event types and statuses, never task ids or
//! business keys; the recorder's upkeep runs every 5 s on a thread of its own, so memory
//! does not grow between scrapes. The names, their help texts and labels are
//! [`backstop_core::describe_metrics`]'s.

use std::sync::OnceLock;
use std::time::Duration;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use backstop_core::{Error, ErrorKind, Result};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The buckets of every `_seconds` histogram: 1 ms to 1 h, for run-ahead latencies
/// (milliseconds), start delays of polled retries (seconds to minutes) and handler
/// durations alike.
pub const SECONDS_BUCKETS: [f64; 18] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 900.0, 3600.0,
];

/// How often the recorder's upkeep runs.
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The process's Prometheus recorder: renders the scrape page.
#[derive(Clone, Debug)]
pub struct Metrics {
    handle: PrometheusHandle,
}

static INSTALLED: OnceLock<Metrics> = OnceLock::new();

impl Metrics {
    /// A builder with backstop's buckets, for an application that installs the recorder
    /// itself (with global labels, say): pass its handle to [`from_handle`](Self::from_handle)
    /// and run [`PrometheusHandle::run_upkeep`] periodically.
    pub fn builder() -> Result<PrometheusBuilder> {
        PrometheusBuilder::new()
            .set_buckets(&SECONDS_BUCKETS)
            .map_err(|e| Error::config("install_metrics", e.to_string()))
    }

    /// Install backstop's Prometheus recorder as the process's `metrics` recorder,
    /// describe every backstop metric, and start the upkeep thread. Once per process:
    /// later calls return the same recorder. `Config` error when another recorder is
    /// already installed.
    pub fn install() -> Result<Metrics> {
        if let Some(m) = INSTALLED.get() {
            return Ok(m.clone());
        }
        let handle = Self::builder()?.install_recorder().map_err(|e| {
            Error::new(
                ErrorKind::Config,
                "install_metrics",
                format!("cannot install the Prometheus recorder: {e}"),
            )
        })?;
        backstop_core::describe_metrics();
        let upkeep = handle.clone();
        std::thread::Builder::new()
            .name("backstop-metrics-upkeep".into())
            .spawn(move || loop {
                std::thread::sleep(UPKEEP_INTERVAL);
                upkeep.run_upkeep();
            })
            .map_err(|e| {
                Error::new(
                    ErrorKind::Unexpected,
                    "install_metrics",
                    format!("cannot start the upkeep thread: {e}"),
                )
            })?;
        Ok(INSTALLED.get_or_init(|| Metrics { handle }).clone())
    }

    /// Metrics rendered from a recorder the application installed (see
    /// [`builder`](Self::builder)).
    pub fn from_handle(handle: PrometheusHandle) -> Metrics {
        Metrics { handle }
    }

    /// The scrape page, in the Prometheus text format.
    pub fn render(&self) -> String {
        self.handle.render()
    }

    /// A router with `GET /metrics`.
    pub fn router<S: Clone + Send + Sync + 'static>(&self) -> Router<S> {
        let me = self.clone();
        Router::new().route("/metrics", get(move || async move { me.response() }))
    }

    pub(crate) fn response(&self) -> impl IntoResponse {
        (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            self.render(),
        )
    }
}

/// Install the recorder ([`Metrics::install`]) and serve `GET /metrics` on `addr` until
/// the process ends. For applications that want metrics and nothing else.
pub async fn serve(addr: &str) -> Result<()> {
    let metrics = Metrics::install()?;
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        Error::new(
            ErrorKind::Config,
            "serve_metrics",
            format!("cannot listen on {addr}: {e}"),
        )
    })?;
    axum::serve(listener, metrics.router::<()>())
        .await
        .map_err(|e| Error::new(ErrorKind::Unavailable, "serve_metrics", e.to_string()))
}
