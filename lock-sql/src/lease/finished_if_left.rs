//! A call run in its caller's task, whose rest runs in a task of its own if the
//! caller leaves mid-way: a call that commits by itself is never cut off half-way, and
//! its answer is dropped (undoing what it wrote) only once it is known.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tokio::runtime::Handle;

use crate::db::Db;

/// Runs `call` when polled, in the caller's task: no task to spawn, no hand-over of
/// the answer. Dropped after its first poll and before its end, it spawns the rest of
/// the call, counted among the client's clean-ups from then on, and drops the answer
/// there.
pub(super) struct FinishedIfLeft<T: Send + 'static> {
    call: Option<BoxFuture<'static, T>>,
    begun: bool,
    db: Arc<Db>,
    runtime: Handle,
}

impl<T: Send + 'static> FinishedIfLeft<T> {
    /// Wraps `call`. Must be made inside the Tokio runtime that is to run the rest.
    pub(super) fn new(db: &Arc<Db>, call: impl Future<Output = T> + Send + 'static) -> Self {
        FinishedIfLeft {
            call: Some(Box::pin(call)),
            begun: false,
            db: db.clone(),
            runtime: Handle::current(),
        }
    }
}

impl<T: Send + 'static> Future for FinishedIfLeft<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = self.get_mut();
        // Out while it runs: a call that panics is not spawned again by the drop.
        let Some(mut call) = this.call.take() else {
            return Poll::Pending;
        };
        this.begun = true;
        match call.as_mut().poll(cx) {
            Poll::Ready(answer) => Poll::Ready(answer),
            Poll::Pending => {
                this.call = Some(call);
                Poll::Pending
            }
        }
    }
}

impl<T: Send + 'static> Drop for FinishedIfLeft<T> {
    fn drop(&mut self) {
        // Never polled: nothing was sent.
        if let Some(call) = self.call.take().filter(|_| self.begun) {
            self.db.cleanups.spawn_on(&self.runtime, async move {
                drop(call.await);
            });
        }
    }
}
