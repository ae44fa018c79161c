//! The store layers backstop ships. Wrap any store with
//! [`TaskStoreExt::layer`](crate::TaskStoreExt::layer); write your own with
//! [`StoreLayer`](crate::StoreLayer).
//!
//! - [`TracingLayer`]: one `tracing` span per store operation, with its fields.
//! - [`FaultLayer`]: injected latency, errors, and answers held back after the store
//!   applied the call, for tests of what a slow or failing database does to your code.
//!
//! ```
//! # async fn demo(store: impl backstop_core::TaskStore) {
//! use backstop_core::layers::{FaultLayer, Faults, TracingLayer};
//! use backstop_core::TaskStoreExt;
//!
//! let faults = Faults::new();
//! let store = store.layer(FaultLayer::new(faults.clone())).layer(TracingLayer::new());
//! # }
//! ```

mod fault;
mod trace;

pub use fault::{FaultLayer, FaultStore, Faults, Phase};
pub use trace::{TracingLayer, TracingStore};
