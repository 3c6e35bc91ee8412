//! A local job's log: one bounded file under the data directory (`logs/<id>.log`, rotated
//! once to `<id>.log.1`), written only by jobgate from the run's output pipe, and followed
//! live by subscribers. Every line also goes to the archive (the [`LogSink`], in the
//! order written), which keeps the whole output beyond rotation and restarts.
//!
//! The files live where jobs cannot reach them (the data directory is mode 0700 and the logs
//! directory too; each file is created 0600): a job only ever writes to its pipe. This module
//! must not know about runs or phases.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::executor::{LogLine, LogSink};
use crate::model::clip_log_line;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncSeekExt, AsyncWriteExt, BufReader};

/// The last `n` lines of a job's log, reaching into the rotated file when needed; nothing
/// when the job has written nothing yet.
pub(super) async fn read_log_tail(path: &Path, n: usize, max_bytes: u64) -> std::io::Result<Vec<String>> {
    let mut lines = match tail(path, n, max_bytes).await {
        Ok(lines) => lines,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    if lines.len() < n {
        // Older lines live in the rotated file.
        match tail(&path.with_extension("log.1"), n - lines.len(), max_bytes).await {
            Ok(mut older) => {
                older.append(&mut lines);
                lines = older;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(lines)
}

/// The last `n` lines of a file, reading at most `max_bytes` from its end.
pub(super) async fn tail(path: &Path, n: usize, max_bytes: u64) -> std::io::Result<Vec<String>> {
    let mut file = tokio::fs::File::open(path).await?;
    let len = file.metadata().await?.len();
    let start = len.saturating_sub(max_bytes);
    file.seek(std::io::SeekFrom::Start(start)).await?;
    let mut buf = Vec::with_capacity((len - start) as usize);
    file.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf);
    let mut lines: Vec<&str> = text.lines().collect();
    if start > 0 && !lines.is_empty() {
        lines.remove(0); // probably cut mid-line
    }
    let skip = lines.len().saturating_sub(n);
    Ok(lines[skip..].iter().map(|l| (*l).to_owned()).collect())
}

/// Longest line kept in a log; longer ones are cut.
const MAX_LINE: usize = 16 * 1024;

/// Copies a run's output into its job's log, each line archived as the run's (`source`).
pub(super) async fn copy_lines(stream: impl AsyncRead + Unpin, log: Arc<LogWriter>, source: String) {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if line.last() != Some(&b'\n') {
                    line.push(b'\n');
                }
                log.append(&line, &source).await;
            }
        }
    }
}

/// A job's log file, bounded: past `max_bytes` it is rotated to `<id>.log.1`, so at most
/// twice that is kept.
pub(super) struct LogWriter {
    path: PathBuf,
    max_bytes: u64,
    file: tokio::sync::Mutex<Option<(tokio::fs::File, u64)>>,
    /// Each line as written, for followers.
    lines: tokio::sync::broadcast::Sender<Arc<str>>,
    /// The archive, and the job's id there.
    archive: Option<(Arc<dyn LogSink>, String)>,
}

/// Lines a follower may fall behind by before it is told some were skipped.
const FOLLOW_BUFFER: usize = 1024;

impl LogWriter {
    pub(super) fn new(
        path: PathBuf,
        max_bytes: u64,
        archive: Option<(Arc<dyn LogSink>, String)>,
    ) -> Arc<Self> {
        Arc::new(Self {
            archive,
            path,
            max_bytes,
            file: tokio::sync::Mutex::new(None),
            lines: tokio::sync::broadcast::channel(FOLLOW_BUFFER).0,
        })
    }

    /// The last `n` lines and a receiver of every later one, taken under the write lock so
    /// that no line is missed or seen twice.
    pub(super) async fn follow(
        &self,
        n: usize,
    ) -> std::io::Result<(Vec<String>, tokio::sync::broadcast::Receiver<Arc<str>>)> {
        let guard = self.file.lock().await;
        let live = self.lines.subscribe();
        let past = read_log_tail(&self.path, n, self.max_bytes).await?;
        drop(guard);
        Ok((past, live))
    }

    /// Appends a line `source` (a run's name) wrote.
    pub(super) async fn append(&self, line: &[u8], source: &str) {
        let mut guard = self.file.lock().await;
        // Under the lock, so that the archive has the lines in the file's order; whatever
        // becomes of the file.
        if let Some((sink, job)) = &self.archive {
            let text = clip_log_line(&String::from_utf8_lossy(line));
            let source = (!source.is_empty()).then(|| source.to_owned());
            sink.append(job, "", None, vec![LogLine { source, text }]);
        }
        if guard.is_none() {
            let file = tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(&self.path)
                .await;
            let Ok(file) = file else { return };
            let len = file.metadata().await.map(|m| m.len()).unwrap_or(0);
            *guard = Some((file, len));
        }
        let Some((file, len)) = guard.as_mut() else { return };
        if *len + line.len() as u64 > self.max_bytes {
            let _ = file.flush().await;
            let _ = tokio::fs::rename(&self.path, self.path.with_extension("log.1")).await;
            let fresh = tokio::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .mode(0o600)
                .open(&self.path)
                .await;
            match fresh {
                Ok(fresh) => {
                    *file = fresh;
                    *len = 0;
                }
                Err(_) => return,
            }
        }
        if file.write_all(line).await.is_ok() {
            *len += line.len() as u64;
            if self.lines.receiver_count() > 0 {
                let text = String::from_utf8_lossy(line);
                let _ = self.lines.send(Arc::from(text.trim_end_matches(['\n', '\r'])));
            }
        }
    }

    pub(super) async fn last_lines(&self, n: usize) -> Vec<String> {
        tail(&self.path, n, 64 * 1024).await.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tail_returns_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, text).unwrap();
        let lines = tail(&path, 3, 1 << 20).await.unwrap();
        assert_eq!(lines, vec!["line 97", "line 98", "line 99"]);
        let few = tail(&path, 3, 20).await.unwrap();
        assert_eq!(few.last().map(String::as_str), Some("line 99"));
    }
}
