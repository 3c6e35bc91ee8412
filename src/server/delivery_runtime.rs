//! The delivery runtime: a tokio runtime of its own for the WebSocket sessions (their
//! subscriptions' resolution and serialisation, the writers, the keepalive), whose threads run
//! at a lower OS priority than the rest of jobgate.
//!
//! Why: a large fan-out (a frame and a socket write per subscriber per event, even with the
//! rendering shared, see `graphql::ws` fanout) keeps every worker busy. On one runtime, with
//! no priorities, the HTTP handlers, the job service's writer and the executor then queue
//! behind it: with 1000 subscribers, `submitJob` takes hundreds of milliseconds instead of
//! about 5 ms (BENCHMARKS.md). Here the sessions run on threads niced `nice` steps below
//! jobgate's, so when both want the CPU the kernel gives it to the main runtime's threads
//! first and the fan-out gets what is left; when the main runtime is idle, the fan-out has
//! every core.
//!
//! The sockets stay registered with the main runtime's IO driver, which tokio allows: a task
//! on one runtime may poll IO and timers of another, as long as both run. So this runtime
//! must stop only after the sessions have ended ([`DeliveryRuntime::shutdown`], called once
//! shutdown has waited for the connections), and the main runtime must outlive it.
//!
//! This module owns the runtime and its threads' priority; it must not know what runs on it
//! (the `ws` module spawns the sessions through `WsConfig::delivery`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use tokio::runtime::{Handle, Runtime};

use crate::config::DeliverySettings;

/// The name of the delivery runtime's threads (in `top -H`, /proc/PID/task/*/comm, which
/// keep 15 bytes of it).
pub const THREAD_NAME: &str = "ws-delivery";

/// The running delivery runtime. Dropping it stops its threads without waiting (what
/// [`DeliveryRuntime::shutdown`] waits for).
pub struct DeliveryRuntime {
    runtime: Option<Runtime>,
}

impl DeliveryRuntime {
    /// Starts the runtime `settings` ask for, or none for `threads == 0` (the sessions then
    /// run on the runtime that accepted them).
    pub fn start(settings: &DeliverySettings) -> anyhow::Result<Option<DeliveryRuntime>> {
        if settings.threads == 0 {
            return Ok(None);
        }
        let nice = settings.nice;
        let warned = Arc::new(AtomicBool::new(false));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(settings.threads)
            .thread_name(THREAD_NAME)
            .enable_all()
            // Every thread of this runtime, its blocking pool's included: whatever the
            // sessions do runs below the main runtime.
            .on_thread_start(move || {
                if let Err(e) = lower_this_thread(nice)
                    && !warned.swap(true, Ordering::Relaxed)
                {
                    tracing::warn!(error = %e, nice, "could not lower the WebSocket delivery threads' priority; they compete with requests and commits as equals");
                }
            })
            .build()
            .context("starting the WebSocket delivery runtime")?;
        tracing::info!(
            threads = settings.threads,
            nice,
            "WebSocket sessions run on their own runtime"
        );
        Ok(Some(DeliveryRuntime {
            runtime: Some(runtime),
        }))
    }

    /// Where the sessions are to be spawned.
    pub fn handle(&self) -> Handle {
        self.runtime
            .as_ref()
            .expect("the runtime lives until shutdown")
            .handle()
            .clone()
    }

    /// Stops the runtime once its tasks are done, waiting at most `limit` for them and for
    /// its threads to exit. Call it after the sessions ended: a task still running is
    /// dropped, and its socket with it.
    pub async fn shutdown(mut self, limit: Duration) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        // Joining threads blocks: not on a worker of the main runtime.
        let stopped = tokio::task::spawn_blocking(move || runtime.shutdown_timeout(limit)).await;
        if stopped.is_err() {
            tracing::warn!("the WebSocket delivery runtime did not shut down cleanly");
        }
    }
}

impl Drop for DeliveryRuntime {
    fn drop(&mut self) {
        // Dropping a runtime inside another one panics (it would block): let it go instead.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Raises the calling thread's nice value by `steps` (lowers its priority), capped at 19.
/// On Linux, `setpriority(PRIO_PROCESS, tid)` applies to that one thread, not the process.
/// Raising one's own nice value needs no privilege.
fn lower_this_thread(steps: i32) -> std::io::Result<()> {
    if steps <= 0 {
        return Ok(());
    }
    let tid = rustix::process::Pid::from_raw(nix::unistd::gettid().as_raw());
    let current = rustix::process::getpriority_process(tid)?;
    rustix::process::setpriority_process(tid, (current + steps).min(19))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runtime's threads run `nice` steps below the thread that started it, and the
    /// runtime stops when asked.
    #[tokio::test]
    async fn delivery_threads_run_at_the_lower_priority() {
        let ours = rustix::process::getpriority_process(None).expect("our priority");
        let delivery = DeliveryRuntime::start(&DeliverySettings { threads: 1, nice: 5 })
            .expect("a runtime")
            .expect("threads asked for");
        let theirs = delivery
            .handle()
            .spawn(async {
                let name = std::thread::current().name().map(str::to_owned);
                (
                    name,
                    rustix::process::getpriority_process(None).expect("its priority"),
                )
            })
            .await
            .expect("the task ran");
        assert_eq!(theirs, (Some(THREAD_NAME.to_owned()), (ours + 5).min(19)));
        delivery.shutdown(Duration::from_secs(30)).await;
    }

    #[test]
    fn no_threads_no_runtime() {
        let none =
            DeliveryRuntime::start(&DeliverySettings { threads: 0, nice: 10 }).expect("nothing to fail");
        assert!(none.is_none());
    }
}
