//! Client 0's network fault: it starts at its time or, aimed at a downgrade, as
//! client 0 first asks to downgrade; it heals when its plan says.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::sleep;

use super::exec::RUN;
use super::gen::CutPlan;
use super::history::{History, What};
use crate::proxy::Blackhole;

/// A fault aimed at a downgrade that client 0 never asks for still starts, this long
/// after its time.
const AIM_FALLBACK: Duration = Duration::from_secs(3);

/// Client 0's network fault, shared by the run and its tasks.
pub(crate) struct ClientCut {
    proxy: Arc<Blackhole>,
    plan: CutPlan,
    history: Arc<History>,
    started: AtomicBool,
    started_by_downgrade: Notify,
}

impl ClientCut {
    pub(crate) fn new(proxy: Arc<Blackhole>, plan: CutPlan, history: Arc<History>) -> Arc<Self> {
        Arc::new(ClientCut {
            proxy,
            plan,
            history,
            started: AtomicBool::new(false),
            started_by_downgrade: Notify::new(),
        })
    }

    /// Client 0 is about to ask for a downgrade: a fault aimed at that starts now,
    /// before the request goes out, unless it has started.
    pub(crate) fn downgrade_asked(&self) {
        if self.plan.at_downgrade && self.start(true) {
            self.started_by_downgrade.notify_one();
        }
    }

    /// Starts the fault unless it has started (as client 0 asks to downgrade, if
    /// `at_downgrade`); whether this call started it.
    fn start(&self, at_downgrade: bool) -> bool {
        if self.started.swap(true, Ordering::SeqCst) {
            return false;
        }
        if at_downgrade {
            self.history
                .record(RUN, What::AimedAtDowngrade { client: 0 });
        }
        if let Some(ms) = self.plan.delay_ms {
            self.history.record(RUN, What::Delayed { client: 0, ms });
            self.proxy.delay_replies(Duration::from_millis(ms));
        } else {
            self.history.record(
                RUN,
                What::Cut {
                    client: 0,
                    replies_only: self.plan.replies_only,
                },
            );
            if self.plan.replies_only {
                self.proxy.cut_replies();
            } else {
                self.proxy.cut();
            }
        }
        true
    }

    /// Starts the fault when it is due and heals it when the plan says.
    pub(crate) async fn run(self: Arc<Self>) {
        let at = Duration::from_millis(self.plan.at_ms);
        if self.plan.at_downgrade {
            tokio::select! {
                () = self.started_by_downgrade.notified() => {}
                () = sleep(at + AIM_FALLBACK) => {
                    self.start(false);
                }
            }
        } else {
            sleep(at).await;
            self.start(false);
        }
        if let Some(ms) = self.plan.heal_after_ms {
            sleep(Duration::from_millis(ms)).await;
            self.history.record(RUN, What::Healed { client: 0 });
            if self.plan.delay_ms.is_some() {
                self.proxy.undelay();
            } else {
                self.proxy.heal();
            }
        }
    }
}
