//! The archive of jobs' output: the [`LogSink`] executors hand lines to, which writes them
//! to the store in batches, and tells readers when a job's archive grew.
//!
//! Lines are queued in memory and written by one task, one store transaction per batch
//! (every queued append, up to a batch's size), beside the job writer's transactions and
//! never inside them: a burst of output costs a few commits, and a submission never waits for
//! log lines. After each commit the jobs whose archives grew are announced
//! ([`LogArchiver::grown`]) so that `jobLogs` followers read on.
//!
//! When the store refuses writes (a full disk, a database that is away), the batch is tried
//! again every second or so; lines wait in a bounded buffer (`--log-archive-buffer-bytes`),
//! the failures are counted (`jobgate_log_archive_write_failures_total`) and logged once per
//! outage. A job whose lines no longer fit is cut: its archive is closed with a marker saying
//! lines were lost (`jobgate_log_archive_lost_lines_total`), and its followers stop. Accepted
//! jobs are never affected: this path writes only log tables. A gap an executor reports
//! ([`LogSink::gap`]: lines it could not read) is queued in order with the source's lines and
//! never merged into the append before it, so its marker lands where the lines were. On
//! Kubernetes nothing read is lost by a crash: a pod's position is committed with its lines,
//! and a follower resumes from the last committed one.
//!
//! It must not decide what a job's output is (executors read it) nor who may read it (the
//! service's feeds check the caller's scope).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{Notify, broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::executor::{ExecutorError, LogSink, SinkState};
use crate::metrics::Metrics;
use crate::model::{LogGap, LogLine};
use crate::store::{LogAppend, LogAppended, Store, log_chunks::line_bytes};

/// How the archive behaves.
#[derive(Clone, Debug)]
pub struct LogArchiveSettings {
    /// Output archived per job (uncompressed); past it the archive is closed with a marker.
    pub max_bytes_per_job: i64,
    /// Output waiting in memory for the store, over every job.
    pub buffer_bytes: usize,
    /// How long lines may wait to be batched with others before they are written.
    pub flush_interval: Duration,
}

impl Default for LogArchiveSettings {
    fn default() -> Self {
        Self {
            max_bytes_per_job: 64 << 20,
            buffer_bytes: 32 << 20,
            flush_interval: Duration::from_millis(100),
        }
    }
}

/// Most lines and bytes one append (one stored chunk) holds after batching.
const MAX_CHUNK_LINES: usize = 4096;
const MAX_CHUNK_BYTES: usize = 1 << 20;
/// Most appends and bytes one transaction writes.
const MAX_BATCH_APPENDS: usize = 256;
const MAX_BATCH_BYTES: usize = 4 << 20;

/// The archive's writer; shared by executors (as their [`LogSink`]) and the service.
pub struct LogArchiver {
    store: Arc<dyn Store>,
    settings: LogArchiveSettings,
    metrics: Arc<Metrics>,
    state: Mutex<State>,
    /// Wakes the writer task: something was queued.
    queued: Notify,
    /// Job ids whose archive grew (or closed), after each commit.
    grown: broadcast::Sender<Arc<str>>,
    /// Bumped after every write attempt, for [`LogSink::synced`].
    written: watch::Sender<u64>,
    stop: CancellationToken,
    /// Resolves once the writer task has ended.
    done: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for LogArchiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogArchiver")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    queue: VecDeque<(LogAppend, usize)>,
    /// Bytes of the lines in `queue` and in the batch being written.
    buffered: usize,
    /// Appends queued or being written, per job.
    pending: HashMap<String, usize>,
    /// Jobs whose archive takes no more lines.
    closed: HashSet<String>,
    /// Sources whose position another writer moved on, until they read it again.
    stale: HashSet<(String, String)>,
    /// Whether the last write failed (to log an outage once, and its end).
    failing: bool,
}

impl LogArchiver {
    /// Starts the writer task.
    pub fn start(store: Arc<dyn Store>, settings: LogArchiveSettings, metrics: Arc<Metrics>) -> Arc<Self> {
        let archiver = Arc::new(Self {
            store,
            settings,
            metrics,
            state: Mutex::new(State::default()),
            queued: Notify::new(),
            grown: broadcast::channel(4096).0,
            written: watch::Sender::new(0),
            stop: CancellationToken::new(),
            done: tokio::sync::Mutex::new(None),
        });
        let task = tokio::spawn(archiver.clone().write_loop());
        if let Ok(mut done) = archiver.done.try_lock() {
            *done = Some(task);
        }
        archiver
    }

    pub fn settings(&self) -> &LogArchiveSettings {
        &self.settings
    }

    /// Job ids whose archive grew, as each batch commits (a lagging receiver should read
    /// again whatever it follows).
    pub fn grown(&self) -> broadcast::Receiver<Arc<str>> {
        self.grown.subscribe()
    }

    /// Whether lines of the job wait to be written.
    pub fn pending(&self, job_id: &str) -> bool {
        self.lock().pending.contains_key(job_id)
    }

    /// Writes what is queued (one last try, bounded by the caller) and stops.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        self.queued.notify_one();
        if let Some(task) = self.done.lock().await.take() {
            let _ = task.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every holder makes whole changes of plain values; a panic cannot leave them half-made.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn write_loop(self: Arc<Self>) {
        let mut delay = Duration::from_millis(500);
        loop {
            if self.lock().queue.is_empty() {
                if self.stop.is_cancelled() {
                    return;
                }
                tokio::select! {
                    _ = self.queued.notified() => {}
                    _ = self.stop.cancelled() => {}
                }
                // Let a burst gather into one transaction, unless it is big already.
                if !self.stop.is_cancelled() && self.lock().buffered < MAX_BATCH_BYTES {
                    tokio::select! {
                        _ = tokio::time::sleep(self.settings.flush_interval) => {}
                        _ = self.stop.cancelled() => {}
                    }
                }
            }
            let batch = self.take_batch();
            if batch.is_empty() {
                continue;
            }
            let appends: Vec<LogAppend> = batch.iter().map(|(a, _, _)| a.clone()).collect();
            match self
                .store
                .append_logs(&appends, self.settings.max_bytes_per_job)
                .await
            {
                Ok(outcomes) => {
                    delay = Duration::from_millis(500);
                    self.written_ok(batch, outcomes);
                }
                Err(e) => {
                    self.metrics.log_archive_write_failures.inc();
                    let first = {
                        let mut state = self.lock();
                        // Back at the front, in order: nothing is reordered or lost by a retry.
                        for item in batch.into_iter().rev() {
                            state.queue.push_front((item.0, item.1));
                        }
                        !std::mem::replace(&mut state.failing, true)
                    };
                    if first {
                        tracing::warn!(error = %e, "writing jobs' output to the archive failed; retrying, lines wait in memory (--log-archive-buffer-bytes) meanwhile");
                    } else {
                        tracing::debug!(error = %e, "writing jobs' output to the archive failed again");
                    }
                    self.written.send_modify(|v| *v += 1);
                    if self.stop.is_cancelled() {
                        tracing::warn!("stopping with jobs' output not archived");
                        return;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = self.stop.cancelled() => {}
                    }
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    /// The next batch, adjacent appends of one source merged into one chunk. Each item:
    /// the append, its bytes, how many queued appends it stands for.
    fn take_batch(&self) -> Vec<(LogAppend, usize, usize)> {
        let mut state = self.lock();
        let mut batch: Vec<(LogAppend, usize, usize)> = Vec::new();
        let mut bytes = 0;
        while let Some((append, size)) = state.queue.pop_front() {
            if let Some((last, last_size, count)) = batch.last_mut()
                && last.job_id == append.job_id
                && last.source == append.source
                && !last.lost
                && append.gap.is_none()
                && last.lines.len() + append.lines.len() <= MAX_CHUNK_LINES
                && *last_size + size <= MAX_CHUNK_BYTES
                && chains(last, &append)
            {
                last.lines.extend(append.lines);
                last.lost = append.lost;
                if let (Some((_, now)), Some((_, next))) = (&mut last.position, append.position) {
                    *now = next;
                }
                *last_size += size;
                *count += 1;
            } else if batch.len() < MAX_BATCH_APPENDS && (batch.is_empty() || bytes + size <= MAX_BATCH_BYTES)
            {
                batch.push((append, size, 1));
            } else {
                state.queue.push_front((append, size));
                break;
            }
            bytes += size;
        }
        batch
    }

    /// Queues an append (see [`LogSink::append`] and [`LogSink::gap`]).
    fn queue(
        &self,
        job_id: &str,
        source: &str,
        position: Option<(Option<String>, String)>,
        lines: Vec<LogLine>,
        gap: Option<LogGap>,
    ) -> SinkState {
        let mut state = self.lock();
        if state.closed.contains(job_id) {
            return SinkState::Closed;
        }
        if state.stale.contains(&(job_id.to_owned(), source.to_owned())) {
            return SinkState::Stale;
        }
        let size: usize = lines.iter().map(|l| line_bytes(l) as usize).sum();
        let (lines, lost, result) = if state.buffered + size > self.settings.buffer_bytes {
            // No room: the job's archive ends here, saying lines were lost.
            self.metrics.log_archive_lost_lines.inc_by(lines.len() as u64);
            state.closed.insert(job_id.to_owned());
            tracing::warn!(job = %job_id, "the archive's buffer is full while the store refuses writes: this job's archived output ends here, marked truncated");
            (Vec::new(), true, SinkState::Closed)
        } else {
            (lines, false, SinkState::Open)
        };
        let size: usize = lines.iter().map(|l| line_bytes(l) as usize).sum();
        state.queue.push_back((
            LogAppend {
                job_id: job_id.to_owned(),
                source: source.to_owned(),
                // A lost append must land whatever the position: it closes the archive.
                position: if lost { None } else { position },
                lines,
                lost,
                gap,
            },
            size,
        ));
        state.buffered += size;
        *state.pending.entry(job_id.to_owned()).or_default() += 1;
        self.metrics.log_archive_buffered_bytes.set(state.buffered as i64);
        drop(state);
        self.queued.notify_one();
        result
    }

    fn written_ok(&self, batch: Vec<(LogAppend, usize, usize)>, outcomes: Vec<LogAppended>) {
        let mut grown = Vec::new();
        {
            let mut state = self.lock();
            if std::mem::take(&mut state.failing) {
                tracing::info!("writing jobs' output to the archive works again");
            }
            for ((append, size, count), outcome) in batch.into_iter().zip(outcomes) {
                state.buffered = state.buffered.saturating_sub(size);
                if let Some(n) = state.pending.get_mut(&append.job_id) {
                    *n = n.saturating_sub(count);
                    if *n == 0 {
                        state.pending.remove(&append.job_id);
                    }
                }
                match outcome {
                    LogAppended::Appended | LogAppended::Truncated => {
                        self.metrics.log_archive_lines.inc_by(append.lines.len() as u64);
                        if outcome == LogAppended::Truncated {
                            state.closed.insert(append.job_id.clone());
                        }
                        grown.push(append.job_id);
                    }
                    LogAppended::Closed => {
                        state.closed.insert(append.job_id);
                    }
                    LogAppended::Stale => {
                        state.stale.insert((append.job_id, append.source));
                    }
                }
            }
            self.metrics.log_archive_buffered_bytes.set(state.buffered as i64);
        }
        grown.dedup();
        for job in grown {
            let _ = self.grown.send(Arc::from(job));
        }
        self.written.send_modify(|v| *v += 1);
    }
}

/// Whether `next` continues `last`'s position (or neither keeps one).
fn chains(last: &LogAppend, next: &LogAppend) -> bool {
    match (&last.position, &next.position) {
        (None, None) => true,
        (Some((_, now)), Some((Some(from), _))) => now == from,
        _ => false,
    }
}

#[async_trait]
impl LogSink for LogArchiver {
    async fn position(&self, job_id: &str, source: &str) -> Result<Option<String>, ExecutorError> {
        // Asked before resuming: a stale source starts afresh from what is stored.
        self.lock().stale.remove(&(job_id.to_owned(), source.to_owned()));
        self.store.log_position(job_id, source).await.map_err(|e| {
            ExecutorError::Cluster(format!("reading where the archive of job {job_id} ends: {e}"))
        })
    }

    fn append(
        &self,
        job_id: &str,
        source: &str,
        position: Option<(Option<String>, String)>,
        lines: Vec<LogLine>,
    ) -> SinkState {
        self.queue(job_id, source, position, lines, None)
    }

    fn gap(
        &self,
        job_id: &str,
        source: &str,
        position: Option<(Option<String>, String)>,
        gap: LogGap,
    ) -> SinkState {
        self.queue(job_id, source, position, Vec::new(), Some(gap))
    }

    async fn synced(&self, job_id: &str) {
        let mut written = self.written.subscribe();
        loop {
            if !self.pending(job_id) || self.stop.is_cancelled() {
                return;
            }
            tokio::select! {
                _ = written.changed() => {}
                _ = self.stop.cancelled() => return,
            }
        }
    }
}
