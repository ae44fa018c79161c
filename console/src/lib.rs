//! # backstop-console
//!
//! The operator's back office of backstop:
//!
//! - [`ops`]: the operators' actions (reset, cancel, delete; by id or filter, with a dry
//!   run), shared by the `backstop` CLI and the web console.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod ops;
