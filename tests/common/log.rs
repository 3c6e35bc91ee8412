//! A jobgate's log as a test sees it: the lines it wrote, in order, whichever way it runs (a
//! process's standard error read by a thread of ours, or the tracing events of a jobgate in
//! the test's own process). It keeps lines and says when more arrive; what they mean is the
//! tests'.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tracing_subscriber::fmt::MakeWriter;

/// The lines of one jobgate's log.
#[derive(Default)]
pub struct Log {
    lines: Mutex<Vec<String>>,
    added: Notify,
}

impl Log {
    pub fn push(&self, line: String) {
        self.lines.lock().unwrap().push(line);
        self.added.notify_waiters();
    }

    /// The whole log so far, one line per line.
    pub fn text(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Waits up to `limit` for a line for which `found` holds, returning it (`None` once the
    /// limit has passed).
    pub async fn line_where(&self, found: impl Fn(&str) -> bool, limit: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            // Registered before looking, so a line pushed in between still wakes us.
            let added = self.added.notified();
            tokio::pin!(added);
            added.as_mut().enable();
            if let Some(line) = self.lines.lock().unwrap().iter().find(|l| found(l)) {
                return Some(line.clone());
            }
            tokio::time::timeout_at(deadline, added).await.ok()?;
        }
    }
}

/// A tracing writer into a [`Log`]: each event, as formatted, becomes its lines.
#[derive(Clone)]
pub struct LogWriter(pub Arc<Log>);

impl<'w> MakeWriter<'w> for LogWriter {
    type Writer = EventWriter;

    fn make_writer(&'w self) -> EventWriter {
        EventWriter {
            log: self.0.clone(),
            text: Vec::new(),
        }
    }
}

/// One event's text, handed to the log when the formatter is done with it (it writes an
/// event at once, then drops its writer).
pub struct EventWriter {
    log: Arc<Log>,
    text: Vec<u8>,
}

impl Write for EventWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.text.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        for line in String::from_utf8_lossy(&self.text).lines() {
            self.log.push(line.to_owned());
        }
    }
}
