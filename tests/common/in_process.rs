//! jobgate served inside the test's own process, through the binary's own path: the arguments
//! a test would give the binary become a `Config` by `Config::load_from` (as `main` does), a
//! listener is bound on the address they name (127.0.0.1:0), and `jobgate::server::serve`
//! runs on it until its shutdown token is cancelled (what `run` does on SIGTERM). Only signal
//! handling, exit codes and the process itself are left out: tests of those spawn the binary
//! (`process.rs`).
//!
//! Each jobgate gets a Tokio runtime of its own, multi-threaded like `#[tokio::main]`'s, so
//! it neither shares the test's single thread nor stalls when the test blocks, and stopping it
//! drops every task it started (its store, the data directory's lock, its connections). Every
//! thread of that runtime logs through `jobgate::telemetry::dispatch` with jobgate's `--log`
//! filter and `--log-format`, into the server's [`Log`]: the lines the binary would write to
//! standard error, and nothing of the test's own (the Kubernetes emulator logs too).
//!
//! This module starts and stops; it must not decide what a test asserts.

use std::cell::RefCell;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use jobgate::config::Config;
use tokio::net::TcpListener;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::WAIT;
use super::listening::listening_address;
use super::log::{Log, LogWriter};

/// How long stopping waits for what jobgate runs on its runtime's blocking threads.
const RUNTIME_SHUTDOWN: Duration = Duration::from_secs(10);

/// Environment variables a spawned jobgate is started without (`process.rs`); one in the
/// test's process would change how `Config::load_from` reads a test's arguments here.
const UNSET_FOR_JOBGATE: [&str; 2] = ["JOBGATE_API_TOKEN", "JOBGATE_CONFIG"];

thread_local! {
    /// jobgate's log on each thread of its runtime, for as long as the thread lives.
    static LOG_ON_THIS_THREAD: RefCell<Option<tracing::dispatcher::DefaultGuard>> =
        const { RefCell::new(None) };
}

/// A jobgate serving in this process.
pub struct InProcess {
    /// `None` once stopped.
    runtime: Option<Runtime>,
    shutdown: CancellationToken,
    /// `serve` itself: its result once it has stopped.
    serving: Option<JoinHandle<anyhow::Result<()>>>,
}

impl InProcess {
    /// Starts jobgate with `args` (the binary's flags, without its name); returns once it
    /// listens, with the address, or why it did not start.
    pub async fn start(args: &[String], log: Arc<Log>) -> Result<(InProcess, SocketAddr), String> {
        for name in UNSET_FOR_JOBGATE {
            if std::env::var_os(name).is_some() {
                return Err(format!(
                    "{name} is set in the tests' environment: a jobgate served in-process would read it"
                ));
            }
        }
        let argv = std::iter::once(OsString::from("jobgate")).chain(args.iter().map(OsString::from));
        let config = Config::load_from(argv).map_err(|e| format!("its configuration: {e}"))?;
        let dispatch =
            jobgate::telemetry::dispatch(config.log_format, &config.log, false, LogWriter(log.clone()));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("jobgate")
            .on_thread_start(move || {
                let guard = tracing::dispatcher::set_default(&dispatch);
                LOG_ON_THIS_THREAD.with(|slot| *slot.borrow_mut() = Some(guard));
            })
            .on_thread_stop(|| LOG_ON_THIS_THREAD.with(|slot| drop(slot.borrow_mut().take())))
            .build()
            .map_err(|e| format!("building its runtime: {e}"))?;
        // Bound as `run` binds it, on jobgate's runtime.
        let listen = config.listen;
        let listener = runtime
            .spawn(TcpListener::bind(listen))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("binding {listen}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let shutdown = CancellationToken::new();
        let mut serving = runtime.spawn(jobgate::server::serve(config, listener, shutdown.clone()));
        // Ready as the binary is ready: once it says it listens (having opened the store and
        // recovered), so a test begins where it began with a spawned jobgate.
        let said = log.line_where(|line| listening_address(line) == Some(addr), WAIT);
        let outcome = tokio::select! {
            said = said => said.map(drop).ok_or_else(|| format!("it did not say it listens on {addr} within {WAIT:?}")),
            ended = &mut serving => Err(format!("it stopped: {ended:?}")),
        };
        let mut server = InProcess {
            runtime: Some(runtime),
            shutdown,
            serving: Some(serving),
        };
        match outcome {
            Ok(()) => Ok((server, addr)),
            Err(why) => {
                server.abort();
                Err(why)
            }
        }
    }

    /// Stops jobgate as SIGTERM stops the binary (its shutdown token), waits for `serve` to
    /// return, then drops whatever it left on its runtime; returns what `serve` returned.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        let serving = self.serving.take().expect("jobgate is serving");
        let result = serving.await.unwrap_or_else(|e| Err(e.into()));
        let runtime = self.runtime.take().expect("jobgate's runtime is running");
        // A runtime may not be dropped on an asynchronous thread.
        tokio::task::spawn_blocking(move || runtime.shutdown_timeout(RUNTIME_SHUTDOWN))
            .await
            .expect("jobgate's runtime shut down");
        result
    }

    /// Ends jobgate at once, as kill -9 would end the process (but within this one): every
    /// task it started is dropped, with what each held; jobs' processes are left running.
    /// Blocks until its runtime has stopped.
    pub fn abort(&mut self) {
        self.shutdown.cancel();
        if let Some(runtime) = self.runtime.take() {
            // A runtime may not be dropped on an asynchronous thread, and `abort` runs on one.
            let stopping = std::thread::spawn(move || runtime.shutdown_timeout(RUNTIME_SHUTDOWN));
            let _ = stopping.join();
        }
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.abort();
    }
}
