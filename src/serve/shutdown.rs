//! Graceful shutdown: SIGTERM or ctrl-c (SIGINT) starts it once; every
//! listener then stops accepting and finishes its in-flight requests.

use tokio::sync::watch;

/// Resolves when the process is asked to stop; a handle clones cheaply and
/// every clone sees the same signal.
#[derive(Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

/// Starts it by hand (tests, or a fatal listener error).
pub struct Trigger {
    tx: watch::Sender<bool>,
}

impl Trigger {
    pub fn fire(&self) {
        self.tx.send_replace(true);
    }
}

/// A shutdown handle and its trigger.
pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Trigger { tx }, Shutdown { rx })
}

impl Shutdown {
    /// Waits until shutdown has begun.
    pub async fn wait(mut self) {
        // An error means every trigger is gone: nobody can stop us but a
        // signal, which `watch_signals` turns into a fire while it runs.
        let _ = self.rx.wait_for(|&stop| stop).await;
    }
}

/// Fires `trigger` on SIGTERM or ctrl-c. Failing to install a handler is
/// logged and leaves the other one working.
pub async fn watch_signals(trigger: Trigger) {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!("cannot listen for ctrl-c: {e}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::warn!("ctrl-c: shutting down"),
        () = term => tracing::warn!("SIGTERM: shutting down"),
    }
    trigger.fire();
}
