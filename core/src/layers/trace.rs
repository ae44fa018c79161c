//! [`TracingLayer`]: a span per store operation.

use futures_util::future::BoxFuture;
use tracing::Instrument;

use crate::error::Result;
use crate::store::{Call, Layer, StoreLayer, TaskStore};

/// A layer that runs every store operation in a `tracing` span.
///
/// # Behavior
///
/// - One span per operation: target `backstop::store`, level `DEBUG`, name `store`, with
///   the field `op` (the operation's name, as [`Op::name`](crate::Op::name)) and, where
///   the call has them, `task_id`, `event_type`, `count` and `limit` (see [`Call`]).
/// - A failed operation records one `DEBUG` event in its span with `error` (the error's
///   text) and `kind` (its [`ErrorKind`](crate::ErrorKind)).
/// - Answers and errors are the inner store's, unchanged.
///
/// ```
/// # async fn demo(store: impl backstop_core::TaskStore) -> backstop_core::Result<()> {
/// use backstop_core::{layers::TracingLayer, NewTask, TaskStore, TaskStoreExt};
/// let store = store.layer(TracingLayer::new());
/// store.enqueue(NewTask::new("SEND_EMAIL", "order-7")).await?; // span: op=enqueue event_type=SEND_EMAIL
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingLayer {
    _private: (),
}

impl TracingLayer {
    /// The layer.
    pub fn new() -> Self {
        TracingLayer::default()
    }
}

impl<S: TaskStore> Layer<S> for TracingLayer {
    type Store = TracingStore<S>;
    fn layer(&self, inner: S) -> TracingStore<S> {
        TracingStore { inner }
    }
}

/// A store whose operations run in spans (made by [`TracingLayer`]).
#[derive(Debug, Clone)]
pub struct TracingStore<S> {
    inner: S,
}

impl<S> TracingStore<S> {
    /// The wrapped store.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: TaskStore> StoreLayer for TracingStore<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    fn around<'a, T: Send + 'a>(
        &'a self,
        call: Call<'a>,
        op: BoxFuture<'a, Result<T>>,
    ) -> BoxFuture<'a, Result<T>> {
        let span = tracing::debug_span!(
            target: "backstop::store",
            "store",
            op = call.op.name(),
            task_id = call.id,
            event_type = call.event_type,
            count = call.count,
            limit = call.limit,
        );
        Box::pin(
            async move {
                let answer = op.await;
                if let Err(e) = &answer {
                    tracing::debug!(target: "backstop::store", error = %e, kind = ?e.kind(), "store operation failed");
                }
                answer
            }
            .instrument(span),
        )
    }
}
