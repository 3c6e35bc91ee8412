//! Logging set-up: jobgate's log as text or JSON, to stderr for the binary. It owns the one
//! description of that log (filter, format), so a jobgate run inside a test's process logs
//! exactly what the binary would; it must not decide what is logged.

use tracing::Dispatch;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::config::LogFormat;

/// jobgate's log: the events `filter` (`--log`, "info" if it does not parse) lets through,
/// formatted as `format` (with ANSI colours if `ansi`), written to `writer`. `init` installs
/// it for the whole process; the test harness installs it on the threads of a jobgate it
/// serves in its own process.
pub fn dispatch<W>(format: LogFormat, filter: &str, ansi: bool, writer: W) -> Dispatch
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer)
        // A log line that cannot be written is lost, nothing more: by default the layer says
        // so with `eprintln!`, which panics when standard error is a closed pipe (the reader
        // of `jobgate 2>&1 | head` went away), taking down the thread that logged.
        .log_internal_errors(false);
    match format {
        LogFormat::Text => Dispatch::new(builder.finish()),
        LogFormat::Json => Dispatch::new(builder.json().finish()),
    }
}

/// Installs jobgate's log, to stderr, as the global tracing subscriber. Call once, from `main`.
pub fn init(format: LogFormat, filter: &str) {
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    dispatch(format, filter, ansi, std::io::stderr).init();
}
