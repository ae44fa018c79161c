//! # backstop-console
//!
//! The operator's back office of backstop:
//!
//! - [`web`]: the web console, an axum `Router` to mount under a prefix of your choice
//!   (or run standalone: `backstop serve`), deny by default.
//! - [`metrics`]: the Prometheus recorder and `/metrics` endpoint.
//! - [`ops`]: the operators' actions (reset, cancel, delete; by id or filter, with a dry
//!   run), shared by the `backstop` CLI and the web console.
//! - [`queues`]: the queues view (each event type's pause setting and backlog), shared
//!   the same way.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod metrics;
pub mod ops;
pub mod queues;
pub mod web;

pub use metrics::Metrics;
pub use web::{Access, Authorizer, Console, TokenAuth};
